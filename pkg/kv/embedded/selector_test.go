package embedded

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

func TestSelectors(t *testing.T) {
	db := openMem(t)
	put(t, db, "b", "", "d", "", "f", "")
	k := func(s string) kv.Key { return kv.Key(s) }
	cases := []struct {
		name string
		sel  kv.KeySelector
		want string
	}{
		{"fge exact", kv.FirstGreaterOrEqual(k("d")), "d"},
		{"fge between", kv.FirstGreaterOrEqual(k("c")), "d"},
		{"fgt exact", kv.FirstGreaterThan(k("d")), "f"},
		{"lle exact", kv.LastLessOrEqual(k("d")), "d"},
		{"lle between", kv.LastLessOrEqual(k("e")), "d"},
		{"llt exact", kv.LastLessThan(k("d")), "b"},
		{"fge +1", kv.FirstGreaterOrEqual(k("b")).Add(1), "d"},
		{"fge +2", kv.FirstGreaterOrEqual(k("b")).Add(2), "f"},
		{"llt -1", kv.LastLessThan(k("f")).Add(-1), "b"},
		{"past the end", kv.FirstGreaterThan(k("f")), "\xff"},
		{"far past the end", kv.FirstGreaterOrEqual(k("a")).Add(10), "\xff"},
		{"before the start", kv.LastLessThan(k("b")), ""},
		{"far before the start", kv.LastLessOrEqual(k("f")).Add(-10), ""},
		{"fge empty key", kv.FirstGreaterOrEqual(k("")), "b"},
		{"llt end of keyspace", kv.LastLessThan(k("\xff")), "f"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newTr(t, db).GetKey(tc.sel).Get()
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}

	t.Run("with pending writes", func(t *testing.T) {
		tr := newTr(t, db)
		tr.Clear(k("d"))
		tr.Set(k("e"), nil)
		got, err := tr.GetKey(kv.FirstGreaterThan(k("b"))).Get()
		require.NoError(t, err)
		require.Equal(t, "e", string(got))
		got, err = tr.GetKey(kv.LastLessThan(k("f")).Add(-1)).Get()
		require.NoError(t, err)
		require.Equal(t, "b", string(got))
	})

	t.Run("range with selectors", func(t *testing.T) {
		tr := newTr(t, db)
		r := kv.SelectorRange{Begin: kv.FirstGreaterThan(k("b")), End: kv.FirstGreaterOrEqual(k("f")).Add(1)}
		require.Equal(t, []string{"d", "f"}, getRange(t, tr, r, kv.RangeOptions{}))
		require.Equal(t, []string{"f"}, getRange(t, tr, r, kv.RangeOptions{Reverse: true, Limit: 1}))
		r = kv.SelectorRange{Begin: kv.LastLessOrEqual(k("c")), End: kv.LastLessThan(k("f"))}
		require.Equal(t, []string{"b"}, getRange(t, tr, r, kv.RangeOptions{}))
	})

	t.Run("or-equal selectors on the same key", func(t *testing.T) {
		// FoundationDB rewrites LastLessOrEqual(d) as LastLessThan(d\x00)
		// before deciding that a range is empty.
		tr := newTr(t, db)
		r := kv.SelectorRange{Begin: kv.LastLessThan(k("d")), End: kv.LastLessOrEqual(k("d"))}
		require.Equal(t, []string{"b"}, getRange(t, tr, r, kv.RangeOptions{}))
		r = kv.SelectorRange{Begin: kv.FirstGreaterThan(k("\xff")), End: kv.LastLessOrEqual(k("\xff"))}
		require.Empty(t, getRange(t, tr, r, kv.RangeOptions{}))
		r = kv.SelectorRange{Begin: kv.LastLessThan(k("\xff")), End: kv.FirstGreaterThan(k("\xff"))}
		require.Equal(t, []string{"f"}, getRange(t, tr, r, kv.RangeOptions{}))
	})

	t.Run("inverted and empty ranges read nothing", func(t *testing.T) {
		tr := newTr(t, db)
		require.Empty(t, getRange(t, tr, kr("f", "b"), kv.RangeOptions{}))
		require.Empty(t, getRange(t, tr, kr("d", "d"), kv.RangeOptions{}))
		r := kv.SelectorRange{Begin: kv.FirstGreaterOrEqual(k("e")), End: kv.LastLessOrEqual(k("d"))}
		require.Empty(t, getRange(t, tr, r, kv.RangeOptions{}))
	})
}
