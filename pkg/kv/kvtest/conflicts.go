package kvtest

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var conflictTests = []conformanceTest{
	onDB("ReadWrite", testConflictReadWrite),
	onDB("RangePhantom", testConflictRangePhantom),
	inScenario("SelectorRange", testConflictSelectorRange),
	inScenario("ClearRangeConflictsWithRead", testConflictClearRange),
	inScenario("SnapshotReadsDoNotConflict", testSnapshotNoConflict),
	onDB("ExplicitReadConflict", testExplicitReadConflict),
	onDB("ExplicitWriteConflict", testExplicitWriteConflict),
	inScenario("BlindWritesDoNotConflict", testBlindWrites),
	inScenario("AtomicOpsDoNotConflict", testAtomicNoConflict),
	inScenario("ReadOnlyCommits", testReadOnlyCommits),
	inScenario("WriteBeforeReadVersionDoesNotConflict", testEarlierWriteNoConflict),
	onDB("LimitedRangeRead", testConflictLimitedRange),
	onDB("GetKey", testConflictGetKey),
}

// commitAfterWrite has tr, which has read, write a key of its own; then
// it commits a write of ks.key(key) in another transaction, and then tr,
// whose commit must fail with not_committed if conflict and succeed
// otherwise. It returns tr's commit error.
func commitAfterWrite(t *testing.T, db kv.Database, ks keyspace, tr kv.Transaction, key string, conflict bool) error {
	t.Helper()
	tr.Set(ks.key("out"), []byte("x"))
	set(t, db, ks.key(key), "2")
	err := commit(tr)
	if conflict {
		mustCode(t, err, kv.CodeNotCommitted)
		return err
	}
	must(t, err)
	return nil
}

// conflictCase is a transaction that reads with read and then writes a key
// of its own, while another transaction writes the key write and commits
// first: the reader's commit must fail with not_committed if conflict, and
// succeed otherwise.
type conflictCase struct {
	name     string
	read     func(t *testing.T, ks keyspace, tr kv.Transaction)
	write    string
	conflict bool
}

// runConflictCases runs each case as a scenario of its own on db, after
// committing the pairs (key, value…) of setup.
func runConflictCases(t *testing.T, db kv.Database, setup []string, cases []conflictCase) {
	for _, tc := range cases {
		subScenario(t, tc.name, func(t *testing.T, ks keyspace) {
			if len(setup) > 0 {
				setAll(t, db, ks, setup...)
			}
			tr := newTr(t, db)
			tc.read(t, ks, tr)
			commitAfterWrite(t, db, ks, tr, tc.write, tc.conflict)
		})
	}
}

// testConflictReadWrite: a key read by a transaction and written by another
// that commits first makes the first fail with not_committed; a key it did
// not read does not.
func testConflictReadWrite(t *testing.T, db kv.Database) {
	read := func(t *testing.T, ks keyspace, tr kv.Transaction) {
		require.Equal(t, []byte("1"), wait(t, tr.Get(ks.key("k"))))
	}
	runConflictCases(t, db, []string{"k", "1"}, []conflictCase{
		{"same key", read, "k", true},
		{"other key", read, "other", false},
		{"key just after", read, "k\x00", false},
	})
}

// testConflictRangePhantom: a range read conflicts with keys inserted into
// the range later (phantoms), not with keys just outside it.
func testConflictRangePhantom(t *testing.T, db kv.Database) {
	read := func(t *testing.T, ks keyspace, tr kv.Transaction) {
		kvs := slice(t, tr.GetRange(ks.rangeOf("b", "m"), kv.RangeOptions{}))
		require.Equal(t, []string{"d"}, keysOf(kvs, ks))
	}
	runConflictCases(t, db, []string{"d", "1"}, []conflictCase{
		{"insert inside", read, "c", true},
		{"insert at begin", read, "b", true},
		{"insert before end", read, "l\xff", true},
		{"insert at end (exclusive)", read, "m", false},
		{"insert before begin", read, "a\xff", false},
		{"insert after end", read, "z", false},
	})
}

