package fdbjobs

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

func TestConfigValidation(t *testing.T) {
	db := kvtest.NewDB(t)
	_, err := New(nil, Config{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"negative jitter", Config{ActivityMonitorMaxJitter: -1}},
		{"negative missing-timeout check", Config{MissingTimeoutCheck: -1}},
		{"negative holdoff", Config{NotifierHoldoff: -1}},
		{"negative type check period", Config{TypeCheckPeriod: -1}},
		{"negative batch", Config{BatchSize: -1}},
		{"negative increment", Config{BatchIncrement: -1}},
		{"factor 1", Config{BatchFactor: 1}},
		{"factor above 1", Config{BatchFactor: 1.5}},
		{"negative factor", Config{BatchFactor: -0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(db, tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	c, err := New(db, Config{})
	require.NoError(t, err)
	require.Equal(t, BatchSizeDefault, c.cfg.BatchSize)
	require.Equal(t, NotifierHoldoffDefault, c.cfg.NotifierHoldoff)
}

func TestArgumentValidation(t *testing.T) {
	b := setup(t)
	require.ErrorIs(t, b.c.SetTypeTimeout(b.ctx, nil, t1, 0), ErrInvalidArgument)
	require.ErrorIs(t, b.c.SetTypeTimeout(b.ctx, nil, "", time.Second), ErrInvalidArgument)
	_, err := b.c.AcceptBatch(b.ctx, t1, 0, AcceptOptions{})
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = b.c.AcceptBatch(b.ctx, t1, MaxBatch+1, AcceptOptions{})
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = b.c.PendingCount(b.ctx, nil, t1, -1, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = b.c.UpdateBatch(b.ctx, nil, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = b.c.FinishBatch(b.ctx, nil, []Completion{{Job: &Job{Type: t1, ID: j1}}})
	require.ErrorIs(t, err, ErrInvalidArgument, "a Job not returned by Accept")
	b.add(t, t1, j1, "", 0)
	job := b.accept(t, t1)
	_, err = b.c.FinishBatch(b.ctx, nil, []Completion{{Job: job}, {Job: job}})
	require.ErrorIs(t, err, ErrInvalidArgument, "the same job twice")
}

func TestPendingCountAndActiveJobIDs(t *testing.T) {
	b := setup(t)
	for i := range 10 {
		b.add(t, t1, fmt.Sprintf("j%d", i), "", int64(i))
	}
	for _, tc := range []struct {
		max   int64
		limit int
		want  int
	}{
		{0, 0, 10}, // 0 means the default maximum
		{4, 0, 5},
		{4, 3, 3},
		{100, 0, 10},
	} {
		got, err := b.c.PendingCount(b.ctx, nil, t1, tc.max, tc.limit)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "max %d limit %d", tc.max, tc.limit)
	}
	jobs, err := b.c.AcceptBatch(b.ctx, t1, 3, AcceptOptions{MaxScheduledTime: 2})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	ids, err := b.c.ActiveJobIDs(b.ctx, nil, t1)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"j0", "j1", "j2"}, ids)
	n, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
	require.NoError(t, err)
	require.Equal(t, 7, n)
}

// FoldJobs streams across transactions: more jobs than one batch, each seen
// once, in id order.
func TestFoldJobsStreams(t *testing.T) {
	b := setup(t)
	const n = 2*FoldBatchDefault + 7
	addAll := func(db kv.Database, c *Client) {
		for i := 0; i < n; i += 100 {
			_, err := db.Transact(b.ctx, func(tr kv.Transaction) (any, error) {
				for k := i; k < min(n, i+100); k++ {
					if err := c.Add(b.ctx, tr, t1, fmt.Sprintf("f%05d", k), nil, 0); err != nil {
						return nil, err
					}
				}
				return nil, nil
			})
			require.NoError(t, err)
		}
	}
	addAll(b.db, b.c)
	var ids []string
	require.NoError(t, b.c.FoldJobs(b.ctx, t1, func(j JobInfo) error {
		ids = append(ids, j.ID)
		return nil
	}))
	require.Len(t, ids, n)
	for i, id := range ids {
		require.Equal(t, fmt.Sprintf("f%05d", i), id)
	}
	// Under a loaded cluster's read errors, batches shrink and are read
	// again: still every job once, in order.
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	faulty, err := New(faultkv.Wrap(b.db, faultkv.Options{Seed: seed, ReadTooOld: 0.3, ProcessBehind: 0.2, FutureVersion: 0.1}), Config{})
	require.NoError(t, err)
	var again []string
	require.NoError(t, faulty.FoldJobs(b.ctx, t1, func(j JobInfo) error {
		again = append(again, j.ID)
		return nil
	}))
	require.Equal(t, ids, again)

	stop := fmt.Errorf("stop")
	seen := 0
	err = b.c.FoldJobs(b.ctx, t1, func(JobInfo) error {
		seen++
		if seen == 3 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 3, seen)

	// The first batch is a few rows (their size unknown); small rows make
	// the next ones full. Counted on a store without injected faults: a
	// read error (FDBREP_KV_FAULTS) shrinks a batch and reads it again.
	clean := kvtest.OpenEmbedded(t, embedded.Options{InMemory: true})
	cleanClient, err := New(clean, Config{})
	require.NoError(t, err)
	t.Cleanup(cleanClient.Stop)
	require.NoError(t, cleanClient.SetTypeTimeout(b.ctx, nil, t1, 2*time.Second))
	addAll(clean, cleanClient)
	counted := &countingDB{Database: clean}
	plain, err := New(counted, Config{})
	require.NoError(t, err)
	require.NoError(t, plain.FoldJobs(b.ctx, t1, func(JobInfo) error { return nil }))
	require.LessOrEqual(t, counted.n.Load(), int64(5))
}

// countingDB counts the transactions created on it.
type countingDB struct {
	kv.Database
	n atomic.Int64
}

func (d *countingDB) CreateTransaction() (kv.Transaction, error) {
	d.n.Add(1)
	return d.Database.CreateTransaction()
}

// A subscription on one node sees the work done on another.
func TestSubscribeFromAnotherNode(t *testing.T) {
	b := setup(t)
	other, err := New(b.db, Config{Clock: b.clock})
	require.NoError(t, err)
	require.NoError(t, other.Start(b.ctx))
	t.Cleanup(other.Stop)

	b.add(t, t1, j1, "", 0)
	sub, _, _, err := other.Subscribe(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	job := b.accept(t, t1)
	require.Equal(t, Running, next(t, b.ctx, sub).State)
	require.NoError(t, b.c.Update(b.ctx, nil, job, raw(`{"p":1}`)))
	require.Equal(t, Event{Type: t1, ID: j1, State: Running, Data: raw(`{"p":1}`)}, next(t, b.ctx, sub))
	require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
	require.Equal(t, Finished, next(t, b.ctx, sub).State)
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Pending: "pending", Running: "running", Finished: "finished", NotFound: "not_found", 0: "State(0)"} {
		require.Equal(t, want, s.String())
	}
}

func TestRowEncoding(t *testing.T) {
	for _, r := range []*row{
		{state: Pending, stime: 5, data: []byte(`{}`)},
		{state: Finished, stime: 7, prev: lock{token: []byte("0123456789abcdef"), index: 2}, data: []byte(`{"a":1}`), addToken: []byte("t")},
		{state: Running, seq: versionstamp(3), lock: lock{token: []byte("0123456789abcdef"), index: 1}, stime: 1, resubmit: true, data: []byte(`[]`)},
	} {
		v, vs := encodeRow(r)
		require.False(t, vs)
		got, err := decodeRow(v)
		require.NoError(t, err)
		r.stored, r.storedData = r.state, r.data // what the store holds, for its count
		if r.state == Running {
			r.storedSeq, r.storedToken = r.seq, r.lock.token // its lease
		}
		require.Equal(t, r, got)
	}
	_, err := decodeRow([]byte("garbage"))
	require.Error(t, err)
}

// Job reads state and data with one read.
func TestJobReadsStateAndData(t *testing.T) {
	b := setup(t)
	_, _, err := b.c.Job(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, ErrNotFound)
	b.add(t, t1, j1, `{"v":1}`, 0)
	st, data, err := b.c.Job(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.Equal(t, Pending, st)
	require.JSONEq(t, `{"v":1}`, string(data))
	b.accept(t, t1)
	st, _, err = b.c.Job(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.Equal(t, Running, st)
}

// Reenqueue takes a running job back at once: it is pending and
// acceptable again, and the old worker is fenced off.
func TestReenqueue(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	ok, err := b.c.Reenqueue(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.False(t, ok, "a pending job is left alone")
	old := b.accept(t, t1)
	ok, err = b.c.Reenqueue(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.True(t, ok)
	st, _, err := b.c.Job(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.Equal(t, Pending, st)
	require.ErrorIs(t, b.c.Update(b.ctx, nil, old, nil), ErrHalt)
	j := b.accept(t, t1)
	require.Equal(t, j1, j.ID)
	require.NoError(t, b.c.Update(b.ctx, nil, j, nil))
	ids, err := b.c.ActiveJobIDs(b.ctx, nil, t1)
	require.NoError(t, err)
	require.Equal(t, []string{j1}, ids, "one activity entry: the new claim's")
	ok, err = b.c.Reenqueue(b.ctx, nil, t1, "missing")
	require.NoError(t, err)
	require.False(t, ok)
}

// Accept and PendingCount without a maximum scheduled time take the jobs
// scheduled up to now, in Config.TimeUnit: a job scheduled for later is
// neither taken nor counted before its time (it was, up to 2^36).
func TestDefaultMaxScheduledTimeIsNow(t *testing.T) {
	for _, unit := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprint(unit), func(t *testing.T) {
			b := setup(t, func(c *Config) { c.TimeUnit = unit })
			per := int64(cmp.Or(unit, TimeUnitDefault))
			now := b.clock.Now().UnixNano() / per
			later := now + int64(time.Hour)/per
			require.NoError(t, b.c.Add(b.ctx, nil, t1, "later", json.RawMessage(`{}`), later))
			n, err := b.c.PendingCount(b.ctx, nil, t1, 0, 0)
			require.NoError(t, err)
			require.Zero(t, n, "not due")
			_, err = b.c.Accept(b.ctx, t1, AcceptOptions{})
			require.ErrorIs(t, err, ErrNotFound, "a job scheduled for later is not taken now")

			b.clock.Advance(time.Hour)
			n, err = b.c.PendingCount(b.ctx, nil, t1, 0, 0)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			job, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
			require.NoError(t, err)
			require.Equal(t, "later", job.ID)
		})
	}
}
