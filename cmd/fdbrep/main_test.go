package main

import (
	"testing"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// TestMain checks that no test leaves goroutines behind (servers, job
// clients, replication nodes and their runs are all stopped), then removes
// the binaries the tests built.
func TestMain(m *testing.M) { testutil.VerifyTestMain(m, removeBuilds) }
