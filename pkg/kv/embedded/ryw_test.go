package embedded

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func mustGet(t *testing.T, r kv.ReadTransaction, key string) (string, bool) {
	t.Helper()
	v, err := r.Get(kv.Key(key)).Get()
	require.NoError(t, err)
	return string(v), v != nil
}

func TestReadYourWrites(t *testing.T) {
	db := openMem(t)
	put(t, db, "a", "1", "b", "1", "c", "1", "d", "1", "e", "1", "n", "5")
	tr := newTr(t, db)

	tr.Set(kv.Key("b"), []byte("2"))
	tr.Clear(kv.Key("c"))
	tr.Set(kv.Key("bb"), []byte("new"))
	tr.ClearRange(kr("d", "f"))
	tr.Set(kv.Key("dd"), []byte("after clear"))
	tr.Add(kv.Key("n"), []byte{1})
	tr.Add(kv.Key("n"), []byte{2})
	tr.Add(kv.Key("fresh"), []byte{7})

	for _, tc := range []struct {
		key, want string
		present   bool
	}{
		{"a", "1", true},
		{"b", "2", true},
		{"bb", "new", true},
		{"c", "", false},
		{"d", "", false},
		{"dd", "after clear", true},
		{"e", "", false},
		{"n", "8", true},
		{"fresh", "\x07", true},
	} {
		v, ok := mustGet(t, tr, tc.key)
		require.Equal(t, tc.present, ok, tc.key)
		require.Equal(t, tc.want, v, tc.key)
		v, ok = mustGet(t, tr.Snapshot(), tc.key)
		require.Equal(t, tc.present, ok, "snapshot "+tc.key)
		require.Equal(t, tc.want, v, "snapshot "+tc.key)
	}

	all := []string{"a", "b", "bb", "dd", "fresh", "n"}
	require.Equal(t, all, getRange(t, tr, kr("", "\xff"), kv.RangeOptions{}))
	require.Equal(t, []string{"n", "fresh", "dd", "bb", "b", "a"}, getRange(t, tr, kr("", "\xff"), kv.RangeOptions{Reverse: true}))
	require.Equal(t, []string{"a", "b", "bb"}, getRange(t, tr, kr("", "\xff"), kv.RangeOptions{Limit: 3}))
	require.Equal(t, []string{"n", "fresh"}, getRange(t, tr, kr("", "\xff"), kv.RangeOptions{Limit: 2, Reverse: true}))
	require.Equal(t, []string{"bb", "dd"}, getRange(t, tr, kr("b\x00", "e"), kv.RangeOptions{}))

	kvs, err := tr.GetRange(kr("n", "o"), kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err)
	require.Equal(t, []kv.KeyValue{{Key: kv.Key("n"), Value: []byte("8")}}, kvs)

	_, err = tr.Commit().Get()
	require.NoError(t, err)
	tr2 := newTr(t, db)
	require.Equal(t, all, getRange(t, tr2, kr("", "\xff"), kv.RangeOptions{}))
	v, _ := mustGet(t, tr2, "n")
	require.Equal(t, "8", v)
}

func TestReadYourWritesAtomicOverClear(t *testing.T) {
	db := openMem(t)
	put(t, db, "k", "\x05", "v", "same")
	tr := newTr(t, db)
	tr.ClearRange(kr("a", "z"))
	tr.Add(kv.Key("k"), []byte{1})                  // base known absent: 1
	tr.CompareAndClear(kv.Key("v"), []byte("same")) // absent stays absent
	v, ok := mustGet(t, tr, "k")
	require.True(t, ok)
	require.Equal(t, "\x01", v)
	_, ok = mustGet(t, tr, "v")
	require.False(t, ok)
	_, err := tr.Commit().Get()
	require.NoError(t, err)
	v, _ = read(t, db, "k")
	require.Equal(t, "\x01", v)
	_, ok = read(t, db, "v")
	require.False(t, ok)
}

func TestReadYourWritesRangeClearMerging(t *testing.T) {
	db := openMem(t)
	put(t, db, "a", "", "b", "", "c", "", "d", "", "e", "", "f", "", "g", "")
	tr := newTr(t, db)
	tr.ClearRange(kr("b", "c"))
	tr.ClearRange(kr("e", "f"))
	tr.ClearRange(kr("c", "e")) // joins both
	tr.Set(kv.Key("cc"), nil)
	require.Equal(t, []string{"a", "cc", "f", "g"}, getRange(t, tr, kr("", "\xff"), kv.RangeOptions{}))
	require.Equal(t, []string{"g", "f", "cc", "a"}, getRange(t, tr, kr("", "\xff"), kv.RangeOptions{Reverse: true}))
	_, err := tr.Commit().Get()
	require.NoError(t, err)
	require.Equal(t, []string{"a", "cc", "f", "g"}, getRange(t, newTr(t, db), kr("", "\xff"), kv.RangeOptions{}))
}

