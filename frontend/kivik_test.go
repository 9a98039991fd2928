package frontend

import (
	"context"
	"net/http"
	"testing"

	kivik "github.com/go-kivik/kivik/v4"
	"github.com/go-kivik/kivik/v4/couchdb"
	"github.com/stretchr/testify/require"
)

// TestKivikClient drives the API with a real CouchDB client library.
func TestKivikClient(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	client, err := kivik.New("couch", e.url, couchdb.BasicAuth(adminName, adminPass))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	v, err := client.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, "test", v.Version)
	dbs, err := client.AllDBs(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"_replicator"}, dbs)

	require.NoError(t, client.CreateDB(ctx, "team/_replicator"))
	ok, err := client.DBExists(ctx, "team/_replicator")
	require.NoError(t, err)
	require.True(t, ok)
	err = client.CreateDB(ctx, "team/_replicator")
	require.Equal(t, http.StatusPreconditionFailed, kivik.HTTPStatus(err))
	err = client.CreateDB(ctx, "plain")
	require.Equal(t, http.StatusBadRequest, kivik.HTTPStatus(err))

	db := client.DB("team/_replicator")
	rev, err := db.Put(ctx, "r1", repDoc("continuous", true))
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, db.Get(ctx, "r1").ScanDoc(&got))
	require.Equal(t, rev, got["_rev"])
	require.Equal(t, true, got["continuous"])
	require.NotNil(t, e.rep.job(t, e.db, "team/_replicator", "r1"))

	// Stale rev: 409. Update and delete with the current one.
	_, err = db.Put(ctx, "r1", repDoc())
	require.Equal(t, http.StatusConflict, kivik.HTTPStatus(err))
	got["continuous"] = false
	rev2, err := db.Put(ctx, "r1", got)
	require.NoError(t, err)
	id, rev3, err := db.CreateDoc(ctx, repDoc())
	require.NoError(t, err)
	require.NotEmpty(t, rev3)

	rows := db.AllDocs(ctx, kivik.Param("include_docs", true))
	var ids []string
	for rows.Next() {
		docID, err := rows.ID()
		require.NoError(t, err)
		ids = append(ids, docID)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []string{"r1", id}, ids)

	changes := db.Changes(ctx)
	n := 0
	for changes.Next() {
		n++
	}
	require.NoError(t, changes.Err())
	require.Equal(t, 2, n)

	// Validation errors reach the client as 403.
	_, err = db.Put(ctx, "bad", map[string]any{"target": "http://x/y"})
	require.Equal(t, http.StatusForbidden, kivik.HTTPStatus(err))

	_, err = db.Delete(ctx, "r1", rev2)
	require.NoError(t, err)
	require.Nil(t, e.rep.job(t, e.db, "team/_replicator", "r1"))
	err = db.Get(ctx, "r1").Err()
	require.Equal(t, http.StatusNotFound, kivik.HTTPStatus(err))

	// A non-admin with a cookie session.
	alice, err := kivik.New("couch", e.url, couchdb.CookieAuth(aliceName, alicePass))
	require.NoError(t, err)
	t.Cleanup(func() { _ = alice.Close() })
	_, err = alice.DB("_replicator").Put(ctx, "mine", repDoc())
	require.NoError(t, err)
	err = alice.DestroyDB(ctx, "team/_replicator")
	require.Equal(t, http.StatusUnauthorized, kivik.HTTPStatus(err))
	session, err := alice.Session(ctx)
	require.NoError(t, err)
	require.Equal(t, aliceName, session.Name)

	require.NoError(t, client.DestroyDB(ctx, "team/_replicator"))
	ok, err = client.DBExists(ctx, "team/_replicator")
	require.NoError(t, err)
	require.False(t, ok)
}
