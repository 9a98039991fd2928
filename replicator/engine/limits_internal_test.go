package engine

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
)

// The documented bound of a run with the default tunables.
func TestMemoryBoundDefault(t *testing.T) {
	require.EqualValues(t, 456<<20, MemoryBound(Replication{}))
	more := MemoryBound(Replication{WorkerProcesses: 8, HTTPConnections: 40})
	require.Greater(t, more, MemoryBound(Replication{}), "the bound grows with the tunables")
}

// A _bulk_get result over its limit stops the parse with errPartTooLarge
// having handed over the documents before it; a reply of many results
// within the limit is read whole.
func TestParseBulkGetResultMax(t *testing.T) {
	ok := `{"id":"a","docs":[{"ok":{"_id":"a","_rev":"1-x"}}]}`
	var got []string
	each := func(d *doc) error { got = append(got, d.ID); return nil }
	in := &endless{prefix: `{"results":[` + ok + `,{"id":"b","docs":[{"ok":{"_id":"b","v":"`, fill: 'x'}
	err := parseBulkGet(in, 4096, each)
	require.ErrorIs(t, err, errPartTooLarge)
	require.Equal(t, []string{"a"}, got)
	require.Less(t, in.read, int64(len(in.prefix)+2*4096))

	got = nil
	many := `{"results":[` + strings.Repeat(ok+",", 999) + ok + `]}`
	require.NoError(t, parseBulkGet(strings.NewReader(many), 4096, each))
	require.Len(t, got, 1000)

	stop := fmt.Errorf("stop")
	require.ErrorIs(t, parseBulkGet(strings.NewReader(many), 4096, func(*doc) error { return stop }), stop)
}

