package wire_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// A key rotation while nodes run: credentials stored in the clear (before
// a key was configured) and sealed to the old key are moved to the new
// one by the reseal pass, documents with their jobs (a running job by its
// node as it starts), so that the old key can be dropped. Nothing is
// replicated again or replaced: the one-shot replications stay completed,
// the continuous ones go on, a document written back as read keeps its
// job; and with the new key alone, every replication still runs.
func TestKeyRotationReseals(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a CouchDB peer")
	}
	peer := couchtest.StartCouchDB(t)
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	user, pw := "rotadmin", "pw-"+hex.EncodeToString(b)
	require.Equal(t, 200, peer.Request(t, "PUT", "/_node/_local/_config/admins/"+user, pw, nil))
	withCreds := func(db string) string {
		u, err := url.Parse(peer.DBURL(db))
		require.NoError(t, err)
		u.User = url.UserPassword(user, pw)
		return u.String()
	}
	for _, db := range []string{"src", "cont-src", "trans-src"} {
		peer.CreateDB(t, db)
		peer.AddDocs(t, db, 0, 2)
	}
	oldPub, oldPriv := testutil.SealKeys(t)
	newPub, newPriv := testutil.SealKeys(t)
	keyID := func(pub string) string {
		s, err := seal.LoadPublicKey(pub)
		require.NoError(t, err)
		return s.ID()
	}
	oldID, newID := keyID(oldPub), keyID(newPub)

	db := kvtest.OpenDiskDB(t, t.TempDir())
	// run starts the node with the sealing keys given ("" for none) and
	// returns it with its logs and a stop.
	run := func(pub, privs string) (*service, func()) {
		t.Helper()
		logs := &testutil.Logs{}
		m := settings("node1@127.0.0.1", config.RoleAPIFrontend+","+config.RoleReplication)
		m["replicator"]["seal_public_key_file"] = pub
		m["replicator"]["seal_private_key_files"] = privs
		p, stop := runNode(t, db, logs, m, tuneDefault)
		t.Cleanup(stop)
		return &service{t: t, url: "http://" + p.Addr, node: p.Scheduler, logs: logs, db: db, tune: tuneDefault}, stop
	}
	// scan counts the values of the whole key space that hold each of
	// needles.
	scan := func(needles ...string) []int {
		t.Helper()
		n := make([]int, len(needles))
		require.NoError(t, kv.ReadPages(context.Background(), db, kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")}, 1000,
			func(page []kv.KeyValue) (bool, error) {
				for _, kvp := range page {
					for i, s := range needles {
						if bytes.Contains(kvp.Value, []byte(s)) {
							n[i]++
						}
					}
				}
				return false, nil
			}))
		return n
	}
	sealedTo := func(id string) string { return seal.Prefix + id + ".b:" }

	// No key yet: a one-shot replication's credentials are stored as
	// written.
	s, stop := run("", "")
	r := s.do("PUT", "/_replicator/plain", asAlice, map[string]any{"source": withCreds("src"), "target": withCreds("t-plain"), "create_target": true})
	require.Equal(t, 201, r.Status, r.Raw)
	plainDone := s.waitDocState("_replicator", "plain", "completed")
	require.Positive(t, scan(pw)[0], "without a key, the password is stored in the clear")
	stop()

	// The old key: the pass seals what was stored in the clear; then a
	// one-shot and a continuous document, and a continuous POST
	// /_replicate.
	s, stop = run(oldPub, oldPriv)
	s.logs.WaitFor(t, scheduler.MsgResealEnded, func(m map[string]any) bool { return m["key"] == oldID })
	require.Zero(t, scan(pw)[0], "the document written before a key was configured is sealed")
	r = s.do("PUT", "/_replicator/once", asAlice, map[string]any{"source": withCreds("src"), "target": withCreds("t-once"), "create_target": true})
	require.Equal(t, 201, r.Status, r.Raw)
	r = s.do("PUT", "/_replicator/cont", asAlice, map[string]any{
		"source": map[string]any{"url": peer.DBURL("cont-src"), "auth": map[string]any{"basic": map[string]any{"username": user, "password": pw}}},
		"target": withCreds("t-cont"), "create_target": true, "continuous": true,
	})
	require.Equal(t, 201, r.Status, r.Raw)
	r = s.do("POST", "/_replicate", asAlice, map[string]any{"source": withCreds("trans-src"), "target": withCreds("t-trans"),
		"create_target": true, "continuous": true})
	require.Equal(t, 202, r.Status, r.Raw)
	onceDone := s.waitDocState("_replicator", "once", "completed")
	s.waitDocState("_replicator", "cont", "running")
	testutil.Eventually(t, "the continuous replications copied their sources", func() bool {
		return docCount(peer.AuthDBURL("t-cont")) == 2 && docCount(peer.AuthDBURL("t-trans")) == 2
	})
	counts := scan(pw, sealedTo(oldID), sealedTo(newID))
	require.Zero(t, counts[0])
	require.Positive(t, counts[1])
	require.Zero(t, counts[2])
	stop()

	// The new key first, the old one still listed: the pass moves
	// everything to the new key.
	s, stop = run(newPub, newPriv+","+oldPriv)
	ended := s.logs.WaitFor(t, scheduler.MsgResealEnded, func(m map[string]any) bool { return m["key"] == newID })
	require.EqualValues(t, 0, ended["held"], "%v", ended)
	t.Logf("the pass to the new key moved %v documents and jobs (the running ones moved as they started)", ended["moved"])
	counts = scan(pw, sealedTo(oldID), sealedTo(newID))
	require.Zero(t, counts[0], "a password in the clear is left")
	require.Zero(t, counts[1], "a value sealed to the old key is left")
	require.Positive(t, counts[2])
	// Nothing ran again, nothing was replaced.
	require.Equal(t, plainDone["start_time"], s.waitDocState("_replicator", "plain", "completed")["start_time"])
	require.Equal(t, onceDone["start_time"], s.waitDocState("_replicator", "once", "completed")["start_time"])
	before := s.waitDocState("_replicator", "cont", "running")
	d := s.do("GET", "/_replicator/cont", asAlice, nil)
	require.Equal(t, "*****", d.Body["source"].(map[string]any)["auth"].(map[string]any)["basic"].(map[string]any)["password"])
	d.Body["note"] = "edited"
	r = s.do("PUT", "/_replicator/cont", asAlice, d.Body)
	require.Equal(t, 201, r.Status, r.Raw)
	peer.PutDoc(t, "cont-src", map[string]any{"_id": "after-reseal"})
	testutil.Eventually(t, "a change after the reseal replicated", func() bool { return docCount(peer.AuthDBURL("t-cont")) == 3 })
	require.Equal(t, before["start_time"], s.waitDocState("_replicator", "cont", "running")["start_time"],
		"the document written back as read kept its job: the document and its job hold the same values")
	stop()

	// The old key dropped: every replication runs with the new one.
	s, _ = run(newPub, newPriv)
	peer.PutDoc(t, "cont-src", map[string]any{"_id": "new-key-only"})
	peer.PutDoc(t, "trans-src", map[string]any{"_id": "new-key-only"})
	testutil.Eventually(t, "the continuous replications run with the new key alone", func() bool {
		return docCount(peer.AuthDBURL("t-cont")) == 4 && docCount(peer.AuthDBURL("t-trans")) == 3
	})
	_, lacking := s.logs.Find(scheduler.MsgNoSealingKey, nil)
	require.False(t, lacking, "a credential still needed the old key")
	require.Equal(t, onceDone["start_time"], s.waitDocState("_replicator", "once", "completed")["start_time"])
}
