package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// lockoutPeer starts a real CouchDB 3.5 ([chttpd_auth_lockout] on, as by
// default) with user bob (password right-pw), member of databases src,
// holding docs documents, and tgt; endpoint names a database of it as bob
// with a password.
func lockoutPeer(t *testing.T, docs int) (srv *couchtest.Server, host string, endpoint func(password, db string) string) {
	t.Helper()
	srv = couchtest.StartCouchDB(t)
	srv.AddUser(t, "bob", "right-pw")
	for _, db := range []string{"src", "tgt"} {
		srv.CreateDB(t, db)
		srv.SetSecurity(t, db, map[string]any{"members": map[string]any{"names": []string{"bob"}}})
	}
	srv.AddDocs(t, "src", 0, docs)
	host = strings.TrimPrefix(srv.URL(), "http://")
	return srv, host, func(password, db string) string { return "http://bob:" + password + "@" + host + "/" + db }
}

// A document with a wrong password does not lock its user out of CouchDB
// 3.5, whose [chttpd_auth_lockout] (on by default) refuses a user's right
// password too, from an address, once 5 logins from there failed within
// 5 minutes: each start of the job costs one failed login, and its
// backoff (min_backoff 32 s, doubling, less up to a quarter) starts it at
// most 4 times in 5 minutes. The test ends each backoff itself, as
// POST /_scheduler/jobs/{id}/_retry does. A document with the right
// password then replicates. The bad document's info and stall keep
// CouchDB's reason, and its runs' "replication setup failed" line names
// the job and the document.
func TestWrongPasswordDoesNotLockOut(t *testing.T) {
	const docs, starts = 10, 4
	srv, host, endpoint := lockoutPeer(t, docs)

	logs := &testutil.SyncBuffer{}
	cfg := testConfig()
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	c := newCluster(t, 1, replicator.EngineDefault{Logger: zerolog.New(logs)}, cfg)
	c.PutDoc("_replicator", "bad", repDoc(endpoint("wrong-pw", "src"), endpoint("wrong-pw", "tgt"), false))
	jobID := c.DocJobID("_replicator", "bad")
	for n := 1; n <= starts; n++ {
		c.WaitJob(fmt.Sprintf("crash %d", n), jobID, func(_ fdbjobs.State, d *replicator.JobData) bool {
			return d != nil && d.State == replicator.StateCrashing && d.ErrorCount == n
		})
		if n < starts {
			_, err := c.Plane.RetryJob(context.Background(), api.Admin(), jobID)
			require.NoError(t, err)
		}
	}
	var info struct {
		Error, Reason string
		Stall         struct{ Reason, Detail string }
	}
	require.NoError(t, json.Unmarshal(c.DocState("_replicator", "bad").Info, &info))
	require.Equal(t, "unauthorized", info.Error)
	require.Equal(t, "unauthorized to access or create database http://bob:*****@"+host+"/src/: "+
		"the peer refused the login: Name or password is incorrect.", info.Reason)
	require.Equal(t, engine.StallBackingOff, info.Stall.Reason)
	require.Equal(t, info.Reason, info.Stall.Detail)

	c.PutDoc("_replicator", "good", repDoc(endpoint("right-pw", "src"), endpoint("right-pw", "tgt"), false))
	d := c.WaitDocState("_replicator", "good", replicator.StateCompleted, replicator.StateCrashing)
	require.Equal(t, replicator.StateCompleted, d.State, "%s", d.Info)
	require.Equal(t, docs, docCount(t, srv, "tgt"))

	var failed int
	for l := range strings.Lines(logs.String()) {
		var line struct {
			Message string `json:"message"`
			JobID   string `json:"job_id"`
			DB      string `json:"db"`
			DocID   string `json:"doc_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &line))
		if line.Message == "replication setup failed" {
			failed++
			require.Equal(t, jobID+" _replicator bad", line.JobID+" "+line.DB+" "+line.DocID)
		}
	}
	require.Equal(t, starts, failed)
	require.NotContains(t, logs.String(), "wrong-pw")
}

// Documents that share a wrong password do not lock their user out
// either: the node's runs share a memory of refused logins
// (couch.Logins), so the peer sees one failed login in its 5 minutes,
// however many documents start and restart with that password (here 6
// documents started twice each: 12 failed logins without it, well over
// CouchDB's threshold of 5). A document with the right password then
// replicates, and every bad document keeps CouchDB's reason.
func TestSharedWrongPasswordDoesNotLockOut(t *testing.T) {
	const docs, bad, starts = 10, 6, 2
	srv, _, endpoint := lockoutPeer(t, docs)

	cfg := testConfig()
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	c := newCluster(t, 1, replicator.EngineDefault{Logins: couch.NewLogins(0, nil)}, cfg)
	ids := make([]string, bad)
	for i := range ids {
		doc := fmt.Sprintf("bad%d", i)
		// A target of its own: documents that name the same source and
		// target are one replication (duplicates).
		c.PutDoc("_replicator", doc, repDoc(endpoint("wrong-pw", "src"), endpoint("wrong-pw", "tgt"+doc), false))
		ids[i] = c.DocJobID("_replicator", doc)
	}
	for n := 1; n <= starts; n++ {
		for i, id := range ids {
			c.WaitJob(fmt.Sprintf("bad%d's crash %d", i, n), id, func(_ fdbjobs.State, d *replicator.JobData) bool {
				return d != nil && d.State == replicator.StateCrashing && d.ErrorCount == n
			})
			if n < starts {
				_, err := c.Plane.RetryJob(context.Background(), api.Admin(), id)
				require.NoError(t, err)
			}
		}
	}
	for i := range ids {
		var info struct{ Error, Reason string }
		require.NoError(t, json.Unmarshal(c.DocState("_replicator", fmt.Sprintf("bad%d", i)).Info, &info))
		require.Equal(t, "unauthorized", info.Error)
		require.Contains(t, info.Reason, "the peer refused the login: Name or password is incorrect.")
	}

	c.PutDoc("_replicator", "good", repDoc(endpoint("right-pw", "src"), endpoint("right-pw", "tgt"), false))
	d := c.WaitDocState("_replicator", "good", replicator.StateCompleted, replicator.StateCrashing)
	require.Equal(t, replicator.StateCompleted, d.State, "%s", d.Info)
	require.Equal(t, docs, docCount(t, srv, "tgt"))
}

// Documents with different wrong passwords for one account do not lock it
// out of CouchDB 3.5 either, nor make a password-guessing oracle of the
// node: its runs share a budget of refused logins per user and server
// (couch.Logins; [replicator] login_failure_budget, 3, under CouchDB's
// threshold of 5), and the logins with passwords that have not worked go
// one at a time. Past the budget, the jobs with such passwords crash
// login_budget, naming the account and when it may try again, without a
// login; CouchDB saw 3 failures (the account still logs in from the
// node's address), and a password that logged in before keeps working.
func TestWrongPasswordsDoNotLockOut(t *testing.T) {
	const docs, bad = 10, 6
	srv, host, endpoint := lockoutPeer(t, docs)

	cfg := testConfig()
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	c := newCluster(t, 1, replicator.EngineDefault{Logins: couch.NewLogins(0, nil)}, cfg)
	c.PutDoc("_replicator", "good", repDoc(endpoint("right-pw", "src"), endpoint("right-pw", "tgt"), false))
	d := c.WaitDocState("_replicator", "good", replicator.StateCompleted, replicator.StateCrashing)
	require.Equal(t, replicator.StateCompleted, d.State, "%s", d.Info)

	for i := range bad {
		doc := fmt.Sprintf("bad%d", i)
		pw := fmt.Sprintf("wrong-pw-%d", i)
		c.PutDoc("_replicator", doc, repDoc(endpoint(pw, "src"), endpoint(pw, "tgt"+doc), false))
	}
	errs := map[string]int{}
	for i := range bad {
		d := c.WaitDocState("_replicator", fmt.Sprintf("bad%d", i), replicator.StateCrashing)
		var info struct {
			Error, Reason string
			Stall         struct{ Reason, Detail string }
		}
		require.NoError(t, json.Unmarshal(d.Info, &info))
		errs[info.Error]++
		if info.Error == "login_budget" {
			require.Contains(t, info.Reason, "3 logins of bob at http://"+host+" were refused lately")
			require.Contains(t, info.Reason, "is not tried before ")
			require.Equal(t, engine.StallBackingOff, info.Stall.Reason)
			require.Equal(t, info.Reason, info.Stall.Detail)
		}
		require.NotContains(t, string(d.Info), "wrong-pw")
	}
	require.Equal(t, map[string]int{"unauthorized": 3, "login_budget": bad - 3}, errs)

	// Not locked out: bob logs in at CouchDB from the node's address.
	res, err := http.PostForm(srv.URL()+"/_session", url.Values{"name": {"bob"}, "password": {"right-pw"}})
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "bob is locked out of CouchDB")
	// And the node replicates with the password that worked.
	srv.CreateDB(t, "tgt2")
	srv.SetSecurity(t, "tgt2", map[string]any{"members": map[string]any{"names": []string{"bob"}}})
	c.PutDoc("_replicator", "good2", repDoc(endpoint("right-pw", "src"), endpoint("right-pw", "tgt2"), false))
	d = c.WaitDocState("_replicator", "good2", replicator.StateCompleted, replicator.StateCrashing)
	require.Equal(t, replicator.StateCompleted, d.State, "%s", d.Info)
	require.Equal(t, docs, docCount(t, srv, "tgt2"))
}
