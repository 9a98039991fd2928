package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

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
	r := newTestRun(Replication{}, ft)
	r.tgt = r.src
	r.baseID, r.sessionID = "base", "session"
	r.ready = make(chan struct{})
	close(r.ready)
	r.committedSeq = json.RawMessage("0")
	r.tracker = newSeqTracker(json.RawMessage("0"))
	r.tracker.done(r.tracker.begin(json.RawMessage("7")))

	ckDone := make(chan error, 1)
	go func() {
		_, err := r.doCheckpoint(ctx)
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
