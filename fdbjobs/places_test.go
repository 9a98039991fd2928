package fdbjobs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// ClaimPlaces takes a place in every partition named or in none, counts a
// place the job holds as taken, and makes a job that found a partition full
// wait there until an end in it (LeavePlaces) moves it to due now; a place
// left by a job that ended without LeavePlaces is found again once the
// partition fills.
func TestClaimPlaces(t *testing.T) {
	b := setup(t)
	b.start(t)
	for _, id := range []string{"a", "b", "c"} {
		b.add(t, t1, id, `{}`, 0)
	}
	held := map[string]*Job{}
	for range 3 {
		j := b.accept(t, t1)
		held[j.ID] = j
	}
	jb, jc := held["b"], held["c"]
	claim := func(id string, parts []string, limit int) string {
		t.Helper()
		full, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (string, error) {
			return b.c.ClaimPlaces(tr, t1, id, parts, limit)
		})
		require.NoError(t, err)
		return full
	}
	leave := func(id string, parts []string) {
		t.Helper()
		_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
			return struct{}{}, b.c.LeavePlaces(tr, t1, id, parts)
		})
		require.NoError(t, err)
	}

	require.Empty(t, claim("a", []string{"x", "y"}, 1))
	require.Empty(t, claim("a", []string{"x", "y"}, 1), "a place held already counts as taken")
	require.Equal(t, "y", claim("b", []string{"z", "y"}, 1), "y is full: nothing taken")
	require.Empty(t, claim("c", []string{"z"}, 1), "b took no place in z")

	// b goes back to the queue, due in an hour; a's end in y wakes it.
	later := b.c.cfg.now() + 3_600_000
	require.NoError(t, b.c.FinishAt(b.ctx, nil, jb, later, nil))
	require.Equal(t, later, b.stime(t, t1, "b"))
	leave("a", []string{"x", "y"})
	require.LessOrEqual(t, b.stime(t, t1, "b"), b.c.cfg.now(), "the place freed wakes the job that waits for it")
	leave("a", []string{"x", "y"}) // again (commit_unknown_result): nothing more
	jb = b.accept(t, t1)
	require.Equal(t, "b", jb.ID)
	require.Empty(t, claim("b", []string{"y"}, 1))

	// c ends without giving its place in z back: d finds it once z is full.
	require.NoError(t, b.c.Finish(b.ctx, nil, jc, nil))
	b.add(t, t1, "d", `{}`, 0)
	require.Equal(t, "d", b.accept(t, t1).ID)
	require.Empty(t, claim("d", []string{"z"}, 1))
	require.Equal(t, "z", claim("b", []string{"z"}, 1), "d holds z now")

	for _, tc := range []struct {
		name  string
		parts []string
		limit int
		want  string
	}{
		{"limit 0", []string{"x"}, 0, "limit of 0 running jobs"},
		{"empty partition", []string{""}, 1, "partition 0 is empty"},
		{"twice", []string{"x", "x"}, 1, `partition "x" named twice`},
		{"too many", []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}, 1, "9 partitions: at most 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (string, error) {
				return b.c.ClaimPlaces(tr, t1, "d", tc.parts, tc.limit)
			})
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