// testConflictSelectorRange: an empty range read through selectors still
// conflicts with an insert into it.
func testConflictSelectorRange(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	r := kv.SelectorRange{Begin: kv.FirstGreaterOrEqual(ks.key("b")), End: kv.FirstGreaterOrEqual(ks.key("m"))}
	require.Empty(t, slice(t, tr.GetRange(r, kv.RangeOptions{})))
	commitAfterWrite(t, db, ks, tr, "f", true)
}

// testConflictClearRange: a clear of a range covering a key that was read is
// a write to it.
func testConflictClearRange(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("k"), "1")
	tr := newTr(t, db)
	require.Equal(t, []byte("1"), wait(t, tr.Get(ks.key("k"))))
	tr.Set(ks.key("out"), []byte("x"))
	_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		tr.ClearRange(ks.rangeOf("a", "z"))
		return nil, nil
	})
	require.NoError(t, err)
	mustCode(t, commit(tr), kv.CodeNotCommitted)
}

// testSnapshotNoConflict: snapshot reads of keys and ranges add no read
// conflict ranges.
func testSnapshotNoConflict(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("k"), "1")
	tr := newTr(t, db)
	snap := tr.Snapshot()
	require.Equal(t, []byte("1"), wait(t, snap.Get(ks.key("k"))))
	require.Len(t, slice(t, snap.GetRange(ks.rangeOf("a", "z"), kv.RangeOptions{})), 1)
	wait(t, snap.GetKey(kv.FirstGreaterThan(ks.key("k"))))
	tr.Set(ks.key("out"), []byte("x"))
	set(t, db, ks.key("k"), "2")
	set(t, db, ks.key("m"), "3")
	must(t, commit(tr))
	require.Equal(t, []byte("x"), read(t, db, ks.key("out")))
}

// testExplicitReadConflict: AddReadConflictKey/Range make a transaction
// conflict with writes to what it did not actually read.
func testExplicitReadConflict(t *testing.T, db kv.Database) {
	add := func(add func(tr kv.Transaction, ks keyspace) error) func(*testing.T, keyspace, kv.Transaction) {
		return func(t *testing.T, ks keyspace, tr kv.Transaction) {
			wait(t, tr.GetReadVersion())
			require.NoError(t, add(tr, ks))
		}
	}
	key := add(func(tr kv.Transaction, ks keyspace) error { return tr.AddReadConflictKey(ks.key("k")) })
	rng := add(func(tr kv.Transaction, ks keyspace) error { return tr.AddReadConflictRange(ks.rangeOf("b", "m")) })
	runConflictCases(t, db, nil, []conflictCase{
		{"key", key, "k", true},
		{"key, other written", key, "k\x00", false},
		{"range", rng, "c", true},
		{"range end", rng, "m", false},
	})
}

// testExplicitWriteConflict: AddWriteConflictKey/Range make readers of the
// key or range conflict although nothing was written.
func testExplicitWriteConflict(t *testing.T, db kv.Database) {
	for _, tc := range []struct {
		name string
		add  func(tr kv.Transaction, ks keyspace) error
	}{
		{"key", func(tr kv.Transaction, ks keyspace) error { return tr.AddWriteConflictKey(ks.key("k")) }},
		{"range", func(tr kv.Transaction, ks keyspace) error { return tr.AddWriteConflictRange(ks.rangeOf("j", "l")) }},
	} {
		subScenario(t, tc.name, func(t *testing.T, ks keyspace) {
			set(t, db, ks.key("k"), "1")
			reader := newTr(t, db)
			require.Equal(t, []byte("1"), wait(t, reader.Get(ks.key("k"))))
			reader.Set(ks.key("out"), []byte("x"))

			writer := newTr(t, db)
			require.NoError(t, tc.add(writer, ks))
			must(t, commit(writer))
			require.Equal(t, []byte("1"), read(t, db, ks.key("k")), "a write conflict range writes nothing")

			mustCode(t, commit(reader), kv.CodeNotCommitted)
		})
	}
}

