package couchtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// EnvPouchDBServer names the environment variable that, when set, gives the
// path of the pouchdb-server executable to run instead of the one installed
// under scripts/pouchdb.
const EnvPouchDBServer = "FDBREP_POUCHDB_SERVER"

// InstallTimeoutDefault bounds an automatic `npm ci` run.
const InstallTimeoutDefault = 5 * time.Minute

// Directories, relative to the module root, holding the package.json and
// lockfile that pin pouchdb-server and Fauxton.
const (
	pouchDir   = "scripts/pouchdb"
	fauxtonDir = "scripts/fauxton"
)

// fauxtonRelease is where npm ci in scripts/fauxton puts Fauxton's prebuilt
// files, relative to that directory.
const fauxtonRelease = "node_modules/fauxton/dist/release"

// npmPackages is one directory installed with npm ci, once per process.
type npmPackages struct {
	name   string
	dir    string // relative to the module root
	want   string // relative to dir: the file that shows the install is done
	ready  func(path string) bool
	target string // "make <target>" installs it by hand

	mu   sync.Mutex
	done string // the want path once installed
}

var (
	pouchPackages   = &npmPackages{name: "pouchdb-server", dir: pouchDir, want: "node_modules/.bin/pouchdb-server", ready: isExecutable, target: "pouchdb"}
	fauxtonPackages = &npmPackages{name: "Fauxton", dir: fauxtonDir, want: fauxtonRelease + "/index.html", ready: isFile, target: "fauxton"}
)

// pouchDBServerBinary returns the pouchdb-server executable, installing it
// with npm ci (once per process, under a cross-process file lock) when needed.
func pouchDBServerBinary() (string, error) {
	if p := os.Getenv(EnvPouchDBServer); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("couchtest: %s=%q: %w", EnvPouchDBServer, p, err)
		}
		return p, nil
	}
	return pouchPackages.path()
}

// InstalledPouchDBServer returns the pouchdb-server of scripts/pouchdb's
// lockfile, as `make pouchdb` installs it (for a test that runs it there
// with npx, as README's walk-through does), installing it with npm ci when
// needed as StartPouchDB does; unlike StartPouchDB it ignores
// $FDBREP_POUCHDB_SERVER.
func InstalledPouchDBServer() (string, error) { return pouchPackages.path() }

// FauxtonDir returns the directory of Fauxton's prebuilt files (the npm
// package fauxton's dist/release, pinned by scripts/fauxton's lockfile),
// installing it with npm ci when needed as pouchdb-server is.
func FauxtonDir() (string, error) {
	index, err := fauxtonPackages.path()
	if err != nil {
		return "", err
	}
	return filepath.Dir(index), nil
}

// path returns the installed file p.want, running npm ci first if needed.
func (p *npmPackages) path() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != "" {
		return p.done, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, p.dir)
	want := filepath.Join(dir, p.want)
	if !p.ready(want) {
		if err := p.installLocked(dir, want); err != nil {
			return "", fmt.Errorf("couchtest: %s is not installed in %s and installing it failed "+
				"(run `make %s`; it needs Node.js >= 18 and npm): %w", p.name, dir, p.target, err)
		}
	}
	p.done = want
	return want, nil
}

// installLocked runs npm ci in dir unless another process did it meanwhile.
func (p *npmPackages) installLocked(dir, want string) error {
	sum := sha256.Sum256([]byte(dir))
	lockPath := filepath.Join(os.TempDir(), "fdbrep-npm-install-"+hex.EncodeToString(sum[:8])+".lock")
	unlock, err := lockFile(lockPath)
	if err != nil {
		return err
	}
	defer unlock()
	if p.ready(want) { // another test process installed it while we waited
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), InstallTimeoutDefault)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm ci: %w: %s", err, tail(out.Bytes(), 2000))
	}
	if !p.ready(want) {
		return fmt.Errorf("npm ci succeeded but %s is missing", want)
	}
	return nil
}

// moduleRoot walks up from the working directory to the directory holding
// go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("couchtest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("couchtest: no go.mod above the working directory; set " + EnvPouchDBServer)
		}
		dir = parent
	}
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// tail returns at most the last n bytes of b as a string.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