func TestVersionstampedReadsAreUnreadable(t *testing.T) {
	db := openMem(t)
	tr := newTr(t, db)
	tr.SetVersionstampedValue(kv.Key("v"), append(make([]byte, 10), 0, 0, 0, 0))
	_, err := tr.Get(kv.Key("v")).Get()
	requireCode(t, err, kv.CodeAccessedUnreadable)
	_, err = tr.GetRange(kr("a", "z"), kv.RangeOptions{}).GetSliceWithError()
	requireCode(t, err, kv.CodeAccessedUnreadable)
	_, err = tr.GetRange(kr("w", "z"), kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err, "ranges without the key are readable")

	tr2 := newTr(t, db)
	tr2.SetVersionstampedKey(kv.Key("p/\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00/s\x02\x00\x00\x00"), []byte("x"))
	_, err = tr2.Get(kv.Key("p/\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00/s")).Get()
	requireCode(t, err, kv.CodeAccessedUnreadable)
	_, err = tr2.GetRange(kr("p/", "p0"), kv.RangeOptions{}).GetSliceWithError()
	requireCode(t, err, kv.CodeAccessedUnreadable)
	_, err = tr2.Get(kv.Key("p")).Get()
	require.NoError(t, err)
	// A limited read that stops before the possible keys is readable.
	put(t, db, "p/\x00", "x")
	tr3 := newTr(t, db)
	tr3.SetVersionstampedKey(kv.Key("p/\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00/s\x02\x00\x00\x00"), []byte("x"))
	got, err := tr3.GetRange(kr("p/", "p0"), kv.RangeOptions{Limit: 1}).GetSliceWithError()
	require.NoError(t, err)
	require.Len(t, got, 1)
	_, err = tr3.GetRange(kr("p/", "p0"), kv.RangeOptions{Limit: 2}).GetSliceWithError()
	requireCode(t, err, kv.CodeAccessedUnreadable)
	// A transaction that read an unreadable key does not commit, even
	// when its caller dropped the read's error, as in FoundationDB 7.3
	// (snapshot reads too); one that read none does.
	_, err = tr2.Commit().Get()
	requireCode(t, err, kv.CodeAccessedUnreadable)
	tr4 := newTr(t, db)
	tr4.SetVersionstampedKey(kv.Key("p/\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00/s\x02\x00\x00\x00"), []byte("x"))
	_, err = tr4.Snapshot().GetRange(kr("p/", "p0"), kv.RangeOptions{}).GetSliceWithError()
	requireCode(t, err, kv.CodeAccessedUnreadable)
	_, err = tr4.Commit().Get()
	requireCode(t, err, kv.CodeAccessedUnreadable)
	tr5 := newTr(t, db)
	tr5.SetVersionstampedKey(kv.Key("p/\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00/s\x02\x00\x00\x00"), []byte("x"))
	_, err = tr5.Get(kv.Key("p")).Get()
	require.NoError(t, err)
	_, err = tr5.Commit().Get()
	require.NoError(t, err)
}

func TestStreamingIterator(t *testing.T) {
	db := openMem(t)
	const n = 1000
	_, err := db.Transact(t.Context(), func(tr kv.Transaction) (any, error) {
		for i := range n {
			tr.Set(kv.Key{'k', byte(i >> 8), byte(i)}, []byte{byte(i)})
		}
		return nil, nil
	})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		opts kv.RangeOptions
		want int
	}{
		{"all", kv.RangeOptions{}, n},
		{"reverse", kv.RangeOptions{Reverse: true}, n},
		{"limit", kv.RangeOptions{Limit: 300}, 300},
		{"reverse limit", kv.RangeOptions{Limit: 300, Reverse: true}, 300},
		{"want all", kv.RangeOptions{Mode: kv.StreamingModeWantAll}, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTr(t, db)
			// A pending write in the middle is merged in order.
			tr.Set(kv.Key{'k', 1, 0, 0}, []byte("mid"))
			it := tr.GetRange(kr("k", "l"), tc.opts).Iterator()
			var prev kv.Key
			count := 0
			for it.Advance() {
				e := it.MustGet()
				if prev != nil {
					if tc.opts.Reverse {
						require.Less(t, string(e.Key), string(prev))
					} else {
						require.Greater(t, string(e.Key), string(prev))
					}
				}
				prev = e.Key
				count++
			}
			want := tc.want
			if tc.opts.Limit == 0 {
				want++
			}
			require.Equal(t, want, count)
		})
	}
}

// TestAtomicOpsInRangeReads: a range read applies pending atomic ops to the
// stored values in both directions.
func TestAtomicOpsInRangeReads(t *testing.T) {
	db := openMem(t)
	put(t, db, "a", "\x01", "b", "\x02", "c", "\x03")
	tr := newTr(t, db)
	tr.Add(kv.Key("a"), []byte{0x10})
	tr.Add(kv.Key("b"), []byte{0x10})
	tr.Add(kv.Key("c"), []byte{0x10})
	want := []kv.KeyValue{{Key: kv.Key("a"), Value: []byte{0x11}}, {Key: kv.Key("b"), Value: []byte{0x12}}, {Key: kv.Key("c"), Value: []byte{0x13}}}
	got, err := tr.GetRange(kr("a", "d"), kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err)
	require.Equal(t, want, got)
	got, err = tr.GetRange(kr("a", "d"), kv.RangeOptions{Reverse: true}).GetSliceWithError()
	require.NoError(t, err)
	require.Equal(t, []kv.KeyValue{want[2], want[1], want[0]}, got)
}
