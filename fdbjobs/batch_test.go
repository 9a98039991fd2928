package fdbjobs

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Finishing every job of one AcceptBatch in one FinishBatch clears the
// call's claim record (once) and the jobs' ACTIVITY keys.
func TestFinishBatchReleasesSharedClaim(t *testing.T) {
	b := setup(t)
	jobs := make([]struct{ ID string }, 20)
	for i := range jobs {
		jobs[i].ID = fmt.Sprintf("j%02d", i)
	}
	for _, j := range jobs {
		require.NoError(t, b.c.Add(b.ctx, nil, t1, j.ID, nil, 0))
	}
	for {
		accepted, err := b.c.AcceptBatch(b.ctx, t1, 8, AcceptOptions{})
		if err != nil {
			require.ErrorIs(t, err, ErrNotFound)
			break
		}
		require.Equal(t, 1, b.count(t, keyClaims))
		items := make([]Completion, len(accepted))
		for i, j := range accepted {
			items[i] = Completion{Job: j}
		}
		errs, err := b.c.FinishBatch(b.ctx, nil, items)
		require.NoError(t, err)
		require.Equal(t, make([]error, len(items)), errs)
		b.requireClean(t)
	}
	for _, j := range jobs {
		require.Equal(t, Finished, b.state(t, t1, j.ID))
	}
}
