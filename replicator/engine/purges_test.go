package engine_test

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// TestFollowPurges: against CouchDB 3.5, a replication with follow_purges
// purges on the target the revisions purged on the source (at the next
// run's start, and at a continuous run's checkpoint); a document purged
// and written again with the same body (the same revision) stays; a
// replication without it keeps the purged documents, as CouchDB's does;
// a doc_ids replication follows the purges of its documents only; a run
// with no new purge sends no _purge (the purge_seq applied is in the
// checkpoint documents).
func TestFollowPurges(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	srv := couchtest.StartCouchDB(t)
	srv.CreateDB(t, "src")
	revs := map[string]string{}
	for i := range 20 {
		id := fmt.Sprintf("d%02d", i)
		revs[id] = srv.PutDoc(t, "src", map[string]any{"_id": id, "n": i})
	}
	for _, db := range []string{"following", "plain", "some"} {
		srv.CreateDB(t, db)
	}
	follow := srcTo(t, srv, "following", engine.Replication{FollowPurges: true})
	plain := srcTo(t, srv, "plain", engine.Replication{})
	some := srcTo(t, srv, "some", engine.Replication{FollowPurges: true, DocIDs: []string{"d00", "d01", "d02"}})
	for _, rep := range []engine.Replication{follow, plain, some} {
		require.True(t, runOnce(t, rep, engine.Options{}).Completed)
	}
	require.EqualValues(t, 20, srv.DBInfo(t, "following")["doc_count"])

	purge := func(ids ...string) {
		t.Helper()
		body := map[string][]string{}
		for _, id := range ids {
			body[id] = []string{revs[id]}
		}
		require.Equal(t, 201, srv.Request(t, "POST", "/src/_purge", body, nil))
	}
	// d00-d04 purged; d05 purged and written again with the same body:
	// the same revision, on the source again.
	purge("d00", "d01", "d02", "d03", "d04", "d05")
	require.Equal(t, revs["d05"], srv.PutDoc(t, "src", map[string]any{"_id": "d05", "n": 5}))

	for _, rep := range []engine.Replication{follow, plain, some} {
		require.True(t, runOnce(t, rep, engine.Options{}).Completed)
	}
	for i := range 5 {
		require.Nil(t, srv.GetDoc(t, "following", fmt.Sprintf("d%02d", i)))
	}
	require.EqualValues(t, 15, srv.DBInfo(t, "following")["doc_count"], "d00-d04 purged, d05 kept")
	require.NotNil(t, srv.GetDoc(t, "following", "d05"))
	require.EqualValues(t, 20, srv.DBInfo(t, "plain")["doc_count"], "without follow_purges, nothing purged")
	require.EqualValues(t, 0, srv.DBInfo(t, "some")["doc_count"], "the purges of its own documents")

	// No new purge: no _purge on the target.
	seq := srv.DBInfo(t, "following")["purge_seq"]
	require.True(t, runOnce(t, follow, engine.Options{}).Completed)
	require.Equal(t, seq, srv.DBInfo(t, "following")["purge_seq"], "nothing purged again")
	base, _, err := engine.ReplicationID(follow, testUUID, "")
	require.NoError(t, err)
	require.NotNil(t, srv.GetDoc(t, "src", "_local/"+base)["fdbrep_purge_seq"], "the purges applied, in the checkpoint")

	// A continuous run follows a purge at its next checkpoint.
	cont := follow
	cont.Continuous, cont.CheckpointInterval = true, 200*time.Millisecond
	run := start(t, cont, engine.Options{})
	run.next()
	purge("d10")
	for srv.GetDoc(t, "following", "d10") != nil {
		run.next()
	}
	run.Stop(run.ctx)
	_, err = run.Wait()
	require.True(t, err == nil || errors.Is(err, engine.ErrStopped), "%v", err)
}

// TestFollowPurgesRefused: a target that refuses _purge (its user is a
// member, not a server admin) fails the run with follow_purges_failed, naming
// the target; nothing is written half-way on the source.
func TestFollowPurgesRefused(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	srv := couchtest.StartCouchDB(t)
	srv.CreateDB(t, "src")
	rev := srv.PutDoc(t, "src", map[string]any{"_id": "a"})
	srv.CreateDB(t, "tgt")
	require.True(t, runOnce(t, srcTo(t, srv, "tgt", engine.Replication{}), engine.Options{}).Completed)
	require.Equal(t, 201, srv.Request(t, "POST", "/src/_purge", map[string][]string{"a": {rev}}, nil))
	srv.AddUser(t, "member", "member-pw")
	srv.SetSecurity(t, "tgt", map[string]any{"members": map[string]any{"names": []string{"member"}}})
	tgt, err := url.Parse(srv.DBURL("tgt"))
	require.NoError(t, err)
	tgt.User = url.UserPassword("member", "member-pw")
	rep := engine.Replication{Source: endpoint(t, srv.AuthDBURL("src")), Target: endpoint(t, tgt.String()), FollowPurges: true}
	_, err = start(t, rep, engine.Options{}).Wait()
	require.ErrorIs(t, err, engine.ErrPurges)
	require.Contains(t, err.Error(), "refused _purge")
	require.NotContains(t, err.Error(), "member-pw")
}
