package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// hangBound is how long the tests below wait for something that must not
// block at all before declaring a deadlock (a hang detector, not a speed
// requirement).
const hangBound = 30 * time.Second

// TestProgressDuringCheckpoint checks that Progress answers while a
// checkpoint waits on a peer that does not answer: the job layer polls
// Progress for its heartbeat and must never wait on the checkpoint's
// requests (which, against a frozen peer, last the whole retry budget).
func TestProgressDuringCheckpoint(t *testing.T) {
	inRequest := make(chan struct{}, 1)
	ft := &fakeTransport{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ft.handler = func(n int, r httpRequest) (*httpResult, error) {
		select {
		case inRequest <- struct{}{}:
		default:
		}
		<-ctx.Done() // a frozen peer
		return nil, ctx.Err()
	}
	ck := newTestCheckpointer(ft)
	ck.tracker.done(ck.tracker.begin(json.RawMessage("7"), 1, 0))
	r := &Run{ready: make(chan struct{}), ck: ck}
	close(r.ready)

	ckDone := make(chan error, 1)
	go func() {
		_, err := ck.checkpoint(ctx)
		ckDone <- err
	}()
	select {
	case <-inRequest:
	case <-time.After(hangBound):
		t.Fatal("the checkpoint sent no request")
	}
	progress := make(chan Stats, 1)
	go func() { progress <- r.Progress() }()
	select {
	case s := <-progress:
		require.Equal(t, "7", s.ThroughSeq)
		require.Equal(t, "0", s.CheckpointedSourceSeq, "the checkpoint has not been written yet")
	case <-time.After(hangBound):
		t.Fatal("Progress waited for the checkpoint's requests")
	}
	cancel()
	require.ErrorIs(t, <-ckDone, ErrCheckpoint)
}

// TestFetchOneRetries checks that fetchOne retries only replies cut while
// they are read (after waits of 250 ms doubling): a failed request has been
// retried by the transport.
func TestFetchOneRetries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		res      func() (*httpResult, error)
		requests int
		waits    []time.Duration
	}{
		{"no answer", func() (*httpResult, error) { return nil, errors.New("connection refused") }, 1, nil},
		{"server error", func() (*httpResult, error) { return streamOf(500, `{"error":"unknown"}`), nil }, 1, nil},
		{"not found", func() (*httpResult, error) { return streamOf(404, `{"error":"not_found"}`), nil }, 1, nil},
		{"cut reply", func() (*httpResult, error) {
			return &httpResult{status: 200, header: http.Header{"Content-Type": {"application/json"}},
				stream: io.NopCloser(strings.NewReader(`[{"ok":{"_id":"a"`))}, nil
		}, 3, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeTransport{handler: func(int, httpRequest) (*httpResult, error) { return tc.res() }}
			w := newTestWorkers(Replication{}, ft)
			w.rep.RetriesPerRequest = 2
			err := throughWaits(t, ft, func(c clockwork.Clock) { w.clock = c }, func(ctx context.Context) error {
				return w.fetchOne(ctx, "a", []string{"1-x"}, nil, &batchWriter{w: w, ctx: ctx})
			}, tc.waits...)
			require.ErrorIs(t, err, ErrOpenRevs)
			require.Len(t, ft.requests(), tc.requests)
		})
	}
}
