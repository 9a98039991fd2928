package kvtest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var readTests = []conformanceTest{
	onDB("GetAbsent", testGetAbsent),
	inScenario("KeySelectors", testKeySelectors),
	onDB("KeySelectorsAtTheEdges", testKeySelectorEdges),
	inScenario("RangeOptions", testRangeOptions),
	inScenario("SelectorRanges", testSelectorRanges),
	inScenario("InvertedRangeIsEmpty", testInvertedRange),
	onDB("StreamManyKeys", testStreamManyKeys),
	inScenario("PrefixRange", testPrefixRange),
}

// letters writes keys a..j (value = key) under ks and returns the range
// holding them.
func letters(t *testing.T, db kv.Database, ks keyspace) kv.KeyRange {
	t.Helper()
	var pairs []string
	for c := 'a'; c <= 'j'; c++ {
		pairs = append(pairs, string(c), string(c))
	}
	setAll(t, db, ks, pairs...)
	return ks.all()
}

func testGetAbsent(t *testing.T, db kv.Database) {
	require.Nil(t, read(t, db, kv.Key("absent")))
	require.Empty(t, readAll(t, db, kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")}))
}

func testKeySelectors(t *testing.T, db kv.Database, ks keyspace) {
	letters(t, db, ks)
	tr := newTr(t, db)
	for _, tc := range []struct {
		name string
		sel  kv.KeySelector
		want string
	}{
		{"FirstGreaterOrEqual present", kv.FirstGreaterOrEqual(ks.key("d")), "d"},
		{"FirstGreaterOrEqual absent", kv.FirstGreaterOrEqual(ks.key("d0")), "e"},
		{"FirstGreaterThan", kv.FirstGreaterThan(ks.key("d")), "e"},
		{"LastLessOrEqual present", kv.LastLessOrEqual(ks.key("d")), "d"},
		{"LastLessOrEqual absent", kv.LastLessOrEqual(ks.key("d0")), "d"},
		{"LastLessThan", kv.LastLessThan(ks.key("d")), "c"},
		{"forward offset", kv.FirstGreaterOrEqual(ks.key("d")).Add(3), "g"},
		{"backward offset", kv.LastLessThan(ks.key("d")).Add(-2), "a"},
		{"FirstGreaterThan plus one", kv.FirstGreaterThan(ks.key("a")).Add(1), "c"},
		{"raw selector", kv.KeySelector{Key: ks.key("f"), OrEqual: true, Offset: 2}, "h"},
	} {
		got := wait(t, tr.GetKey(tc.sel))
		require.Equal(t, string(ks.key(tc.want)), string(got), tc.name)
	}
}

// testKeySelectorEdges: selectors that resolve before the first key give
// the empty key, past the last user key give "\xff", as in FoundationDB.
func testKeySelectorEdges(t *testing.T, db kv.Database) {
	set(t, db, kv.Key("m"), "1")
	_, err := db.ReadTransact(ctxBg, func(tr kv.ReadTransaction) (any, error) {
		require.Equal(t, kv.Key(""), tr.GetKey(kv.LastLessThan(kv.Key("m"))).MustGet())
		require.Equal(t, kv.Key("\xff"), tr.GetKey(kv.FirstGreaterThan(kv.Key("m"))).MustGet())
		require.Equal(t, kv.Key("m"), tr.GetKey(kv.FirstGreaterOrEqual(kv.Key(""))).MustGet())
		require.Equal(t, kv.Key("m"), tr.GetKey(kv.LastLessThan(kv.Key("\xff"))).MustGet())
		return nil, nil
	})
	require.NoError(t, err)
}

func testRangeOptions(t *testing.T, db kv.Database, ks keyspace) {
	all := letters(t, db, ks)
	tr := newTr(t, db)
	for _, tc := range []struct {
		name string
		r    kv.Range
		opts kv.RangeOptions
		want string
	}{
		{"all", all, kv.RangeOptions{}, "abcdefghij"},
		{"sub range", ks.rangeOf("c", "f"), kv.RangeOptions{}, "cde"},
		{"limit", all, kv.RangeOptions{Limit: 3}, "abc"},
		{"reverse", all, kv.RangeOptions{Reverse: true}, "jihgfedcba"},
		{"reverse limit takes the last keys", all, kv.RangeOptions{Reverse: true, Limit: 3}, "jih"},
		{"reverse sub range limit", ks.rangeOf("c", "f"), kv.RangeOptions{Reverse: true, Limit: 2}, "ed"},
		{"limit above size", all, kv.RangeOptions{Limit: 100}, "abcdefghij"},
		{"want all", all, kv.RangeOptions{Mode: kv.StreamingModeWantAll}, "abcdefghij"},
		{"exact with limit", all, kv.RangeOptions{Mode: kv.StreamingModeExact, Limit: 4}, "abcd"},
		{"small", all, kv.RangeOptions{Mode: kv.StreamingModeSmall}, "abcdefghij"},
		{"serial reverse", all, kv.RangeOptions{Mode: kv.StreamingModeSerial, Reverse: true, Limit: 1}, "j"},
		{"empty range", ks.rangeOf("c0", "c1"), kv.RangeOptions{}, ""},
	} {
		var got string
		for _, e := range slice(t, tr.GetRange(tc.r, tc.opts)) {
			got += string(e.Value)
		}
		require.Equal(t, tc.want, got, tc.name)

		got = ""
		it := tr.GetRange(tc.r, tc.opts).Iterator()
		for it.Advance() {
			e, err := it.Get()
			must(t, err)
			got += string(e.Value)
		}
		require.Equal(t, tc.want, got, tc.name+" (iterator)")
	}
}

func testSelectorRanges(t *testing.T, db kv.Database, ks keyspace) {
	letters(t, db, ks)
	tr := newTr(t, db)
	for _, tc := range []struct {
		name       string
		begin, end kv.KeySelector
		want       string
	}{
		{"greater than to greater or equal", kv.FirstGreaterThan(ks.key("c")), kv.FirstGreaterOrEqual(ks.key("g")), "def"},
		{"inclusive end", kv.FirstGreaterOrEqual(ks.key("c")), kv.FirstGreaterThan(ks.key("e")), "cde"},
		{"offsets", kv.FirstGreaterOrEqual(ks.key("a")).Add(2), kv.FirstGreaterOrEqual(ks.key("a")).Add(5), "cde"},
		{"last less than begin", kv.LastLessThan(ks.key("c")), kv.FirstGreaterOrEqual(ks.key("d")), "bc"},
		// Same key and offset, but or-equal only on the end: the end
		// selector resolves one key further, so the range is one key.
		{"or-equal end only", kv.KeySelector{Key: ks.key("c"), Offset: 2}, kv.KeySelector{Key: ks.key("c"), OrEqual: true, Offset: 2}, "d"},
		{"or-equal end only, negative offset", kv.KeySelector{Key: ks.key("e"), Offset: -1}, kv.KeySelector{Key: ks.key("e"), OrEqual: true, Offset: -1}, "c"},
		{"or-equal begin only is empty", kv.KeySelector{Key: ks.key("c"), OrEqual: true, Offset: 1}, kv.KeySelector{Key: ks.key("c"), Offset: 1}, ""},
	} {
		var got string
		for _, e := range slice(t, tr.GetRange(kv.SelectorRange{Begin: tc.begin, End: tc.end}, kv.RangeOptions{})) {
			got += string(e.Value)
		}
		require.Equal(t, tc.want, got, tc.name)
	}
}

func testInvertedRange(t *testing.T, db kv.Database, ks keyspace) {
	letters(t, db, ks)
	tr := newTr(t, db)
	require.Empty(t, slice(t, tr.GetRange(ks.rangeOf("f", "c"), kv.RangeOptions{})))
	r := kv.SelectorRange{Begin: kv.FirstGreaterOrEqual(ks.key("f")), End: kv.FirstGreaterOrEqual(ks.key("c"))}
	require.Empty(t, slice(t, tr.GetRange(r, kv.RangeOptions{Reverse: true})))
}

// testStreamManyKeys reads thousands of keys, more than any backend returns
// in one batch, through iterators and slices in both directions.
func testStreamManyKeys(t *testing.T, db kv.Database) {
	const n = 3000
	key := func(i int) kv.Key { return kv.Key(fmt.Sprintf("many/%05d", i)) }
	value := make([]byte, 100)
	for start := 0; start < n; start += 500 {
		_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
			for i := start; i < start+500; i++ {
				tr.Set(key(i), value)
			}
			return nil, nil
		})
		require.NoError(t, err)
	}
	r, err := kv.PrefixRange([]byte("many/"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		opts  kv.RangeOptions
		first int
		count int
	}{
		{"forward", kv.RangeOptions{}, 0, n},
		{"reverse", kv.RangeOptions{Reverse: true}, n - 1, n},
		{"forward limit", kv.RangeOptions{Limit: 1234}, 0, 1234},
		{"reverse limit", kv.RangeOptions{Reverse: true, Limit: 1234}, n - 1, 1234},
		{"want all", kv.RangeOptions{Mode: kv.StreamingModeWantAll}, 0, n},
		{"small batches", kv.RangeOptions{Mode: kv.StreamingModeSmall}, 0, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step := 1
			if tc.opts.Reverse {
				step = -1
			}
			_, err := db.ReadTransact(ctxBg, func(tr kv.ReadTransaction) (any, error) {
				it := tr.GetRange(r, tc.opts).Iterator()
				i, count := tc.first, 0
				for it.Advance() {
					e := it.MustGet()
					require.Equal(t, string(key(i)), string(e.Key))
					i += step
					count++
				}
				require.Equal(t, tc.count, count)
				kvs := tr.GetRange(r, tc.opts).GetSliceOrPanic()
				require.Len(t, kvs, tc.count)
				require.Equal(t, string(key(tc.first)), string(kvs[0].Key))
				return nil, nil
			})
			require.NoError(t, err)
		})
	}
}

func testPrefixRange(t *testing.T, db kv.Database, ks keyspace) {
	setAll(t, db, ks, "p", "v", "p\x00", "v", "p\xff\xff", "v", "pa", "v", "q", "v", "o\xff", "v")
	r, err := kv.PrefixRange(ks.key("p"))
	require.NoError(t, err)
	got := keysOf(readAll(t, db, r), ks)
	require.Equal(t, []string{"p", "p\x00", "pa", "p\xff\xff"}, got)
}
