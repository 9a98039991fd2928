package kvtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var versionstampTests = []conformanceTest{
	inScenario("KeyAndValue", testVersionstampKeyAndValue),
	inScenario("UserVersionsInOneTransaction", testVersionstampUserVersions),
	onDB("ConcurrentCommitsAreOrderedAndUnique", testVersionstampConcurrent),
	onDB("UnreadableInSameTransaction", testVersionstampUnreadable),
	inScenario("MatchesCommittedVersion", testVersionstampCommittedVersion),
	inScenario("ConflictRangeStartsAfterReadVersion", testVersionstampConflictRange),
}

// vsKey returns prefix, 10 placeholder bytes, suffix and the 4-byte
// little-endian offset of the placeholder: the operand of
// SetVersionstampedKey (and, for values, of SetVersionstampedValue).
func vsOperand(prefix, suffix []byte) []byte {
	out := append([]byte{}, prefix...)
	out = append(out, make([]byte, 10)...)
	out = append(out, suffix...)
	return binary.LittleEndian.AppendUint32(out, uint32(len(prefix)))
}

func testVersionstampKeyAndValue(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	tr.SetVersionstampedKey(kv.Key(vsOperand(ks.key("k/"), []byte("/end"))), []byte("v"))
	tr.SetVersionstampedValue(ks.key("val"), vsOperand([]byte("pre"), []byte("post")))
	vsf := tr.GetVersionstamp()
	must(t, commit(tr))
	vs := wait(t, vsf)
	require.Len(t, vs, 10)

	r, err := kv.PrefixRange(ks.key("k/"))
	require.NoError(t, err)
	kvs := readAll(t, db, r)
	require.Len(t, kvs, 1)
	want := append(append(append([]byte{}, ks.key("k/")...), vs...), "/end"...)
	require.Equal(t, want, []byte(kvs[0].Key))
	require.Equal(t, []byte("v"), kvs[0].Value)

	wantVal := append(append([]byte("pre"), vs...), "post"...)
	require.Equal(t, wantVal, read(t, db, ks.key("val")))
}

// testVersionstampUserVersions: several versionstamped keys of one
// transaction share its versionstamp and sort by the user version after it.
func testVersionstampUserVersions(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	for _, uv := range []uint16{3, 0, 2, 1} {
		suffix := binary.BigEndian.AppendUint16(nil, uv)
		tr.SetVersionstampedKey(kv.Key(vsOperand(ks.key("q/"), suffix)), suffix)
	}
	vsf := tr.GetVersionstamp()
	must(t, commit(tr))
	vs := wait(t, vsf)
	r, err := kv.PrefixRange(ks.key("q/"))
	require.NoError(t, err)
	kvs := readAll(t, db, r)
	require.Len(t, kvs, 4)
	for i, e := range kvs {
		stamp := e.Key[len(ks.key("q/")):]
		require.Equal(t, []byte(vs), []byte(stamp[:10]))
		require.Equal(t, uint16(i), binary.BigEndian.Uint16(stamp[10:]))
	}
}

