package frontend

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
)

// utilsDir writes a stand-in for Fauxton's dist/release: index.html, an
// asset and, beside the directory, a file no request may reach.
func utilsDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "release")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "dashboard.assets", "js"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "index.html"), []byte("<html>dashboard</html>"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.assets", "js", "app.js"), []byte("var x = 1;"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "secret.ini"), []byte("[admins]"), 0o644))
	return dir
}

// noRedirect answers requests without following redirects.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func TestUtilsServesTheDashboard(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.UtilsDir = utilsDir(t) })

	// /_utils redirects to /_utils/ (relatively, so that it also works
	// behind a proxy that adds a path prefix).
	res, err := noRedirect.Get(e.url + "/_utils")
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusMovedPermanently, res.StatusCode)
	require.Equal(t, "_utils/", res.Header.Get("Location"))

	// Anonymous users get the files (the dashboard asks them to log in).
	r := e.do("GET", "/_utils/", anon, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "<html>dashboard</html>", r.Raw)
	require.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "text/html"), r.Header.Get("Content-Type"))
	require.Contains(t, r.Header.Get("Content-Security-Policy"), "default-src 'self'")
	require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"))
	require.Equal(t, "private, must-revalidate", r.Header.Get("Cache-Control"))
	r = e.do("GET", "/_utils/dashboard.assets/js/app.js", asAdmin, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "var x = 1;", r.Raw)
	require.Contains(t, r.Header.Get("Content-Type"), "javascript")
	r = e.do("HEAD", "/_utils/", anon, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Raw)

	// Wrong credentials are refused here as everywhere.
	requireError(t, e.do("GET", "/_utils/", &creds{Name: adminName, Pass: "nope"}, nil), 401, "unauthorized")
	requireError(t, e.do("POST", "/_utils/", asAdmin, nil), 405, "method_not_allowed")

	// No directory listings, nothing outside the directory, JSON errors.
	for _, path := range []string{
		"/_utils/dashboard.assets/", "/_utils/dashboard.assets", "/_utils/missing.js",
		"/_utils/../secret.ini", "/_utils/%2E%2E/secret.ini", "/_utils/..%2Fsecret.ini",
		"/_utils/dashboard.assets/..%2F..%2Fsecret.ini", "/_utils/%2Fetc%2Fpasswd", "/_utils/..%5Csecret.ini",
		"/_utils//index.html",
	} {
		requireError(t, e.do("GET", path, asAdmin, nil), 404, "not_found")
	}
}

func TestUtilsWithoutTheDashboard(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{"/_utils", "/_utils/", "/_utils/dashboard.assets/js/app.js"} {
		r := e.do("GET", path, anon, nil)
		requireError(t, r, 404, "not_found")
		require.Contains(t, r.Body["reason"], "make fauxton", path)
		require.Contains(t, r.Body["reason"], "[chttpd] utils_dir", path)
	}

	_, err := New(Options{DB: e.db, UtilsDir: t.TempDir()})
	require.ErrorIs(t, err, ErrInvalidOptions, "a directory without index.html")
}

func TestUtilsDirFromConfig(t *testing.T) {
	load := func(dir string) (string, error) {
		t.Helper()
		cfg, err := config.FromMap(map[string]map[string]string{"chttpd": {"utils_dir": dir}})
		require.NoError(t, err)
		o, _, err := OptionsFromConfig(cfg)
		return o.UtilsDir, err
	}
	dir := utilsDir(t)
	got, err := load(dir)
	require.NoError(t, err)
	require.Equal(t, dir, got)
	_, err = load(filepath.Dir(dir))
	require.ErrorContains(t, err, "[chttpd] utils_dir")

	// Empty: the repository's install when the working directory has one.
	got, err = load("")
	require.NoError(t, err)
	require.Empty(t, got, "no scripts/fauxton under the package's directory")
	wd := t.TempDir()
	release := filepath.Join(wd, filepath.FromSlash(UtilsDirDefault))
	require.NoError(t, os.MkdirAll(release, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(release, "index.html"), []byte("<html></html>"), 0o644))
	t.Chdir(wd)
	got, err = load("")
	require.NoError(t, err)
	require.Equal(t, release, got)
}

func TestAllDBsRange(t *testing.T) {
	e := newEnv(t)
	for _, db := range []string{"a%2F_replicator", "b%2F_replicator", "c%2F_replicator"} {
		require.Equal(t, 201, e.do("PUT", "/"+db, asAdmin, nil).Status)
	}
	for query, want := range map[string][]any{
		"":                                    {"_replicator", "a/_replicator", "b/_replicator", "c/_replicator"},
		`?startkey="a"&endkey="b\uffff"`:      {"a/_replicator", "b/_replicator"},
		`?start_key="b"`:                      {"b/_replicator", "c/_replicator"},
		`?endkey="b/_replicator"`:             {"_replicator", "a/_replicator", "b/_replicator"},
		`?descending=true&startkey="b\uffff"`: {"b/_replicator", "a/_replicator", "_replicator"},
		`?descending=true&endkey="b"&limit=5`: {"c/_replicator", "b/_replicator"},
		"?limit=2&skip=1":                     {"a/_replicator", "b/_replicator"},
		"?limit=0":                            {},
		`?startkey="z"`:                       {},
		`?startkey="%E9%A6%99"&endkey="%E9%A6%99"`: {},
	} {
		r := e.do("GET", "/_all_dbs"+strings.ReplaceAll(query, `\uffff`, "%EF%BF%BF"), asAdmin, nil)
		require.Equal(t, 200, r.Status, query)
		require.Equal(t, want, r.List, query)
	}
	requireError(t, e.do("GET", "/_all_dbs?startkey=a", asAdmin, nil), 400, "query_parse_error")
	requireError(t, e.do("GET", "/_all_dbs?limit=-1", asAdmin, nil), 400, "query_parse_error")
	requireError(t, e.do("GET", "/_all_dbs?descending=maybe", asAdmin, nil), 400, "query_parse_error")
}
