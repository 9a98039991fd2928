package fdbjobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
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
			return b.c.ClaimPlaces(tr, t1, id, placesOf(parts, limit))
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
	require.Empty(t, claim("b", []string{"z"}, 2), "each place has its own limit")

	for _, tc := range []struct {
		name  string
		parts []string
		limit int
		want  string
	}{
		{"limit 0", []string{"x"}, 0, `partition "x": limit of 0 running jobs`},
		{"empty partition", []string{""}, 1, "partition 0 is empty"},
		{"twice", []string{"x", "x"}, 1, `partition "x" named twice`},
		{"too many", []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}, 1, "9 partitions: at most 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (string, error) {
				return b.c.ClaimPlaces(tr, t1, "d", placesOf(tc.parts, tc.limit))
			})
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TakeTokens gives a second's worth of tokens at once, then one per
// 1/rate: over any window the takes get at most rate × W + rate; an
// empty bucket says when the next token comes; bad input is refused.
// Where commits may report commit_unknown_result (injected faults,
// FoundationDB), a take retried after one took its tokens twice and
// reports the second: each take gets at most what the plain store gives.
func TestTakeTokens(t *testing.T) {
	b := setup(t)
	_, faults, err := faultkv.FromEnv()
	require.NoError(t, err)
	exact := !faults && !kvtest.OnFoundationDB(t)
	take := func(n, want int, what string) time.Time {
		t.Helper()
		k, next, err := b.c.TakeTokens(b.ctx, nil, "requests", "http://h:80", 10, n)
		require.NoError(t, err)
		if exact {
			require.Equal(t, want, k, what)
		} else {
			require.LessOrEqual(t, k, want, what)
		}
		return next
	}
	take(4, 4, "four of a full bucket")
	take(100, 6, "a second's worth in all")
	next := take(1, 0, "none left")
	require.GreaterOrEqual(t, next, b.clock.Now().Add(100*time.Millisecond), "the next token, a tenth of a second later")
	if exact {
		require.Equal(t, b.clock.Now().Add(100*time.Millisecond), next)
	}
	b.clock.Advance(250 * time.Millisecond)
	take(100, 2, "two tokens came in 250 ms")
	b.clock.Advance(time.Hour)
	take(100, 10, "a full bucket holds a second's worth")
	// Another partition's bucket is its own.
	k, _, err := b.c.TakeTokens(b.ctx, nil, "requests", "http://h2:80", 0.5, 3)
	require.NoError(t, err)
	require.LessOrEqual(t, k, 1, "a bucket holds at least one token")
	if exact {
		require.Equal(t, 1, k)
	}

	for _, tc := range []struct {
		name string
		rate float64
		n    int
		part string
		want string
	}{
		{"rate 0", 0, 1, "p", "rate of 0 tokens per second"},
		{"n 0", 1, 0, "p", "0 tokens asked"},
		{"no partition", 1, 1, "", "partition 0 is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := b.c.TakeTokens(b.ctx, nil, "requests", tc.part, tc.rate, tc.n)
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A claim of two jobs of one partition whose count decides the first
// and the running set the second (the count at the limit then) leaves the
// count at the entries: the count the set gave, set after the first's
// add, is exact.
func TestClaimCountExactAfterRecount(t *testing.T) {
	b := setup(t)
	b.start(t)
	require.NoError(t, b.c.SetPartitionLimit(b.ctx, nil, t1, Limit{Running: 2}))
	for _, id := range []string{"a", "b", "c"} {
		b.add(t, t1, id, `{}`, 0)
	}
	jobs, err := b.c.AcceptBatch(b.ctx, t1, 3, AcceptOptions{})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	byID := map[string]*Job{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	wait := func(int64) int64 { return b.c.cfg.now() + 3_600_000 }
	first := []*claim{{job: byID["a"], part: "p"}}
	_, err = b.c.claimPartitions(b.ctx, first, wait, nil)
	require.NoError(t, err)
	require.True(t, first[0].granted)
	both := []*claim{{job: byID["b"], part: "p"}, {job: byID["c"], part: "p"}}
	_, err = b.c.claimPartitions(b.ctx, both, wait, nil)
	require.NoError(t, err)
	require.True(t, both[0].granted)
	require.False(t, both[1].granted, "the partition is full")
	v, err := kv.ReadTransact(b.ctx, b.db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(b.c.k.partCountKey(t1, "p")).Get()
	})
	require.NoError(t, err)
	if _, faults, _ := faultkv.FromEnv(); !faults && !kvtest.OnFoundationDB(t) { // (a claim retried after commit_unknown_result may count twice)
		require.EqualValues(t, 2, kv.DecodeInt64(v), "the count of places: a's and b's")
	}
}

// placesOf is parts, each with limit.
func placesOf(parts []string, limit int) []Place {
	out := make([]Place, len(parts))
	for i, p := range parts {
		out[i] = Place{Partition: p, Limit: limit}
	}
	return out
}

// The jobs waiting for a place in a partition are woken in the order they
// came, not by id: a place freed goes to the one that waited longest.
func TestWaitingJobsWokenInOrder(t *testing.T) {
	b := setup(t)
	b.start(t)
	for _, id := range []string{"x", "a", "b", "c"} {
		b.add(t, t1, id, `{}`, 0)
	}
	held := map[string]*Job{}
	for range 4 {
		j := b.accept(t, t1)
		held[j.ID] = j
	}
	claim := func(id string) string {
		t.Helper()
		full, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (string, error) {
			return b.c.ClaimPlaces(tr, t1, id, []Place{{Partition: "p", Limit: 1}})
		})
		require.NoError(t, err)
		return full
	}
	require.Empty(t, claim("x"))
	later := b.c.cfg.now() + 3_600_000
	for _, id := range []string{"c", "b", "a"} { // they come in this order
		require.Equal(t, "p", claim(id))
		require.NoError(t, b.c.FinishAt(b.ctx, nil, held[id], later, nil))
		b.clock.Advance(time.Millisecond)
	}
	waiting := []string{"c", "b", "a"}
	leaver := "x"
	for len(waiting) > 0 {
		for range 2 { // the second as a retry after commit_unknown_result: it wakes no second job
			_, err := kv.Transact(b.ctx, b.db, func(tr kv.Transaction) (struct{}, error) {
				return struct{}{}, b.c.LeavePlaces(tr, t1, leaver, []string{"p"})
			})
			require.NoError(t, err)
		}
		want := waiting[0]
		for _, id := range waiting {
			require.Equal(t, id == want, b.stime(t, t1, id) <= b.c.cfg.now(), "after %s left: is %s woken", leaver, id)
		}
		waiting, leaver = waiting[1:], want
		j := b.accept(t, t1)
		require.Equal(t, want, j.ID, "the longest waiting first")
		require.Empty(t, claim(want))
	}
}