// testVersionstampConcurrent: many transactions committing concurrently get
// distinct versionstamps whose order is the commit order; every key written
// with one is found under the versionstamp its commit reported.
func testVersionstampConcurrent(t *testing.T, db kv.Database) {
	const workers, perWorker = 4, 25
	prefix := kv.Key("vs/")
	type result struct {
		worker, seq int
		vs          []byte
	}
	var (
		mu      sync.Mutex
		results []result
		errs    []error
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev []byte
			for i := range perWorker {
				vs, err := commitVersionstamped(db, vsOperand(prefix, []byte(fmt.Sprintf("/%d/%d", w, i))))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if prev != nil && bytes.Compare(prev, vs) >= 0 {
					errs = append(errs, fmt.Errorf("worker %d: versionstamp %x after %x", w, vs, prev))
				}
				results = append(results, result{w, i, vs})
				mu.Unlock()
				prev = vs
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, results, workers*perWorker)

	seen := map[string]bool{}
	for _, r := range results {
		require.Len(t, r.vs, 10)
		require.False(t, seen[string(r.vs)], "versionstamp %x reported twice", r.vs)
		seen[string(r.vs)] = true
	}
	pr, err := kv.PrefixRange(prefix)
	require.NoError(t, err)
	stored := map[string]string{}
	var order [][]byte
	for _, e := range readAll(t, db, pr) {
		vs := e.Key[len(prefix) : len(prefix)+10]
		stored[string(vs)] = string(e.Key[len(prefix)+10:])
		order = append(order, vs)
	}
	require.True(t, sort.SliceIsSorted(order, func(i, j int) bool { return bytes.Compare(order[i], order[j]) < 0 }))
	for _, r := range results {
		require.Equal(t, fmt.Sprintf("/%d/%d", r.worker, r.seq), stored[string(r.vs)], "key of versionstamp %x", r.vs)
	}
}

// commitVersionstamped commits one versionstamped key in a hand-written
// retry loop (kv.Run cannot return the versionstamp future) and returns the
// versionstamp of the commit that succeeded.
func commitVersionstamped(db kv.Database, key []byte) ([]byte, error) {
	tr, err := db.CreateTransaction()
	if err != nil {
		return nil, err
	}
	for {
		tr.SetVersionstampedKey(kv.Key(key), []byte("v"))
		vsf := tr.GetVersionstamp()
		err := commit(tr)
		if err == nil {
			return vsf.Get()
		}
		var e kv.Error
		if !errors.As(err, &e) {
			return nil, err
		}
		if _, err := tr.OnError(e).Get(); err != nil {
			return nil, err
		}
	}
}

// testVersionstampUnreadable: what a versionstamped operation writes cannot
// be read back before commit (accessed_unreadable).
func testVersionstampUnreadable(t *testing.T, db kv.Database) {
	scenario(t, func(ks keyspace) {
		tr := newTr(t, db)
		tr.SetVersionstampedValue(ks.key("val"), vsOperand(nil, nil))
		_, err := tr.Get(ks.key("val")).Get()
		mustCode(t, err, kv.CodeAccessedUnreadable)

		tr2 := newTr(t, db)
		tr2.SetVersionstampedKey(kv.Key(vsOperand(ks.key("k/"), nil)), []byte("v"))
		r, err := kv.PrefixRange(ks.key("k/"))
		require.NoError(t, err)
		_, err = tr2.GetRange(r, kv.RangeOptions{}).GetSliceWithError()
		mustCode(t, err, kv.CodeAccessedUnreadable)
	})
	// Through the retry loop, MustGet's panic becomes the (non-retryable)
	// error.
	_, err := db.Transact(ctxBg, func(tr kv.Transaction) (any, error) {
		tr.SetVersionstampedValue(kv.Key("val"), vsOperand(nil, nil))
		tr.Get(kv.Key("val")).MustGet()
		return nil, nil
	})
	require.True(t, kv.HasCode(err, kv.CodeAccessedUnreadable), "got %v", err)
}

// testVersionstampCommittedVersion: the first 8 bytes of the versionstamp
// are the commit version, big-endian.
func testVersionstampCommittedVersion(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	rv := wait(t, tr.GetReadVersion())
	tr.Set(ks.key("k"), []byte("v"))
	vsf := tr.GetVersionstamp()
	must(t, commit(tr))
	cv, err := tr.GetCommittedVersion()
	require.NoError(t, err)
	require.Greater(t, cv, rv)
	vs := wait(t, vsf)
	require.Equal(t, uint64(cv), binary.BigEndian.Uint64(vs[:8]))
}

// testVersionstampConflictRange: a versionstamped key conflicts with the
// reads of every key it could land on, those of commits after its read
// version (FoundationDB's getVersionstampKeyRange), and not with the reads
// of keys committed at or before it, which its transaction has seen.
func testVersionstampConflictRange(t *testing.T, db kv.Database, ks keyspace) {
	vs, err := commitVersionstamped(db, vsOperand(ks.key("k/"), nil))
	must(t, err)
	old := append(ks.key("k/"), vs...)

	point, span := newTr(t, db), newTr(t, db)
	v := wait(t, point.Get(kv.Key(old)))
	require.NotNil(t, v)
	r, err := kv.PrefixRange(ks.key("k/"))
	require.NoError(t, err)
	kvs, err := span.GetRange(r, kv.RangeOptions{}).GetSliceWithError()
	must(t, err)
	// old, and under injected faults perhaps a first attempt's key too
	// (its commit_unknown_result committed): a versionstamped key is not
	// idempotent.
	require.NotEmpty(t, kvs)
	require.Equal(t, kv.Key(old), kvs[len(kvs)-1].Key)
	point.Set(ks.key("point"), []byte("x"))
	span.Set(ks.key("span"), []byte("x"))

	// A transaction that starts after the first commit, with no commit in
	// between on the embedded store: its read version is that commit's.
	tr := newTr(t, db)
	wait(t, tr.GetReadVersion())
	tr.SetVersionstampedKey(kv.Key(vsOperand(ks.key("k/"), nil)), []byte("v"))
	must(t, commit(tr))

	must(t, commit(point))
	mustCode(t, commit(span), kv.CodeNotCommitted)
}
