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

// InstallTimeoutDefault bounds the automatic `npm ci` run.
const InstallTimeoutDefault = 5 * time.Minute

// pouchDir is the directory, relative to the module root, that holds the
// package.json and lockfile pinning pouchdb-server.
const pouchDir = "scripts/pouchdb"

var (
	installMu   sync.Mutex
	installDone bool
	installBin  string
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
	installMu.Lock()
	defer installMu.Unlock()
	if installDone {
		return installBin, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, pouchDir)
	bin := filepath.Join(dir, "node_modules", ".bin", "pouchdb-server")
	if isExecutable(bin) {
		installDone, installBin = true, bin
		return bin, nil
	}
	if err := installLocked(dir, bin); err != nil {
		return "", fmt.Errorf("couchtest: pouchdb-server is not installed in %s and installing it failed "+
			"(run `make pouchdb`; it needs Node.js >= 18 and npm): %w", dir, err)
	}
	installDone, installBin = true, bin
	return bin, nil
}

// installLocked runs npm ci in dir unless another process did it meanwhile.
func installLocked(dir, bin string) error {
	sum := sha256.Sum256([]byte(dir))
	lockPath := filepath.Join(os.TempDir(), "fdbrep-pouchdb-install-"+hex.EncodeToString(sum[:8])+".lock")
	unlock, err := lockFile(lockPath)
	if err != nil {
		return err
	}
	defer unlock()
	if isExecutable(bin) { // another test process installed it while we waited
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
	if !isExecutable(bin) {
		return fmt.Errorf("npm ci succeeded but %s is missing", bin)
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

// tail returns at most the last n bytes of b as a string.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
