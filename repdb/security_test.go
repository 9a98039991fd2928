package repdb

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

// A database admin by role who writes an object without that role: when
// the commit's result is unknown and the transaction runs again, the
// replay must not judge the writer by the object its first attempt wrote
// (it answered 403 for a write that took effect: TestSecurityObject under
// FDBREP_KV_FAULTS, seed 6405154440294249904).
func TestSetSecurityReplayAfterCommit(t *testing.T) {
	ctx := context.Background()
	db := faultkv.Wrap(kvtest.NewDB(t), faultkv.Options{Seed: testutil.Seed(t), CommitUnknownResult: 0.5})
	s := New(db, Options{})
	require.NoError(t, s.CreateDB(ctx, "_replicator", "u1", nil))
	withDev, err := ParseSecurity([]byte(`{"admins":{"roles":["dev"]}}`))
	require.NoError(t, err)
	withoutDev, err := ParseSecurity([]byte(`{"members":{"names":["alice"]}}`))
	require.NoError(t, err)
	asDev := func(old Security) error {
		if !old.IsAdmin("alice", []string{"dev"}) {
			return ErrDBNotFound // any error: the test wants none
		}
		return nil
	}
	for i := range 20 {
		require.NoError(t, s.SetSecurity(ctx, "_replicator", withDev, nil))
		require.NoError(t, s.SetSecurity(ctx, "_replicator", withoutDev, asDev), "write %d", i)
		got, err := s.ReadSecurity(ctx, "_replicator")
		require.NoError(t, err)
		require.Equal(t, string(withoutDev.Raw), string(got.Raw))
	}
	require.Error(t, s.SetSecurity(ctx, "_replicator", withDev, asDev), "alice is no admin of the object she wrote")
}