// testBlindWrites: transactions that only write never conflict; the later
// commit wins.
func testBlindWrites(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("k"), "0")
	tr := newTr(t, db)
	wait(t, tr.GetReadVersion())
	tr.Set(ks.key("k"), []byte("1"))
	set(t, db, ks.key("k"), "2")
	must(t, commit(tr))
	require.Equal(t, []byte("1"), read(t, db, ks.key("k")))
}

// testAtomicNoConflict: atomic operations add no read conflict, so
// concurrent adds both commit and both count.
func testAtomicNoConflict(t *testing.T, db kv.Database, ks keyspace) {
	one := kv.Int64(1)
	tr := newTr(t, db)
	wait(t, tr.GetReadVersion())
	tr.Add(ks.key("n"), one)
	_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		tr.Add(ks.key("n"), one)
		return nil, nil
	})
	require.NoError(t, err)
	must(t, commit(tr))
	// Under commit_unknown_result the helper's add may have been
	// applied twice; at least both must be there.
	require.GreaterOrEqual(t, binary.LittleEndian.Uint64(read(t, db, ks.key("n"))), uint64(2))
}

// testReadOnlyCommits: a transaction without writes commits although what it
// read changed.
func testReadOnlyCommits(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("k"), "1")
	tr := newTr(t, db)
	require.Equal(t, []byte("1"), wait(t, tr.Get(ks.key("k"))))
	set(t, db, ks.key("k"), "2")
	must(t, commit(tr))
	v, err := tr.GetCommittedVersion()
	require.NoError(t, err)
	require.Equal(t, int64(-1), v)
}

// testEarlierWriteNoConflict: a write committed before the reader's read
// version is not a conflict.
func testEarlierWriteNoConflict(t *testing.T, db kv.Database, ks keyspace) {
	set(t, db, ks.key("k"), "1")
	tr := newTr(t, db)
	require.Equal(t, []byte("1"), wait(t, tr.Get(ks.key("k"))))
	tr.Set(ks.key("k"), []byte("2"))
	must(t, commit(tr))
	require.Equal(t, []byte("2"), read(t, db, ks.key("k")))
}

// testConflictLimitedRange: a range read stopped by its limit conflicts with
// inserts into the part it read, in either direction, and, as on
// FoundationDB, not with inserts into the part of the range it did not
// reach.
func testConflictLimitedRange(t *testing.T, db kv.Database) {
	read := func(reverse bool) func(*testing.T, keyspace, kv.Transaction) {
		return func(t *testing.T, ks keyspace, tr kv.Transaction) {
			kvs := slice(t, tr.GetRange(ks.rangeOf("b", "z"), kv.RangeOptions{Limit: 2, Reverse: reverse}))
			require.Len(t, kvs, 2)
		}
	}
	forward, reverse := read(false), read(true)
	runConflictCases(t, db, []string{"c", "1", "d", "1", "x", "1", "y", "1"}, []conflictCase{
		{"forward, before the first key", forward, "b0", true},
		{"forward, between keys read", forward, "c0", true},
		{"forward, beyond the keys read", forward, "m", false},
		{"reverse, after the last key", reverse, "y0", true},
		{"reverse, between keys read", reverse, "x0", true},
		{"reverse, beyond the keys read", reverse, "m", false},
	})
}

// testConflictGetKey: resolving a key selector conflicts with writes that
// would change what it resolves to.
func testConflictGetKey(t *testing.T, db kv.Database) {
	getKey := func(sel func(ks keyspace) kv.KeySelector) func(*testing.T, keyspace, kv.Transaction) {
		return func(t *testing.T, ks keyspace, tr kv.Transaction) { wait(t, tr.GetKey(sel(ks))) }
	}
	firstGreaterOrEqualC := getKey(func(ks keyspace) kv.KeySelector { return kv.FirstGreaterOrEqual(ks.key("c")) })
	lastLessThanM := getKey(func(ks keyspace) kv.KeySelector { return kv.LastLessThan(ks.key("m")) })
	runConflictCases(t, db, []string{"a", "1", "e", "1", "z", "1"}, []conflictCase{
		{"first greater or equal", firstGreaterOrEqualC, "d", true},
		{"last less than", lastLessThanM, "f", true},
		{"resolved key changed", firstGreaterOrEqualC, "e", true},
	})
}
