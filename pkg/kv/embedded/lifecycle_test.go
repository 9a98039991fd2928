package embedded

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// TestNoGoroutinesLeftBehind opens, uses and closes stores and checks that
// none of their goroutines is left.
func TestNoGoroutinesLeftBehind(t *testing.T) {
	testutil.NoLeaks(t)
	for _, o := range []Options{{InMemory: true}, {Dir: t.TempDir()}} {
		db, err := Open(o)
		require.NoError(t, err)
		put(t, db, "k", "v")
		tr, err := db.CreateTransaction()
		require.NoError(t, err)
		w := tr.Watch(kv.Key("k"))
		_, err = tr.Commit().Get()
		require.NoError(t, err)
		open, err := db.CreateTransaction()
		require.NoError(t, err)
		_, err = open.Get(kv.Key("k")).Get() // holds a snapshot through Close
		require.NoError(t, err)
		require.NoError(t, db.Close())
		_, err = w.Get()
		require.ErrorIs(t, err, kv.ErrDatabaseClosed)
		open.Cancel()
	}
}

// TestReopenKeepsData: a closed store opens with its data and a higher
// version.
func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	db := openDir(t, dir)
	put(t, db, "a", "1", "b", "2")
	tr := newTr(t, db)
	tr.Set(kv.Key("c"), []byte("3"))
	_, err := tr.Commit().Get()
	require.NoError(t, err)
	cv, err := tr.GetCommittedVersion()
	require.NoError(t, err)
	require.NoError(t, db.Close())

	db = openDir(t, dir)
	defer func() { require.NoError(t, db.Close()) }()
	require.Equal(t, []string{"a", "b", "c"}, getRange(t, newTr(t, db), kr("", "\xff"), kv.RangeOptions{}))
	rv, err := newTr(t, db).GetReadVersion().Get()
	require.NoError(t, err)
	require.Equal(t, cv, rv, "the read version after a reopen is the last commit's")

	_, err = Open(Options{Dir: dir})
	require.ErrorIs(t, err, ErrInUse, "a second open of the same directory fails")
	require.ErrorContains(t, err, dir+" is open in this process already")
}
