package fdbjobs

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// hookMarker is the key a test hook writes for each job it sees, so that
// a test can check the write committed with the re-enqueue.
func hookMarker(id string) kv.Key { return kv.Key("hook-test/" + id) }

// markingHook records each re-enqueued job in the store and replaces its
// data with {"reenqueued":true}.
func markingHook(tr kv.Transaction, jobs []ReenqueuedJob) error {
	for i := range jobs {
		tr.Set(hookMarker(jobs[i].ID), jobs[i].Data)
		jobs[i].Data = json.RawMessage(`{"reenqueued":true}`)
	}
	return nil
}

func (b *bundle) marker(t *testing.T, id string) string {
	t.Helper()
	v, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(hookMarker(id)).Get()
	})
	require.NoError(t, err)
	return string(v)
}

// The re-enqueue hook runs in the transactions that re-enqueue jobs by
// themselves (Reenqueue and the activity monitor): its writes commit with
// them and the data it gives the jobs is what they are re-enqueued with.
func TestReenqueueHook(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reenqueue func(t *testing.T, b *bundle)
	}{
		{"Reenqueue", func(t *testing.T, b *bundle) {
			ok, err := b.c.Reenqueue(b.ctx, nil, t1, j1)
			require.NoError(t, err)
			require.True(t, ok)
		}},
		{"activity monitor", func(t *testing.T, b *bundle) {
			cycles := monitorEvents(b)
			b.start(t)
			require.Equal(t, 0, waitCycle(t, b, cycles, t1), "the first cycle only reads the activity clock")
			b.clock.Advance(3 * time.Second)
			require.LessOrEqual(t, waitCycle(t, b, cycles, t1), 1)
			require.Equal(t, Pending, b.state(t, t1, j1))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			b.c.SetReenqueueHook(t1, markingHook)
			b.add(t, t1, j1, `{"v":1}`, 0)
			old := b.accept(t, t1)
			tc.reenqueue(t, b)
			require.Equal(t, Pending, b.state(t, t1, j1))
			require.Equal(t, `{"v":1}`, b.marker(t, j1), "the hook saw the data and its write committed")
			require.Equal(t, `{"reenqueued":true}`, b.data(t, t1, j1))
			require.ErrorIs(t, b.c.Update(b.ctx, nil, old, nil), ErrHalt)
			b.requireClean(t)
		})
	}
}

// A hook that fails fails the re-enqueue; one removed with nil runs no
// more; data it makes invalid is refused.
func TestReenqueueHookErrors(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 0)
	b.accept(t, t1)
	boom := errors.New("boom")
	b.c.SetReenqueueHook(t1, func(kv.Transaction, []ReenqueuedJob) error { return boom })
	_, err := b.c.Reenqueue(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, boom)
	require.Equal(t, Running, b.state(t, t1, j1), "nothing committed")

	b.c.SetReenqueueHook(t1, func(_ kv.Transaction, jobs []ReenqueuedJob) error {
		jobs[0].Data = json.RawMessage(`{`)
		return nil
	})
	_, err = b.c.Reenqueue(b.ctx, nil, t1, j1)
	require.ErrorIs(t, err, ErrInvalidData)

	b.c.SetReenqueueHook(t1, nil)
	ok, err := b.c.Reenqueue(b.ctx, nil, t1, j1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, `{"v":1}`, b.data(t, t1, j1))
}

// ReadJobs reads many jobs at once, in the order asked, missing ones as
// NotFound.
func TestReadJobs(t *testing.T) {
	b := setup(t)
	b.add(t, t1, j1, `{"v":1}`, 5)
	b.add(t, t1, j2, `{"v":2}`, 1)
	_, err := b.c.Accept(b.ctx, t1, AcceptOptions{MaxScheduledTime: 1})
	require.NoError(t, err)
	jobs, err := b.c.ReadJobs(b.ctx, nil, t1, []string{j1, "missing", j2})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	require.Equal(t, JobInfo{Type: t1, ID: j1, State: Pending, ScheduledTime: 5, Priority: 1, Data: raw(`{"v":1}`)}, jobs[0])
	require.Equal(t, JobInfo{Type: t1, ID: "missing", State: NotFound}, jobs[1])
	require.Equal(t, Running, jobs[2].State)
	require.JSONEq(t, `{"v":2}`, string(jobs[2].Data))
	none, err := b.c.ReadJobs(b.ctx, nil, t1, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}
