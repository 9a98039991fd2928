//go:build fdb

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A node interrupted while it waits for a FoundationDB cluster that does
// not answer exits 0, says what it was doing, and prints durations
// rounded (the probe's was 6.666666666s).
func TestInterruptWhileWaitingForFDB(t *testing.T) {
	bin := buildBinary(t)
	cf := filepath.Join(t.TempDir(), "fdb.cluster")
	require.NoError(t, os.WriteFile(cf, []byte("test:test@127.0.0.1:1\n"), 0o644))
	p := startProcess(t, bin, os.Environ(), "serve", "-backend", "fdb", "-cluster-file", cf,
		"-bind", "127.0.0.1:0", "-log-format", "json")
	w := p.waitLog(t, "waiting for FoundationDB")
	require.NotContains(t, w["error"], "6.666", "durations rounded")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	l := p.waitLog(t, "interrupted while waiting for FoundationDB (context canceled)")
	require.Equal(t, "info", l["level"])
	<-p.exited
	require.NoError(t, p.err, "an interrupt is not a failure")
}
