package fdbjobs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// The hand-built keys are the tuple layer's.
func TestDataKeyIsPacked(t *testing.T) {
	k := newKeys(subspace.Sub("jobs\x00"))
	for _, id := range []string{"", "a", "a\x00b", "\x00\xff"} {
		require.Equal(t, k.data.Pack(tuple.Tuple{"type\x00", id}), k.dataKey("type\x00", id), "%q", id)
	}
}
