package fdbjobs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// SetData changes the data of a job that no worker holds and nothing
// else: its state, scheduled time and queue place stay; a running job's
// data is its holder's to write.
func TestSetData(t *testing.T) {
	b := setup(t)
	b.start(t)
	b.add(t, t1, "pending", `{"v":1}`, 5)
	b.add(t, t1, "finished", `{"v":1}`, 1)
	b.add(t, t1, "running", `{"v":1}`, 2)
	take := func(maxSTime int64) *Job {
		j, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: maxSTime})
		require.NoError(t, err)
		return j
	}
	done := take(1)
	require.Equal(t, "finished", done.ID)
	require.NoError(t, b.c.Finish(b.ctx, nil, done, nil))
	require.Equal(t, "running", take(2).ID)

	for _, tc := range []struct {
		id    string
		state State
		err   error
	}{
		{"pending", Pending, nil},
		{"finished", Finished, nil},
		{"running", Running, ErrRunning},
		{"missing", NotFound, ErrNotFound},
	} {
		t.Run(tc.id, func(t *testing.T) {
			err := b.c.SetData(b.ctx, nil, t1, tc.id, raw(`{"v":2}`))
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				if tc.state != NotFound {
					require.JSONEq(t, `{"v":1}`, b.data(t, t1, tc.id))
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.state, b.state(t, t1, tc.id))
			require.JSONEq(t, `{"v":2}`, b.data(t, t1, tc.id))
		})
	}
	require.Equal(t, int64(5), b.stime(t, t1, "pending"))
	require.ErrorIs(t, b.c.SetData(b.ctx, nil, t1, "pending", raw(`{`)), ErrInvalidData)

	// The pending job is taken with its new data.
	j := take(5)
	require.Equal(t, "pending", j.ID)
	require.JSONEq(t, `{"v":2}`, string(j.Data))
}

// AddFinished creates a job finished, with its data: no worker takes it,
// and an Add makes it pending as any finished job. An existing job is
// refused and left as it was.
func TestAddFinished(t *testing.T) {
	b := setup(t)
	b.start(t)
	require.NoError(t, b.c.AddFinished(b.ctx, nil, t1, "done", raw(`{"v":1}`)))
	require.Equal(t, Finished, b.state(t, t1, "done"))
	require.JSONEq(t, `{"v":1}`, b.data(t, t1, "done"))
	require.Zero(t, b.count(t, keyPending), "not queued")
	_, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
	require.ErrorIs(t, err, ErrNotFound, "no worker takes it")

	b.add(t, t1, "pending", `{"v":1}`, 1)
	for _, id := range []string{"done", "pending"} {
		require.ErrorIs(t, b.c.AddFinished(b.ctx, nil, t1, id, raw(`{"v":2}`)), ErrInvalidArgument, id)
		require.JSONEq(t, `{"v":1}`, b.data(t, t1, id), id)
	}
	require.Equal(t, Pending, b.state(t, t1, "pending"))
	require.ErrorIs(t, b.c.AddFinished(b.ctx, nil, t1, "bad", raw(`{`)), ErrInvalidData)

	b.add(t, t1, "done", `{"v":3}`, 2)
	require.Equal(t, Pending, b.state(t, t1, "done"), "an Add resubmits it")
}

// A SetData and an Accept of the same job conflict: the one that commits
// second sees the other's write (here SetData, which then finds the job
// running).
func TestSetDataConflictsWithAccept(t *testing.T) {
	b := setup(t)
	b.start(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	// The test's own transaction, committed after the Accept: its reads
	// are tried again on an error the faults pass injects.
	var tr kv.Transaction
	var err error
	for attempt := 0; ; attempt++ {
		tr, err = b.db.CreateTransaction()
		require.NoError(t, err)
		if err = b.c.SetData(b.ctx, tr, t1, j1, raw(`{"v":2}`)); err == nil || attempt == 20 || !kv.IsRetryable(err) {
			break
		}
		tr.Cancel()
	}
	require.NoError(t, err)
	j := b.accept(t, t1)
	require.Equal(t, j1, j.ID)
	_, err = tr.Commit().Get()
	require.Error(t, err, "the SetData read the row the Accept wrote")
	require.ErrorIs(t, b.c.SetData(b.ctx, nil, t1, j1, raw(`{"v":2}`)), ErrRunning)
	require.JSONEq(t, `{"v":1}`, string(j.Data))
}

// JobsAfter walks every job of a type, in id order, a page at a time,
// whatever their states, and nothing of another type.
func TestJobsAfter(t *testing.T) {
	b := setup(t)
	b.start(t)
	for _, id := range []string{"c", "a", "e", "b", "d"} {
		b.add(t, t1, id, `{"id":"`+id+`"}`, 1)
	}
	b.add(t, t2, "x", `{}`, 1)
	j, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 1})
	require.NoError(t, err)
	var seen []string
	for after := ""; ; {
		page, err := b.c.JobsAfter(b.ctx, nil, t1, after, 2)
		require.NoError(t, err)
		for _, p := range page {
			seen = append(seen, p.ID)
			require.JSONEq(t, `{"id":"`+p.ID+`"}`, string(p.Data))
			require.Equal(t, p.ID == j.ID, p.State == Running, p.ID)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, seen)
	_, err = b.c.JobsAfter(b.ctx, nil, t1, "", 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// A SetData that commits while an Accept of the same job is on its way
// makes the Accept conflict: its retry takes the job with the new data,
// which is not lost.
func TestSetDataDuringAccept(t *testing.T) {
	b := setup(t)
	b.start(t)
	db := &interleaveDB{Database: b.db, between: func() {}, beforeCommit: true}
	c, err := New(db, Config{Clock: b.clock})
	require.NoError(t, err)
	require.NoError(t, c.CheckLayout(b.ctx))
	b.add(t, t1, j1, `{"v":1}`, 0)
	db.between = func() {
		db.between = func() {}
		require.NoError(t, b.c.SetData(b.ctx, nil, t1, j1, raw(`{"v":2}`)))
	}
	j, err := c.Accept(b.ctx, t1, AcceptOptions{})
	require.NoError(t, err)
	require.JSONEq(t, `{"v":2}`, string(j.Data))
	require.JSONEq(t, `{"v":2}`, b.data(t, t1, j1))
	require.NoError(t, c.Finish(b.ctx, nil, j, nil))
	b.requireClean(t)
}
