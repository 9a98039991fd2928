package fdbjobs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// The two types of couch_jobs_tests.erl: T1 with a 2 s timeout, T2 with 3 s.
const (
	t1 = "t1"
	t2 = "42"
	j1 = "j1"
	j2 = "j2"
)

// testWait bounds every wait of a test, so that a bug fails the test
// instead of hanging it; nothing is timed against it.
const testWait = 2 * time.Minute

type bundle struct {
	c     *Client
	db    kv.Database
	clock *clockwork.FakeClock
	ctx   context.Context
}

type bundleOpt func(*Config)

// setup returns a client on a fresh database with a fake clock and the two
// test types registered. The client is not started.
func setup(t *testing.T, opts ...bundleOpt) *bundle {
	t.Helper()
	db := kvtest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0))
	cfg := Config{Clock: clock, NotifierHoldoff: time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(db, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	t.Cleanup(c.Stop)
	require.NoError(t, c.SetTypeTimeout(ctx, nil, t1, 2*time.Second))
	require.NoError(t, c.SetTypeTimeout(ctx, nil, t2, 3*time.Second))
	return &bundle{c: c, db: db, clock: clock, ctx: ctx}
}

func (b *bundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.c.Start(b.ctx))
}

func (b *bundle) state(t *testing.T, typ, id string) State {
	t.Helper()
	s, err := b.c.JobState(b.ctx, nil, typ, id)
	require.NoError(t, err)
	return s
}

func (b *bundle) data(t *testing.T, typ, id string) string {
	t.Helper()
	d, err := b.c.JobData(b.ctx, nil, typ, id)
	require.NoError(t, err)
	return string(d)
}

func (b *bundle) stime(t *testing.T, typ, id string) int64 {
	t.Helper()
	r, err := b.c.readJob(b.ctx, nil, typ, id)
	require.NoError(t, err)
	return r.stime
}

func (b *bundle) add(t *testing.T, typ, id, data string, stime int64) {
	t.Helper()
	require.NoError(t, b.c.Add(b.ctx, nil, typ, id, raw(data), stime))
}

func (b *bundle) accept(t *testing.T, typ string) *Job {
	t.Helper()
	j, err := b.c.Accept(b.ctx, typ, AcceptOptions{})
	require.NoError(t, err)
	return j
}

func (b *bundle) pendingCounter(t *testing.T, typ string) []byte {
	t.Helper()
	v, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(b.c.k.watchesPending(typ)).Get()
	})
	require.NoError(t, err)
	return v
}

// count returns how many keys the job layer holds in the subspace sub of
// its layout (keyPending, keyLeases, ...).
func (b *bundle) count(t *testing.T, sub int) int {
	t.Helper()
	n, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) (int, error) {
		kvs, err := tr.GetRange(b.c.k.root.Sub(sub), kv.RangeOptions{}).GetSliceWithError()
		return len(kvs), err
	})
	require.NoError(t, err)
	return n
}

// requireClean checks that no job is left running and that no lease
// outlives the activity monitor: a lease its worker could not clear (a job
// removed or lost) goes at the monitor's second pass, which re-enqueues
// nothing.
func (b *bundle) requireClean(t *testing.T) {
	t.Helper()
	types, err := b.c.Types(b.ctx, nil)
	require.NoError(t, err)
	for _, typ := range types {
		active, err := b.c.ActiveJobIDs(b.ctx, nil, typ)
		require.NoError(t, err)
		require.Empty(t, active, "jobs of type %s left running", typ)
		m := b.c.NewActivityMonitor(typ)
		for range 2 {
			n, _, err := m.Check(b.ctx)
			require.NoError(t, err)
			require.Zero(t, n)
		}
	}
	require.Zero(t, b.count(t, keyLeases), "leases left after the activity monitor's pass")
	b.requirePendingKeys(t)
}

// requirePendingKeys checks doc.go's "Pending keys" on a store at rest:
// each pending row has its PENDING key at its shard and scheduled time,
// each PENDING key is a pending row's, and holds nothing or the row
// (pendingValue).
func (b *bundle) requirePendingKeys(t *testing.T) {
	t.Helper()
	pending := map[string][]byte{}
	for _, e := range b.scan(t, b.c.k.data) {
		r, err := decodeRow(e.Value)
		require.NoError(t, err)
		if r.state != Pending {
			continue
		}
		tup, err := b.c.k.data.Unpack(e.Key)
		require.NoError(t, err)
		pending[string(b.c.k.pendingKey(tup[0].(string), r.shard, r.stime, tup[1].(string)))] = e.Value
	}
	for _, e := range b.scan(t, b.c.k.pending) {
		row, ok := pending[string(e.Key)]
		require.True(t, ok, "pending key %s without its pending row", e.Key)
		if len(e.Value) > 0 {
			require.Equal(t, row, e.Value, "pending key %s holds another row than its job's", e.Key)
		}
		delete(pending, string(e.Key))
	}
	require.Empty(t, pending, "pending rows without their pending keys")
}

