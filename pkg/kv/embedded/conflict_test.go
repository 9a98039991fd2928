package embedded

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// conflictCase runs read on a fresh transaction over a store holding keys
// b, d, f, commits write in another transaction, and then checks whether
// the first transaction's commit conflicts.
type conflictCase struct {
	name     string
	read     func(t *testing.T, tr kv.Transaction)
	write    string // key set by the concurrent transaction
	conflict bool
}

func runConflictCases(t *testing.T, cases []conflictCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := openMem(t)
			put(t, db, "b", "1", "d", "1", "f", "1")
			tr := newTr(t, db)
			tc.read(t, tr)
			tr.Set(kv.Key("out"), []byte("x"))
			put(t, db, tc.write, "2")
			_, err := tr.Commit().Get()
			if tc.conflict {
				requireCode(t, err, kv.CodeNotCommitted)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

func getRange(t *testing.T, r kv.ReadTransaction, rg kv.Range, o kv.RangeOptions) []string {
	t.Helper()
	kvs, err := r.GetRange(rg, o).GetSliceWithError()
	require.NoError(t, err)
	return keysOf(kvs)
}

func kr(b, e string) kv.KeyRange { return kv.KeyRange{Begin: kv.Key(b), End: kv.Key(e)} }

func TestConflicts(t *testing.T) {
	get := func(k string) func(*testing.T, kv.Transaction) {
		return func(t *testing.T, tr kv.Transaction) {
			_, err := tr.Get(kv.Key(k)).Get()
			require.NoError(t, err)
		}
	}
	rng := func(b, e string, o kv.RangeOptions, want ...string) func(*testing.T, kv.Transaction) {
		return func(t *testing.T, tr kv.Transaction) {
			got := getRange(t, tr, kr(b, e), o)
			if len(want) == 0 {
				want = []string{}
			}
			require.Equal(t, want, append([]string{}, got...))
		}
	}
	getKey := func(sel kv.KeySelector, want string) func(*testing.T, kv.Transaction) {
		return func(t *testing.T, tr kv.Transaction) {
			k, err := tr.GetKey(sel).Get()
			require.NoError(t, err)
			require.Equal(t, want, string(k))
		}
	}
	runConflictCases(t, []conflictCase{
		{"point read, same key written", get("d"), "d", true},
		{"point read, other key written", get("d"), "d\x00", false},
		{"absent key read, then inserted", get("c"), "c", true},
		{"range read, phantom inside", rng("b", "f", kv.RangeOptions{}, "b", "d"), "c", true},
		{"range read, insert at begin", rng("a", "f", kv.RangeOptions{}, "b", "d"), "a", true},
		{"range read, insert at end (exclusive)", rng("b", "f", kv.RangeOptions{}, "b", "d"), "f", false},
		{"range read, insert before begin", rng("b", "f", kv.RangeOptions{}, "b", "d"), "a", false},
		{"limited range, insert before last returned", rng("a", "z", kv.RangeOptions{Limit: 2}, "b", "d"), "c", true},
		{"limited range, insert after last returned", rng("a", "z", kv.RangeOptions{Limit: 2}, "b", "d"), "e", false},
		{"limited reverse range, insert after last returned", rng("a", "z", kv.RangeOptions{Limit: 2, Reverse: true}, "f", "d"), "e", true},
		{"limited reverse range, insert before last returned", rng("a", "z", kv.RangeOptions{Limit: 2, Reverse: true}, "f", "d"), "c", false},
		{"empty range read, insert inside", rng("g", "k", kv.RangeOptions{}), "h", true},
		{"selector forward, insert between", getKey(kv.FirstGreaterOrEqual(kv.Key("c")), "d"), "c\x00", true},
		{"selector forward, insert after result", getKey(kv.FirstGreaterOrEqual(kv.Key("c")), "d"), "e", false},
		{"selector forward, insert before reference", getKey(kv.FirstGreaterOrEqual(kv.Key("c")), "d"), "b\x00", false},
		{"selector backward, insert between", getKey(kv.LastLessThan(kv.Key("f")), "d"), "e", true},
		{"selector backward, insert before result", getKey(kv.LastLessThan(kv.Key("f")), "d"), "c", false},
		{"selector off the end, insert after", getKey(kv.FirstGreaterThan(kv.Key("f")), "\xff"), "x", true},
		{"first greater than, its own key written", getKey(kv.FirstGreaterThan(kv.Key("d")), "f"), "d", false},
		{"first greater than, key between written", getKey(kv.FirstGreaterThan(kv.Key("d")), "f"), "e", true},
		{"selector offset 2", getKey(kv.FirstGreaterOrEqual(kv.Key("a")).Add(1), "d"), "c", true},
		{"selector offset 2, insert after", getKey(kv.FirstGreaterOrEqual(kv.Key("a")).Add(1), "d"), "e", false},
		{"snapshot get", func(t *testing.T, tr kv.Transaction) {
			_, err := tr.Snapshot().Get(kv.Key("d")).Get()
			require.NoError(t, err)
		}, "d", false},
		{"snapshot range", func(t *testing.T, tr kv.Transaction) {
			getRange(t, tr.Snapshot(), kr("a", "z"), kv.RangeOptions{})
		}, "c", false},
		{"explicit read conflict range", func(t *testing.T, tr kv.Transaction) {
			_, err := tr.GetReadVersion().Get()
			require.NoError(t, err)
			require.NoError(t, tr.AddReadConflictRange(kr("m", "p")))
		}, "n", true},
		{"explicit read conflict key", func(t *testing.T, tr kv.Transaction) {
			_, err := tr.GetReadVersion().Get()
			require.NoError(t, err)
			require.NoError(t, tr.AddReadConflictKey(kv.Key("m")))
		}, "m", true},
		{"explicit read conflict without a read version", func(t *testing.T, tr kv.Transaction) {
			// The read version is taken at commit, after the other write.
			require.NoError(t, tr.AddReadConflictKey(kv.Key("m")))
		}, "m", false},
		{"read satisfied by own write", func(t *testing.T, tr kv.Transaction) {
			tr.Set(kv.Key("d"), []byte("mine"))
			v, err := tr.Get(kv.Key("d")).Get()
			require.NoError(t, err)
			require.Equal(t, "mine", string(v))
		}, "d", false},
		{"read of own atomic op reads the stored value", func(t *testing.T, tr kv.Transaction) {
			tr.Add(kv.Key("d"), []byte{1})
			_, err := tr.Get(kv.Key("d")).Get()
			require.NoError(t, err)
		}, "d", true},
		{"atomic op alone does not conflict", func(t *testing.T, tr kv.Transaction) {
			tr.Add(kv.Key("d"), []byte{1})
		}, "d", false},
		{"blind write does not conflict", func(t *testing.T, tr kv.Transaction) {
			tr.Set(kv.Key("d"), []byte{1})
		}, "d", false},
	})
}

func TestWriteConflictRange(t *testing.T) {
	db := openMem(t)
	put(t, db, "k", "1")
	reader := newTr(t, db)
	_, err := reader.Get(kv.Key("m")).Get()
	require.NoError(t, err)
	reader.Set(kv.Key("out"), []byte("x"))
	w := newTr(t, db)
	require.NoError(t, w.AddWriteConflictRange(kr("l", "n")))
	_, err = w.Commit().Get()
	require.NoError(t, err)
	_, err = reader.Commit().Get()
	requireCode(t, err, kv.CodeNotCommitted)
}

// TestSameBatchConflicts queues two conflicting transactions behind a
// blocked leader so that they are resolved in one batch: the second sees
// the first's writes.
func TestSameBatchConflicts(t *testing.T) {
	db := openMem(t)
	put(t, db, "k", "0")
	hold := make(chan struct{})
	sizes := make(chan int, 16)
	db.testHookBatch = func(n int) {
		sizes <- n
		if n == 1 {
			<-hold
		}
	}
	// A blocker commit occupies the leader.
	blocker := newTr(t, db)
	blocker.Set(kv.Key("blocker"), nil)
	bf := blocker.Commit()
	require.Equal(t, 1, <-sizes)

	var futs []kv.FutureNil
	for i := range 3 {
		tr := newTr(t, db)
		v, err := tr.Get(kv.Key("k")).Get()
		require.NoError(t, err)
		require.Equal(t, "0", string(v))
		tr.Set(kv.Key("k"), []byte{byte('1' + i)})
		futs = append(futs, tr.Commit())
	}
	// A transaction that does not read k is not affected.
	other := newTr(t, db)
	_, err := other.Get(kv.Key("z")).Get()
	require.NoError(t, err)
	other.Set(kv.Key("k"), []byte("other"))
	futs = append(futs, other.Commit())
	close(hold)
	_, err = waitReady(t, bf)
	require.NoError(t, err)
	require.Equal(t, 4, <-sizes)
	_, err = waitReady(t, futs[0])
	require.NoError(t, err)
	for _, f := range futs[1:3] {
		_, err := waitReady(t, f)
		requireCode(t, err, kv.CodeNotCommitted)
	}
	_, err = waitReady(t, futs[3])
	require.NoError(t, err)
	v, _ := read(t, db, "k")
	require.Equal(t, "other", v)
}

func TestTransactionTooOld(t *testing.T) {
	const lifetime = 200 * time.Millisecond
	db, clock := openFakeClock(t, func(o *Options) { o.TransactionLifetime = lifetime })
	put(t, db, "k", "1")

	tr := newTr(t, db)
	_, err := tr.Get(kv.Key("k")).Get()
	require.NoError(t, err)
	tr.Set(kv.Key("k"), []byte("2"))
	clock.Advance(lifetime)
	_, err = tr.Get(kv.Key("j")).Get()
	require.NoError(t, err, "the lifetime is not over until it has passed")
	clock.Advance(lifetime) // well past the lifetime
	_, err = tr.Get(kv.Key("j")).Get()
	requireCode(t, err, kv.CodeTransactionTooOld)
	_, err = tr.Commit().Get()
	requireCode(t, err, kv.CodeTransactionTooOld)

	// A blind write has no read version to be too old for.
	blind := newTr(t, db)
	_, err = blind.GetReadVersion().Get()
	require.NoError(t, err)
	blind.Set(kv.Key("k"), []byte("3"))
	clock.Advance(2 * lifetime)
	_, err = blind.Commit().Get()
	require.NoError(t, err)

	// The retry loop recovers from transaction_too_old.
	calls := 0
	_, err = db.Transact(t.Context(), func(tr kv.Transaction) (any, error) {
		calls++
		if _, err := tr.Get(kv.Key("k")).Get(); err != nil {
			return nil, err
		}
		if calls == 1 {
			clock.Advance(2 * lifetime)
		}
		tr.Set(kv.Key("k"), []byte("4"))
		return nil, nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, calls, 2)
}
