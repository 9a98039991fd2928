package main

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// TestSIGTERM builds the binary, starts a node and stops it with SIGTERM:
// it must exit 0 after a graceful shutdown.
func TestSIGTERM(t *testing.T) {
	node := startProcess(t, buildBinary(t), nil, "serve", "-in-memory", "-bind", "127.0.0.1:0", "-log-format", "json")
	addr := node.waitLog(t, "HTTP API listening")["addr"].(string)
	require.Equal(t, 200, testutil.Do(t, "GET", "http://"+addr+"/_up", nil, nil).Status)

	require.NoError(t, node.cmd.Process.Signal(syscall.SIGTERM))
	node.waitLog(t, "shutting down")
	require.NoError(t, node.wait(t), "exit status after SIGTERM")
}
