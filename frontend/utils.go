package frontend

import (
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// UtilsDirDefault is where `make fauxton` installs Fauxton's prebuilt
// files (npm ci in scripts/fauxton), relative to the repository root.
// OptionsFromConfig uses it when [chttpd] utils_dir is empty and the
// directory exists under the working directory.
const UtilsDirDefault = "scripts/fauxton/node_modules/fauxton/dist/release"

// utilsCSP is the Content-Security-Policy of the dashboard's files: its
// scripts, styles, fonts and images come from this server only, and no
// other site may frame it.
const utilsCSP = "default-src 'self'; img-src 'self' data:; font-src 'self' data:; " +
	"script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; frame-ancestors 'self'"

// errNoUtils answers /_utils on a node without Fauxton.
var errNoUtils = notFound("Fauxton is not installed on this node. In a clone of fdbrep, run `make fauxton` " +
	"(npm ci in scripts/fauxton, from its lockfile) and restart; elsewhere, set [chttpd] utils_dir " +
	"(or FDBREP_CHTTPD__UTILS_DIR) to the dist/release directory of the npm package fauxton.")

// checkUtilsDir reports whether dir holds a dashboard: a directory with an
// index.html.
func checkUtilsDir(dir string) error {
	fi, err := os.Stat(filepath.Join(dir, "index.html"))
	if err != nil {
		return fmt.Errorf("%w: UtilsDir %q: no index.html (%v); it must be the dist/release directory of the npm package fauxton",
			ErrInvalidOptions, dir, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: UtilsDir %q: index.html is not a file", ErrInvalidOptions, dir)
	}
	return nil
}

// handleUtilsRedirect sends /_utils to /_utils/, so that the dashboard's
// relative links resolve (a relative Location also works behind a proxy
// that serves fdbrep under a path prefix).
func (s *Server) handleUtilsRedirect(w http.ResponseWriter, r *http.Request) {
	if s.utils == nil {
		writeError(w, errNoUtils)
		return
	}
	w.Header().Set("Location", "_utils/")
	w.WriteHeader(http.StatusMovedPermanently)
}

// handleUtils serves the dashboard's files under /_utils/: index.html for
// /_utils/, the named file otherwise. Directories are not listed, and
// names that leave the directory (.., absolute, backslashes) are 404.
func (s *Server) handleUtils(w http.ResponseWriter, r *http.Request) {
	if s.utils == nil {
		writeError(w, errNoUtils)
		return
	}
	name, err := urlUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/_utils/"))
	if err != nil || strings.Contains(name, `\`) {
		writeError(w, notFound("missing"))
		return
	}
	if name == "" {
		name = "index.html"
	}
	if !fs.ValidPath(name) {
		writeError(w, notFound("missing"))
		return
	}
	fi, err := fs.Stat(s.utils, name)
	if err != nil || !fi.Mode().IsRegular() {
		writeError(w, notFound("missing"))
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "private, must-revalidate")
	h.Set("Content-Security-Policy", utilsCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeFileFS(w, r, s.utils, name)
}
