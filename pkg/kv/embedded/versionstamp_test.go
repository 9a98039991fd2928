package embedded

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// vsKey is prefix + a 10-byte placeholder + the 4-byte offset suffix.
func vsKey(prefix string) kv.Key {
	k := append([]byte(prefix), make([]byte, 10)...)
	return kv.Key(binary.LittleEndian.AppendUint32(k, uint32(len(prefix))))
}

// commitStamped commits n concurrent transactions that each write a
// versionstamped key under prefix and a versionstamped value, returning
// their versionstamps.
func commitStamped(t *testing.T, db *DB, prefix string, n int) [][]byte {
	t.Helper()
	stamps := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tr, err := db.CreateTransaction()
			require.NoError(t, err)
			tr.SetVersionstampedKey(vsKey(prefix), []byte{byte(i)})
			tr.SetVersionstampedValue(kv.Key(prefix+"v"+string(rune('a'+i%26))+string(rune('a'+i/26))),
				append(make([]byte, 10), 0, 0, 0, 0))
			vs := tr.GetVersionstamp()
			_, err = tr.Commit().Get()
			require.NoError(t, err)
			stamp, err := vs.Get()
			require.NoError(t, err)
			require.Len(t, stamp, 10)
			cv, err := tr.GetCommittedVersion()
			require.NoError(t, err)
			require.Equal(t, uint64(cv), binary.BigEndian.Uint64(stamp))
			stamps[i] = stamp
		})
	}
	wg.Wait()
	return stamps
}

func TestVersionstamps(t *testing.T) {
	dir := t.TempDir()
	db := openDir(t, dir)
	stamps := commitStamped(t, db, "p/", 50)
	seen := map[string]bool{}
	for _, s := range stamps {
		require.False(t, seen[string(s)], "versionstamps are unique")
		seen[string(s)] = true
	}
	// The stamped keys are exactly the stamps, in commit order.
	tr := newTr(t, db)
	kvs, err := tr.GetRange(kr("p/", "p/v"), kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err)
	require.Len(t, kvs, 50)
	var last []byte
	for _, e := range kvs {
		s := []byte(e.Key[2:])
		require.True(t, seen[string(s)])
		require.Positive(t, bytes.Compare(s, last))
		last = s
	}
	vals, err := tr.GetRange(kr("p/v", "p/w"), kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err)
	for _, e := range vals {
		require.True(t, seen[string(e.Value)], "versionstamped values hold the commit's stamp")
	}
	tr.Cancel()
	require.NoError(t, db.Close())

	// Versions keep increasing across a reopen.
	db = openDir(t, dir)
	defer func() { require.NoError(t, db.Close()) }()
	for _, s := range commitStamped(t, db, "q/", 5) {
		require.Positive(t, bytes.Compare(s, last))
	}
}

func TestVersionstampOrderWithinBatch(t *testing.T) {
	db := openMem(t)
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	db.testHookBatch = func(n int) {
		if n == 1 {
			entered <- struct{}{}
			<-hold
		}
	}
	blocker := newTr(t, db)
	blocker.Set(kv.Key("b"), nil)
	bf := blocker.Commit()
	<-entered // the leader is busy with the blocker
	var vss []kv.FutureKey
	var futs []kv.FutureNil
	for range 3 {
		tr := newTr(t, db)
		tr.SetVersionstampedKey(vsKey("s/"), nil)
		vss = append(vss, tr.GetVersionstamp())
		futs = append(futs, tr.Commit())
	}
	close(hold)
	_, err := waitReady(t, bf)
	require.NoError(t, err)
	var stamps [][]byte
	for i, f := range futs {
		_, err := waitReady(t, f)
		require.NoError(t, err)
		s, err := waitReady(t, vss[i])
		require.NoError(t, err)
		stamps = append(stamps, s)
	}
	for i := 1; i < len(stamps); i++ {
		require.Equal(t, stamps[0][:8], stamps[i][:8], "one commit version per batch")
		require.Equal(t, uint16(i), binary.BigEndian.Uint16(stamps[i][8:]), "order within the batch")
	}
}