// scan reads every key of ss, a page per transaction.
func (b *bundle) scan(t *testing.T, ss subspace.Subspace) []kv.KeyValue {
	t.Helper()
	begin, end := ss.FDBRangeKeys()
	rg := kv.KeyRange{Begin: begin, End: end}
	var out []kv.KeyValue
	for {
		kvs, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
			return tr.GetRange(rg, kv.RangeOptions{Limit: 500}).GetSliceWithError()
		})
		require.NoError(t, err)
		out = append(out, kvs...)
		if len(kvs) < 500 {
			return out
		}
		rg.Begin = kv.KeyAfter(kvs[len(kvs)-1].Key)
	}
}

func raw(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// next waits for the next event of s.
func next(t *testing.T, ctx context.Context, s *Subscription) Event {
	t.Helper()
	e, err := s.Wait(ctx)
	require.NoError(t, err)
	return e
}

// versionstamp returns a complete versionstamp for tests of the encoding.
func versionstamp(b byte) tuple.Versionstamp {
	var v tuple.Versionstamp
	v.TransactionVersion[9] = b
	return v
}

// variant is how a couch_jobs test runs: as written (plain), or with a
// fault injected by prep and options for the bundle.
type variant struct {
	prep func(*bundle)
	opts []bundleOpt
}

var plain = variant{prep: func(*bundle) {}}

// setup makes the variant's bundle, not started.
func (v variant) setup(t *testing.T) *bundle {
	t.Helper()
	b := setup(t, v.opts...)
	v.prep(b)
	return b
}

// started makes the variant's bundle and starts its client.
func (v variant) started(t *testing.T) *bundle {
	t.Helper()
	b := v.setup(t)
	b.start(t)
	return b
}

// typeLoop lets a test follow and hold b's type-check loop: synced gets a
// signal after each sync, and hold stops the loop after its next read
// (reading signals it) until the returned release is called.
type typeLoop struct {
	synced  chan struct{}
	reading chan struct{}
	gate    atomic.Pointer[chan struct{}]
}

// followTypeLoop installs typeLoop's hooks on b's Client; call it before
// the Client starts.
func (b *bundle) followTypeLoop() *typeLoop {
	l := &typeLoop{synced: make(chan struct{}, 1), reading: make(chan struct{}, 1)}
	b.c.hooks.typesSynced = func() {
		select {
		case l.synced <- struct{}{}:
		default:
		}
	}
	b.c.hooks.typesRead = func() {
		if g := l.gate.Load(); g != nil {
			l.reading <- struct{}{}
			<-*g
		}
	}
	return l
}

// hold makes the loop stop after its next read, until release.
func (l *typeLoop) hold() (release func()) {
	ch := make(chan struct{})
	l.gate.Store(&ch)
	return func() {
		l.gate.Store(nil)
		close(ch)
	}
}

// plainStore reports whether the test runs on the embedded store as it is:
// no injected faults or latency, not FoundationDB, not the race detector.
// Only there are exact counts of runs and attempts per commit bounded.
func plainStore(t *testing.T) bool {
	t.Helper()
	_, faults, err := faultkv.FromEnv()
	require.NoError(t, err)
	latency, err := kv.LatencyFromEnv()
	require.NoError(t, err)
	return !testutil.Race && !faults && latency.IsZero() && !kvtest.OnFoundationDB(t)
}

// startMembers starts n Clients on db, scheduled times in milliseconds,
// each a member of the same cluster (Config.Members), so that each owns
// its part of the queue's shards as a cluster's nodes do.
func startMembers(ctx context.Context, t *testing.T, db kv.Database, n int) []*Client {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}
	var out []*Client
	for i := range names {
		c, err := New(db, Config{TimeUnit: time.Millisecond, Members: func() (string, []string) { return names[i], names }})
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(c.Stop)
		out = append(out, c)
	}
	return out
}
