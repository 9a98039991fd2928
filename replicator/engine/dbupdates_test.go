package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/replicator/engine"
)

// A real CouchDB 3.5's _db_updates: 404 until _global_changes exists (3.x
// does not create it), then the feed, from its end ("now") and from a
// sequence; 401 to a user who is not a server admin. Pending, the exact
// check of a parked replication, counts the changes after a sequence.
func TestDBUpdatesOfCouchDB(t *testing.T) {
	srv := startPeer(t, 3)
	ctx := context.Background()
	rep := srcTo(t, srv, "tgt", engine.Replication{})
	rows := func(since string) ([]engine.DBUpdate, string, error) {
		var got []engine.DBUpdate
		last, err := engine.DBUpdates(ctx, rep, engine.Options{}, since, 200*time.Millisecond, func(u engine.DBUpdate) error {
			got = append(got, u)
			return nil
		})
		return got, last, err
	}

	_, _, err := rows("now")
	require.ErrorIs(t, err, engine.ErrNoDBUpdates, "no _global_changes yet")
	require.ErrorIs(t, err, engine.ErrDBNotFound)

	srv.EnsureDB(t, "_global_changes")
	_, end, err := rows("now")
	require.NoError(t, err)
	require.NotEmpty(t, end)
	srv.AddDocs(t, "src", 3, 1)
	var seen []engine.DBUpdate
	for !containsDB(seen, "src") { // CouchDB writes its events about half a second late
		got, last, err := rows(end)
		require.NoError(t, err)
		seen, end = append(seen, got...), last
	}

	n, err := engine.Pending(ctx, rep, engine.Options{}, "0")
	require.NoError(t, err)
	require.EqualValues(t, 4, n, "four documents since the start")
	info := srv.DBInfo(t, "src")
	n, err = engine.Pending(ctx, rep, engine.Options{}, info["update_seq"].(string))
	require.NoError(t, err)
	require.Zero(t, n, "nothing after the last sequence")

	srv.AddUser(t, "bob", "bobpass")
	bob := rep
	bob.Source.Username, bob.Source.Password = "bob", "bobpass"
	_, err = engine.DBUpdates(ctx, bob, engine.Options{}, "now", time.Millisecond, func(engine.DBUpdate) error { return nil })
	require.True(t, errors.Is(err, engine.ErrUnauthorized) || errors.Is(err, engine.ErrForbidden), "%v", err)
	require.NotContains(t, err.Error(), "bobpass")
}

func containsDB(us []engine.DBUpdate, db string) bool {
	for _, u := range us {
		if u.DB == db {
			return true
		}
	}
	return false
}
