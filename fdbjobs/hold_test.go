package fdbjobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// A job's hold counts from before its Accept, and from the start of each
// renewal known to have committed; a renewal that failed does not move it.
func TestHoldDeadline(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.c.Add(b.ctx, nil, t1, j1, nil, 0))
	acceptedAt := b.clock.Now()
	job, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
	require.NoError(t, err)
	deadline, ok := job.HoldDeadline()
	require.True(t, ok)
	require.Equal(t, acceptedAt.Add(time.Second), deadline, "half of t1's 2 s timeout")

	b.clock.Advance(700 * time.Millisecond)
	done := job.Renewing()
	_, err = kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (any, error) {
		return nil, b.c.Update(b.ctx, tr, job, nil)
	})
	require.NoError(t, err)
	done(true)
	deadline, _ = job.HoldDeadline()
	require.Equal(t, acceptedAt.Add(1700*time.Millisecond), deadline)

	b.clock.Advance(700 * time.Millisecond)
	job.Renewing()(false)
	again, _ := job.HoldDeadline()
	require.Equal(t, deadline, again, "a renewal that did not commit holds nothing")

	// A job not from Accept has no hold to trust.
	_, ok = (&Job{Type: t1, ID: j1}).HoldDeadline()
	require.False(t, ok)
	(&Job{}).Renewing()(true) // and renewing it does nothing
}
