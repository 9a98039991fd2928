package kvtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var versionTests = []conformanceTest{
	inScenario("ReadVersionsAreMonotonic", testReadVersionMonotonic),
	inScenario("ReadVersionIsStable", testReadVersionStable),
	inScenario("CommittedVersion", testCommittedVersion),
}

// testReadVersionMonotonic: read versions never go backwards, and a
// transaction started after a commit reads at or after its version.
func testReadVersionMonotonic(t *testing.T, db kv.Database, ks keyspace) {
	var last int64
	for i := range 20 {
		tr := newTr(t, db)
		rv := wait(t, tr.GetReadVersion())
		require.GreaterOrEqual(t, rv, last)
		last = rv
		if i%5 == 0 {
			tr.Set(ks.key("k"), []byte("v"))
			must(t, commit(tr))
			cv, err := tr.GetCommittedVersion()
			require.NoError(t, err)
			require.Greater(t, cv, rv)
			next := newTr(t, db)
			nrv := wait(t, next.GetReadVersion())
			require.GreaterOrEqual(t, nrv, cv, "a read version after a commit sees it")
			last = nrv
		}
	}
}

func testReadVersionStable(t *testing.T, db kv.Database, ks keyspace) {
	tr := newTr(t, db)
	rv := wait(t, tr.GetReadVersion())
	set(t, db, ks.key("k"), "v")
	require.Equal(t, rv, wait(t, tr.GetReadVersion()))
	require.Nil(t, wait(t, tr.Get(ks.key("k"))), "reads happen at the read version")
	require.Equal(t, rv, wait(t, tr.Snapshot().GetReadVersion()))
}

// testCommittedVersion: commit versions grow with each commit.
func testCommittedVersion(t *testing.T, db kv.Database, ks keyspace) {
	var last int64
	for range 5 {
		tr := newTr(t, db)
		tr.Set(ks.key("k"), []byte("v"))
		must(t, commit(tr))
		cv, err := tr.GetCommittedVersion()
		require.NoError(t, err)
		require.Greater(t, cv, last)
		last = cv
	}
}
