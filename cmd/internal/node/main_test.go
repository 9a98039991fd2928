package node

import (
	"testing"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }
