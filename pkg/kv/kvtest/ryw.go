package kvtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var readYourWritesTests = []conformanceTest{
	inScenario("GetSeesSetAndClear", testRYWGet),
	inScenario("RangeMergesWrites", testRYWRange),
	inScenario("ClearRangeThenSet", testRYWClearRangeThenSet),
	inScenario("AtomicOpThenGet", testRYWAtomic),
	onDB("AtomicOpInRangeReads", testRYWAtomicInRange),
	inScenario("GetKeySeesWrites", testRYWGetKey),
	inScenario("SnapshotSeesWrites", testRYWSnapshot),
	inScenario("OthersDoNotSeeUncommitted", testUncommittedInvisible),
}

func testRYWGet(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("a"), "committed")
	tr := newTr(t, db)
	require.Equal(t, []byte("committed"), wait(t, tr.Get(ks.key("a"))))
	tr.Set(ks.key("a"), []byte("mine"))
	require.Equal(t, []byte("mine"), wait(t, tr.Get(ks.key("a"))))
	tr.Clear(ks.key("a"))
	require.Nil(t, wait(t, tr.Get(ks.key("a"))))
	tr.Set(ks.key("b"), []byte{})
	v := wait(t, tr.Get(ks.key("b")))
	require.NotNil(t, v, "an empty value is present, not absent")
	require.Empty(t, v)
	must(t, commit(tr))
	require.Nil(t, read(t, db, ks.key("a")))
	require.Equal(t, []byte{}, read(t, db, ks.key("b")))
}

func testRYWRange(t *testing.T, db kv.Database, ks keyspace) {
	setAll(t, db, ks, "b", "cb", "d", "cd", "f", "cf", "h", "ch")
	tr := newTr(t, db)
	tr.Set(ks.key("a"), []byte("wa"))
	tr.Set(ks.key("d"), []byte("wd"))
	tr.Set(ks.key("e"), []byte("we"))
	tr.Clear(ks.key("f"))
	r := ks.rangeOf("a", "z")
	kvs := slice(t, tr.GetRange(r, kv.RangeOptions{}))
	require.Equal(t, []string{"a", "b", "d", "e", "h"}, keysOf(kvs, ks))
	require.Equal(t, []byte("wd"), kvs[2].Value)
	require.Equal(t, []byte("cb"), kvs[1].Value)

	rev := slice(t, tr.GetRange(r, kv.RangeOptions{Reverse: true, Limit: 3}))
	require.Equal(t, []string{"h", "e", "d"}, keysOf(rev, ks))
	lim := slice(t, tr.GetRange(r, kv.RangeOptions{Limit: 2}))
	require.Equal(t, []string{"a", "b"}, keysOf(lim, ks))

	var it []string
	iter := tr.GetRange(r, kv.RangeOptions{}).Iterator()
	for iter.Advance() {
		e, err := iter.Get()
		must(t, err)
		it = append(it, string(e.Key[len(ks):]))
	}
	require.Equal(t, []string{"a", "b", "d", "e", "h"}, it)
}

func testRYWClearRangeThenSet(t *testing.T, db kv.Database, ks keyspace) {
	setAll(t, db, ks, "a", "a", "b", "b", "c", "c", "d", "d")
	tr := newTr(t, db)
	tr.ClearRange(ks.rangeOf("b", "d"))
	require.Nil(t, wait(t, tr.Get(ks.key("b"))))
	require.Equal(t, []string{"a", "d"}, keysOf(slice(t, tr.GetRange(ks.all(), kv.RangeOptions{})), ks))
	tr.Set(ks.key("c"), []byte("new"))
	require.Equal(t, []string{"a", "c", "d"}, keysOf(slice(t, tr.GetRange(ks.all(), kv.RangeOptions{})), ks))
	must(t, commit(tr))
	got := readAll(t, db, ks.all())
	require.Equal(t, []string{"a", "c", "d"}, keysOf(got, ks))
	require.Equal(t, []byte("new"), got[1].Value)
}

func testRYWAtomic(t *testing.T, db kv.Database, ks keyspace) {
	setAll(t, db, ks, "n", string(kv.Int64(40)))
	tr := newTr(t, db)
	tr.Add(ks.key("n"), kv.Int64(2))
	require.Equal(t, kv.Int64(42), wait(t, tr.Get(ks.key("n"))))
	tr.Add(ks.key("n"), kv.Int64(1))
	require.Equal(t, kv.Int64(43), wait(t, tr.Get(ks.key("n"))))
	tr.Add(ks.key("fresh"), kv.Int64(5))
	kvs := slice(t, tr.GetRange(ks.all(), kv.RangeOptions{}))
	require.Equal(t, []string{"fresh", "n"}, keysOf(kvs, ks))
	require.Equal(t, kv.Int64(5), kvs[0].Value)
	must(t, commit(tr))
	require.Equal(t, kv.Int64(43), read(t, db, ks.key("n")))
}

func testRYWGetKey(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("a"), "1")
	set(t, db, ks.key("e"), "1")
	tr := newTr(t, db)
	tr.Set(ks.key("c"), []byte("w"))
	require.Equal(t, ks.key("c"), wait(t, tr.GetKey(kv.FirstGreaterThan(ks.key("a")))))
	tr.Clear(ks.key("e"))
	require.Equal(t, ks.key("c"), wait(t, tr.GetKey(kv.LastLessOrEqual(ks.key("z")))))
}

func testRYWSnapshot(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	tr.Set(ks.key("a"), []byte("mine"))
	snap := tr.Snapshot()
	require.Equal(t, []byte("mine"), wait(t, snap.Get(ks.key("a"))))
	require.Len(t, slice(t, snap.GetRange(ks.all(), kv.RangeOptions{})), 1)
	require.Equal(t, []byte("mine"), wait(t, snap.Snapshot().Get(ks.key("a"))))
}

func testUncommittedInvisible(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	tr.Set(ks.key("a"), []byte("mine"))
	require.Nil(t, read(t, db, ks.key("a")))
	must(t, commit(tr))
	require.Equal(t, []byte("mine"), read(t, db, ks.key("a")))
}

// testRYWAtomicInRange: a range read, in either direction, shows an atomic
// operation applied to the committed value of its own key, whatever keys
// surround it.
func testRYWAtomicInRange(t *testing.T, db kv.Database) {
	for _, tc := range []struct {
		name    string
		reverse bool
		limit   int
	}{
		{"forward", false, 0},
		{"reverse", true, 0},
		{"reverse limit", true, 1},
		{"forward limit", false, 2},
	} {
		subScenario(t, tc.name, func(t *testing.T, ks keyspace) {
			setAll(t, db, ks, "a", "11", "b", "88", "c", "23", "d", "44")
			tr := newTr(t, db)
			tr.BitXor(ks.key("c"), []byte{0x5f, 0x00})
			tr.Add(ks.key("a"), []byte{0x01, 0x00})
			want := map[string]string{"a": "21", "b": "88", "c": "m3", "d": "44"}
			kvs := slice(t, tr.GetRange(ks.all(), kv.RangeOptions{Reverse: tc.reverse, Limit: tc.limit}))
			require.NotEmpty(t, kvs)
			for _, e := range kvs {
				k := string(e.Key[len(ks):])
				require.Equal(t, want[k], string(e.Value), "key %s", k)
			}
		})
	}
}
