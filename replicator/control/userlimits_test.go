package control_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// The per-user limits the control plane applies as a replication is
// written: a user who is not a server admin has at most
// max_replications_per_user unfinished replications (documents of every
// _replicator database and POST /_replicate, counted together; a write
// that replaces one of them adds none) and asks a connection_timeout of
// at most max_user_connection_timeout; a server admin's writes are never
// refused, and only the users' jobs carry the limits to the nodes.
func TestUserLimitsAtWrite(t *testing.T) {
	cfg := replicatortest.Config()
	cfg.MaxReplicationsPerUser = 2
	c := replicatortest.NewCluster(t, 0, simengine.New(), cfg)
	ctx := context.Background()
	bob := api.User{Name: "bob", Roles: []string{}}
	doc := func(src string, extra ...any) map[string]any {
		d := replicatortest.RepDoc("http://h/"+src, "http://h/t", true)
		d["owner"] = "bob"
		for i := 0; i+1 < len(extra); i += 2 {
			d[extra[i].(string)] = extra[i+1]
		}
		return d
	}
	refused := func(err error, class error, key string) {
		t.Helper()
		require.ErrorIs(t, err, class)
		require.Contains(t, replicator.Reason(err), "[replicator] "+key)
	}
	post := func(u api.User, body map[string]any) error {
		t.Helper()
		_, err := c.Plane.Replicate(ctx, replicateBody(t, body), u)
		return err
	}

	require.NoError(t, c.PutDocAs(bob, "_replicator", "d1", doc("a")))
	require.NoError(t, c.PutDocAs(bob, "b/_replicator", "d2", doc("b")))
	refused(c.PutDocAs(bob, "_replicator", "d3", doc("c")), replicator.ErrForbidden, "max_replications_per_user")
	refused(post(bob, doc("c")), replicator.ErrForbidden, "max_replications_per_user")
	// Replacing one of them adds none.
	require.NoError(t, c.PutDocAs(bob, "_replicator", "d1", doc("a2")))
	// A server admin may write bob's: it counts as bob's all the same.
	require.NoError(t, c.PutDocAs(api.Admin(), "_replicator", "d3", doc("c")))
	require.NoError(t, c.PutDocAs(bob, "_replicator", "d1", nil))
	refused(c.PutDocAs(bob, "_replicator", "d4", doc("d")), replicator.ErrForbidden, "max_replications_per_user")
	require.NoError(t, c.PutDocAs(bob, "_replicator", "d3", nil))
	require.NoError(t, c.PutDocAs(bob, "_replicator", "d4", doc("d")))

	// connection_timeout: up to the limit for a user, the engine's
	// maximum for an admin; the document's refusal is the parser's (403),
	// the POST's a bad request (400).
	max := replicator.MaxUserConnectionTimeoutDefault.Milliseconds()
	require.NoError(t, c.PutDocAs(bob, "_replicator", "d4", doc("d", "connection_timeout", max)))
	refused(c.PutDocAs(bob, "_replicator", "d4", doc("d", "connection_timeout", max+1)), replicator.ErrForbidden, "max_user_connection_timeout")
	refused(post(bob, doc("e", "connection_timeout", max+1)), replicator.ErrBadRequest, "max_user_connection_timeout")
	require.NoError(t, c.PutDocAs(api.Admin(), "_replicator", "big", doc("f", "connection_timeout", 3_600_000)))

	// The nodes hold the users' jobs to the running limit, not the
	// admins'.
	for id, limited := range map[string]bool{"d4": true, "big": false, "d2": true} {
		db := "_replicator"
		if id == "d2" {
			db = "b/_replicator"
		}
		d, _, err := c.Store.Job(ctx, nil, c.DocJobID(db, id))
		require.NoError(t, err)
		require.Equal(t, limited, d.UserLimited, id)
	}
}
