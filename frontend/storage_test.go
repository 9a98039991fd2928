package frontend

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// M3: with the disk full, a write is refused at once with 507 (nothing
// stored), reads go on, /_up says so, and everything resumes once space is
// freed.
func TestDiskFull(t *testing.T) {
	db, full := kvtest.OpenFullableDisk(t)
	e := newEnv(t, func(o *Options) { o.DB = db })
	require.Equal(t, 201, e.do("PUT", "/_replicator/before", asAdmin, repDoc()).Status)

	full.Store(true)
	// The first write to hit the disk may be the one that finds it full:
	// it fails either way, and from then on the store refuses at once.
	r := e.do("PUT", "/_replicator/during", asAdmin, repDoc())
	require.Contains(t, []int{503, 507}, r.Status, r.Raw)
	requireError(t, e.do("PUT", "/_replicator/during2", asAdmin, repDoc()), 507, "insufficient_storage")
	require.Equal(t, 200, e.do("GET", "/_replicator/before", asAdmin, nil).Status, "reads go on")
	up := e.do("GET", "/_up", anon, nil)
	require.Equal(t, 507, up.Status)
	require.Equal(t, "storage_full", up.Body["status"])

	full.Store(false)
	// The store notices at its next retry of the waiting write.
	testutil.Eventually(t, "the store healthy again", func() bool { return e.do("GET", "/_up", anon, nil).Status == 200 })
	require.Equal(t, 201, e.do("PUT", "/_replicator/after", asAdmin, repDoc()).Status)
	requireError(t, e.do("GET", "/_replicator/during2", asAdmin, nil), 404, "not_found")
}
