package scheduler

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/replicator/engine"
)

// A refused address is the job's error whichever step of the run met it,
// its reason without the steps that wrap it; other errors keep theirs.
func TestClassifyRefusedAddress(t *testing.T) {
	denied := fmt.Errorf("%w: source http://h:5984/db/: address not allowed for replication: 10.0.0.5:5984 is a private address", engine.ErrAddressDenied)
	for _, err := range []error{denied, fmt.Errorf("%w: %w", engine.ErrChangesFeed, denied), fmt.Errorf("%w: worker: %w", engine.ErrOpenRevs, denied)} {
		tag, reason := classify(err)
		require.Equal(t, "forbidden_address", tag)
		require.Equal(t, "source http://h:5984/db/: address not allowed for replication: 10.0.0.5:5984 is a private address", reason)
	}
	tag, reason := classify(fmt.Errorf("%w: could not open http://h/db/", engine.ErrDBNotFound))
	require.Equal(t, "db_not_found", tag)
	require.Equal(t, "could not open http://h/db/", reason)
}
