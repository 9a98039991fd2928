package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

func TestVersionOf(t *testing.T) {
	stamp := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/fdbrep/fdbrep", Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "2b219b4ae4990123456789abcdef0123456789ab"},
			{Key: "vcs.time", Value: "2026-11-26T21:32:46+01:00"}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tc := range []struct {
		name string
		set  string
		info *debug.BuildInfo
		want string
	}{
		{"-ldflags wins", "v9.9.9-test", stamp("true"), "v9.9.9-test"},
		{"a released module", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"a checkout", "", stamp("false"), "v0.0.0-20261126203246-2b219b4ae499"},
		{"a checkout with changes", "", stamp("true"), "v0.0.0-20261126203246-2b219b4ae499+dirty"},
		{"no stamp", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, VersionUnknown},
		{"no build info", "", nil, VersionUnknown},
	} {
		require.Equal(t, tc.want, versionOf(tc.set, tc.info), tc.name)
	}
}

// versionReported runs bin's fdbrep version and a node of it, and
// returns the version each reports: fdbrep version, GET / (CouchDB's
// welcome, its vendor's version) and /_membership agree.
func versionReported(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "fdbrep ")
	require.True(t, ok, "%s", out)
	node := startClientNode(t, bin)
	r := testutil.Do(t, http.MethodGet, node.base+"/", nil, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Equal(t, "Welcome", r.Body["couchdb"])
	require.Regexp(t, "^[0-9a-f]{32}$", r.Body["uuid"])
	require.Equal(t, v, r.Body["version"])
	require.Equal(t, map[string]any{"name": "fdbrep", "version": v}, r.Body["vendor"])
	r = testutil.Do(t, http.MethodGet, node.base+"/_membership", node.adm, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	for _, n := range r.Body["nodes"].(map[string]any) {
		require.Equal(t, v, n.(map[string]any)["version"])
	}
	return v
}

// A build reports its version everywhere: -ldflags -X main.version
// (make build's) when set, else the version control stamp of a build in a
// checkout, which Go writes unless -buildvcs=false, and not in a git
// worktree (whose .git is a file).
func TestBuildReportsItsVersion(t *testing.T) {
	require.Equal(t, "v9.9.9-test", versionReported(t, buildBinary(t, "-ldflags", "-X main.version=v9.9.9-test")))

	if fi, err := os.Stat(filepath.Join(repoRoot, ".git")); err != nil || !fi.IsDir() {
		t.Skip("not a git clone (a worktree, or no .git): Go stamps no version control information")
	}
	head, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v", err)
	}
	v := versionReported(t, buildBinary(t, "-buildvcs=true"))
	require.Regexp(t, `^v0\.0\.0-\d{14}-`+regexp.QuoteMeta(string(head[:12]))+`(\+dirty)?$`, v)
}
