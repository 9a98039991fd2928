package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSIGTERM builds the binary, starts a node and stops it with SIGTERM:
// it must exit 0 after a graceful shutdown.
func TestSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "fdbrep")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	cmd := exec.Command(bin, "serve", "-in-memory", "-bind", "127.0.0.1:0", "-log-format", "json")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	lines := make(chan map[string]any, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	wait := func(msg string) map[string]any {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case m, ok := <-lines:
				require.True(t, ok, "log ended before %q", msg)
				if m["message"] == msg {
					return m
				}
			case <-timeout:
				t.Fatalf("no %q log line", msg)
			}
		}
	}
	addr := wait("HTTP API listening")["addr"].(string)
	res, err := http.Get("http://" + addr + "/_up")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	wait("shutting down")
	done := make(chan error, 1)
	go func() {
		for m := range lines { // keep reading so the node never blocks on stderr
			_ = m
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGTERM")
	case <-time.After(60 * time.Second):
		t.Fatal("node did not exit within 60s of SIGTERM")
	}
}