// gzipped is data gzip-compressed.
func gzipped(t *testing.T, data []byte, times int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	require.NoError(t, err)
	for range times {
		_, err := zw.Write(data)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// A gzip attachment decompressed for a pouchdb-server target stops at
// DocMax, whatever it decompresses to: a decompression bomb fails the
// document with errDocMax, having decoded no more than the limit.
func TestGunzipBomb(t *testing.T) {
	bomb := gzipped(t, make([]byte, 1<<20), 2*DocMax>>20) // 128 MiB of zeros, 128 KiB compressed
	d, err := newDoc(json.RawMessage(`{"_id":"d","_rev":"1-a","_attachments":{"z":{"content_type":"text/plain","follows":true,"encoding":"gzip"}}}`))
	require.NoError(t, err)
	d.Atts = map[string][]byte{"z": bomb}
	d.lease = &docLease{turn: make(chan struct{}, 1)}
	_, _, err = multipartDoc(context.Background(), d, "B", true)
	require.ErrorIs(t, err, errDocMax)
	require.ErrorIs(t, err, couch.ErrBodyTooLarge)
	require.LessOrEqual(t, d.lease.n, int64(DocMax+32<<10))

	// Within the limit it decodes.
	d.lease = &docLease{}
	d.Atts = map[string][]byte{"z": gzipped(t, []byte("zipped"), 1)}
	_, body, err := multipartDoc(context.Background(), d, "B", true)
	require.NoError(t, err)
	require.Contains(t, string(body), "zipped")
}

// Large documents take turns: a lease past LargeDocMin waits while
// another holds the turn, and gets it when that one is released; a wait
// ends with its context.
func TestLargeDocsTakeTurns(t *testing.T) {
	turn := make(chan struct{}, 1)
	first, second := &docLease{turn: turn}, &docLease{turn: turn}
	ctx := context.Background()
	require.NoError(t, first.grow(ctx, LargeDocMin))
	require.False(t, first.held, "a small document takes no turn")
	require.NoError(t, first.grow(ctx, 1))
	require.True(t, first.held)
	require.NoError(t, second.grow(ctx, LargeDocMin))

	done := make(chan error, 1)
	go func() { done <- second.grow(ctx, 1) }()
	select {
	case err := <-done:
		t.Fatalf("a second large document did not wait for the turn: %v", err)
	default:
	}
	first.release()
	require.NoError(t, <-done)
	require.True(t, second.held)

	cctx, cancel := context.WithCancel(ctx)
	third := &docLease{turn: turn}
	go func() { done <- third.grow(cctx, LargeDocMin+1) }()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.False(t, third.held)
	second.release()
	require.Empty(t, turn)

	require.ErrorIs(t, (&docLease{}).grow(ctx, DocMax+1), errDocMax)
}

// rowsFeed is a continuous feed of rows of about size bytes each (their
// revisions' strings), without end.
type rowsFeed struct {
	size  int
	n     int
	buf   []byte
	count chan int // the rows written so far, after each
}

func (f *rowsFeed) Read(p []byte) (int, error) {
	if len(f.buf) == 0 {
		f.n++
		revs := make([]string, 0, f.size/40)
		for i := 0; len(revs)*40 < f.size; i++ {
			revs = append(revs, fmt.Sprintf(`{"rev":"%d-%032x"}`, i+1, f.n))
		}
		f.buf = fmt.Appendf(nil, `{"seq":%d,"id":"doc%d","changes":[%s]}`+"\n", f.n, f.n, strings.Join(revs, ","))
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

// The rows a run reads ahead of its workers stop at ChangesQueueMax bytes,
// however many rows the channel could hold, and move on as the workers
// release theirs.
func TestChangesQueueMax(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const rowSize = 256 << 10
	ft := &fakeTransport{handler: func(int, httpRequest) (*httpResult, error) {
		return &httpResult{status: http.StatusOK, header: http.Header{}, stream: io.NopCloser(&rowsFeed{size: rowSize})}, nil
	}}
	r := newTestReader(Replication{Continuous: true}, ft)
	require.Greater(t, cap(r.rows)*rowSize, 4*ChangesQueueMax, "the channel alone would hold far more")
	go func() { _ = r.read(ctx) }()
	// Each row counts a little more than its bytes: the queue holds
	// fewer than ChangesQueueMax / rowSize of them, and then no more.
	full := func() bool {
		if r.queued.TryAcquire(rowSize) {
			r.queued.Release(rowSize)
			return false
		}
		return true
	}
	testutil.Eventually(t, "the queue fills", func() bool { return len(r.rows) > 0 && full() })
	n := len(r.rows)
	require.LessOrEqual(t, n, ChangesQueueMax/rowSize)
	require.Greater(t, n, ChangesQueueMax/rowSize/4)
	var size int64
	for range n / 2 {
		size += (<-r.rows).size
	}
	r.queued.Release(size) // a worker's batch done
	testutil.Eventually(t, "the reader reads on", func() bool { return len(r.rows) > n/2 && full() })
	require.LessOrEqual(t, len(r.rows), ChangesQueueMax/rowSize)
}

// A feed read with include_docs whose row is too large is read again
// without the documents, from the last complete row; without include_docs
// a row too large fails the feed, naming ChangesRowMax.
func TestChangesRowMaxIncludeDocs(t *testing.T) {
	big := strings.Repeat("x", 2*ChangesRowMax)
	ft := &fakeTransport{}
	ft.handler = func(n int, r httpRequest) (*httpResult, error) {
		if r.query.Get("include_docs") == "true" {
			return streamOf(200, `{"results":[{"seq":1,"id":"a","changes":[{"rev":"1-x"}],"doc":{"_id":"a","_rev":"1-x"}},`+
				`{"seq":2,"id":"b","changes":[{"rev":"1-y"}],"doc":{"_id":"b","_rev":"1-y","v":"`+big+`"}}],"last_seq":2}`), nil
		}
		return streamOf(200, `{"results":[{"seq":2,"id":"b","changes":[{"rev":"1-y"}]}],"last_seq":2}`), nil
	}
	r := newChangesReader(testRep(Replication{}), &peer{t: ft}, json.RawMessage("0"), true, clockwork.NewRealClock(), zerolog.Nop())
	got := collectChanges(t, r, context.Background(), 2)
	require.Equal(t, "a", got[0].ID)
	require.NotNil(t, got[0].Doc)
	require.Equal(t, "b", got[1].ID)
	require.Nil(t, got[1].Doc)
	reqs := ft.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, "1", reqs[1].query.Get("since"), "read again from the last complete row")
	require.Empty(t, reqs[1].query.Get("include_docs"))

	ft.handler = func(n int, r httpRequest) (*httpResult, error) {
		return streamOf(200, `{"results":[{"seq":1,"id":"`+big+`"}]}`), nil
	}
	r = newTestReader(Replication{}, ft)
	err := r.read(context.Background())
	require.ErrorIs(t, err, ErrChangesFeed)
	require.ErrorIs(t, err, couch.ErrBodyTooLarge)
	require.ErrorContains(t, err, "sent a row of more than 1048576 bytes (ChangesRowMax)")
}
