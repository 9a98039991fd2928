package fdbjobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
)

// endAll accepts n jobs of kind "cnt" inserted now and ends them in one
// completer batch with outcome, a millisecond of the fake clock apart; it
// returns their ids in the order they ended.
func (b *bundle) endAll(t *testing.T, prefix string, n int, outcome string) []string {
	t.Helper()
	require.NoError(t, b.c.SetTypeTimeout(b.ctx, nil, "cnt", time.Hour))
	for i := range n {
		_, err := b.c.Insert(b.ctx, nil, cntArgs{N: i}, InsertOptions{ID: fmt.Sprintf("%s%03d", prefix, i)})
		require.NoError(t, err)
	}
	jobs, err := b.c.AcceptBatch(b.ctx, "cnt", n, AcceptOptions{})
	require.NoError(t, err)
	require.Len(t, jobs, n)
	ends, ids := make([]*ending, n), make([]string, n)
	for i, j := range jobs {
		ids[i] = j.ID
		e, err := decodeEnvelope(j.Data)
		require.NoError(t, err)
		e.Attempt++
		e.Outcome, e.FinishedAt = outcome, b.clock.Now().UnixMilli()
		ends[i] = &ending{job: j, stime: -1, e: e}
		ends[i].data, err = e.encode()
		require.NoError(t, err)
		b.clock.Advance(time.Millisecond)
	}
	errs, err := b.c.endBatch(ends)
	require.NoError(t, err)
	for _, err := range errs {
		require.NoError(t, err)
	}
	return ids
}

// retainEntries are kind cnt's retention entries of outcome.
func (b *bundle) retainEntries(t *testing.T, outcome string) []retainEntry {
	t.Helper()
	kvs, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]kv.KeyValue, error) {
		return tr.GetRange(b.c.k.retainRange("cnt", outcome, 1<<62), kv.RangeOptions{}).GetSliceWithError()
	})
	require.NoError(t, err)
	var out []retainEntry
	for _, e := range kvs {
		en, err := b.c.k.decodeRetain(e)
		require.NoError(t, err)
		out = append(out, en)
	}
	return out
}

// The jobs one completer transaction finishes share one retention entry
// per outcome, at their latest finish; the sweeper removes them in pages
// of any size, writing a partly swept entry again with the rest, and
// leaves a job that ran again since to its own, later entry.
func TestRetentionEntryPerBatch(t *testing.T) {
	b := setup(t)
	start := b.clock.Now().UnixMilli()
	ids := b.endAll(t, "f", 10, OutcomeCompleted)
	entries := b.retainEntries(t, OutcomeCompleted)
	require.Len(t, entries, 1, "one entry for the batch")
	require.Equal(t, ids, entries[0].ids)
	require.Equal(t, start+9, entries[0].at, "the latest finish")

	// ids[0] runs again and completes later: the entry no longer marks it.
	require.NoError(t, b.c.RetryNow(b.ctx, nil, "cnt", ids[0]))
	b.clock.Advance(time.Second)
	jobs, err := b.c.AcceptBatch(b.ctx, "cnt", 1, AcceptOptions{})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	e, err := decodeEnvelope(jobs[0].Data)
	require.NoError(t, err)
	e.Outcome, e.FinishedAt = OutcomeCompleted, b.clock.Now().UnixMilli()
	en := &ending{job: jobs[0], stime: -1, e: e}
	en.data, err = e.encode()
	require.NoError(t, err)
	errs, err := b.c.endBatch([]*ending{en})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Len(t, b.retainEntries(t, OutcomeCompleted), 2)

	// A page of 3 marks: three jobs go, the entry keeps the other seven.
	// (Under injected faults a page that committed unseen runs again on
	// what it left, and a sweep counts only the pages it saw commit: the
	// exact page and counts are checked on a store without them.)
	_, faults, _ := faultkv.FromEnv()
	var removed []string
	hooks := Sweep{OnRemove: func(_ context.Context, _ kv.Transaction, js []RemovedJob) error {
		for _, j := range js {
			removed = append(removed, j.ID)
		}
		return nil
	}}
	before := start + 9
	page, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (sweptPage, error) {
		removed = nil
		return b.c.sweepOne(b.ctx, tr, "cnt", OutcomeCompleted, before, 3, hooks)
	})
	require.NoError(t, err)
	if !faults {
		require.Equal(t, sweptPage{cleared: 3, more: true}, page)
		require.Equal(t, ids[1:3], removed, "ids[0] ran again since")
		entries = b.retainEntries(t, OutcomeCompleted)
		require.Len(t, entries, 2)
		require.Equal(t, ids[3:], entries[0].ids)
		require.Equal(t, start+9, entries[0].at)
	}

	// The rest, then nothing before ids[0]'s new finish.
	n, err := b.c.sweepOutcome(b.ctx, "cnt", OutcomeCompleted, before, Sweep{})
	require.NoError(t, err)
	if !faults {
		require.Equal(t, 7, n)
	}
	for _, id := range ids[1:] {
		_, err := b.c.JobState(b.ctx, nil, "cnt", id)
		require.ErrorIs(t, err, ErrNotFound, id)
	}
	s, err := b.c.JobState(b.ctx, nil, "cnt", ids[0])
	require.NoError(t, err)
	require.Equal(t, Finished, s)
	n, err = b.c.sweepOutcome(b.ctx, "cnt", OutcomeCompleted, b.clock.Now().UnixMilli(), Sweep{})
	require.NoError(t, err)
	require.LessOrEqual(t, n, 1)
	_, err = b.c.JobState(b.ctx, nil, "cnt", ids[0])
	require.ErrorIs(t, err, ErrNotFound)
	require.Empty(t, b.retainEntries(t, OutcomeCompleted))
}

// Long job ids: an entry holds at most retainEntryBytes of them, so a
// batch of many writes several.
func TestRetentionEntriesBounded(t *testing.T) {
	b := setup(t)
	long := fmt.Sprintf("%0900d-", 0) // 901 bytes and a suffix
	ids := b.endAll(t, long, 20, OutcomeDiscarded)
	entries := b.retainEntries(t, OutcomeDiscarded)
	require.Greater(t, len(entries), 2)
	var all []string
	for _, en := range entries {
		size := 0
		for _, id := range en.ids {
			size += len(id)
		}
		require.LessOrEqual(t, size, retainEntryBytes)
		all = append(all, en.ids...)
	}
	require.ElementsMatch(t, ids, all)
	n, err := b.c.sweepOutcome(b.ctx, "cnt", OutcomeDiscarded, b.clock.Now().UnixMilli(), Sweep{})
	require.NoError(t, err)
	require.LessOrEqual(t, n, 20, "pages that committed unseen are not counted")
	require.Empty(t, b.retainEntries(t, OutcomeDiscarded))
	for _, id := range ids {
		_, err := b.c.JobState(b.ctx, nil, "cnt", id)
		require.ErrorIs(t, err, ErrNotFound, id)
	}
}
