//go:build fdb

package fdbkv

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// A probe that fails says in one line what to check, within its time.
func TestProbeSaysWhatToCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	cases := []struct {
		name, file, want string
		opts             Options
	}{
		{"missing file", filepath.Join(dir, "nope.cluster"), "does not exist", Options{}},
		{"not a cluster file", write("bad.cluster", "garbage\n"), "is not a FoundationDB cluster file", Options{}},
		{"a directory", dir, "cannot be read", Options{}},
		{"coordinators down", write("down.cluster", "test:x@"+closed+"\n"), "do not take connections", Options{}},
	}
	if cf := os.Getenv("FDB_CLUSTER_FILE"); cf != "" {
		cases = append(cases, struct {
			name, file, want string
			opts             Options
		}{"missing tenant", cf, `the tenant "fdbrep-test/none" does not exist`, Options{Tenant: "fdbrep-test/none"}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db, err := OpenWithOptions(tc.file, tc.opts)
			require.NoError(t, err)
			defer db.Close()
			err = kv.Probe(context.Background(), db, 3*time.Second)
			require.ErrorIs(t, err, kv.ErrUnreachable)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}
