package wire_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator"
)

// receiver is a webhook receiver on 127.0.0.1 that records what it takes,
// and that can fail, answer slowly and go away (its listener closed, and
// opened again on the same port).
type receiver struct {
	t      *testing.T
	addr   string
	secret string

	mu       sync.Mutex // guards the fields below
	srv      *http.Server
	got      []delivered
	posts    int           // POSTs seen, taken or not
	failNext int           // answer 500 to this many more POSTs
	delay    time.Duration // wait this long before answering
}

type delivered struct {
	delivery string
	body     map[string]any
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{t: t, secret: secret}
	r.listen("127.0.0.1:0")
	t.Cleanup(r.down)
	return r
}

func (r *receiver) listen(addr string) {
	l, err := net.Listen("tcp", addr)
	require.NoError(r.t, err)
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	r.mu.Lock()
	r.addr, r.srv = l.Addr().String(), srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// down closes the listener (connections are refused); up opens it again.
func (r *receiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (r *receiver) up() { r.listen(r.addr) }

func (r *receiver) url() string { return "http://" + r.addr + "/hook" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.posts++
	fail, delay := r.failNext > 0, r.delay
	if fail {
		r.failNext--
	}
	r.mu.Unlock()
	time.Sleep(delay)
	if fail {
		http.Error(w, "receiver is failing on purpose", http.StatusInternalServerError)
		return
	}
	mac := hmac.New(sha256.New, []byte(r.secret))
	mac.Write(b)
	if req.Header.Get(replicator.WebhookSignatureHeader) != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		r.t.Errorf("a delivery with a bad signature: %q", req.Header.Get(replicator.WebhookSignatureHeader))
		return
	}
	var body map[string]any
	require.NoError(r.t, json.Unmarshal(b, &body))
	r.mu.Lock()
	r.got = append(r.got, delivered{delivery: req.Header.Get(replicator.WebhookDeliveryHeader), body: body})
	r.mu.Unlock()
}

// states returns the changes taken for job jobID, without repeats of a
// delivery (at least once), as "from -> state".
func (r *receiver) states(jobID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	seen := map[string]bool{}
	for _, d := range r.got {
		if d.body["job_id"] != jobID || seen[d.delivery] {
			continue
		}
		seen[d.delivery] = true
		out = append(out, fmt.Sprintf("%v -> %v", d.body["from"], d.body["state"]))
	}
	return out
}

func (r *receiver) jobs() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, d := range r.got {
		out[d.body["job_id"].(string)] = true
	}
	return out
}

func (r *receiver) set(failNext int, delay time.Duration) {
	r.mu.Lock()
	r.failNext, r.delay = failNext, delay
	r.mu.Unlock()
}

func (r *receiver) postCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// chained reports whether changes (from -> state) follow one another: each
// one's from is the state before it, the first from nothing.
func chained(changes []string) bool {
	prev := "<nil>"
	for _, c := range changes {
		from, state, _ := strings.Cut(c, " -> ")
		if from != prev {
			return false
		}
		prev = state
	}
	return true
}

// TestWebhooks: a user's webhook hears their replications' state changes
// (between two CouchDB 3.5 databases), each signed with its secret, in
// order per replication, and at least once through a receiver that fails,
// answers slowly and goes away; GET shows its deliveries' attempts and
// errors; a server admin's hears every user's, another user's only their
// own; bad input is refused with the field named, nothing stored.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts CouchDB")
	}
	couch := couchtest.StartCouchDB(t)
	couch.CreateDB(t, "wh-src")
	for i := range 3 {
		couch.PutDoc(t, "wh-src", map[string]any{"_id": fmt.Sprintf("d%d", i)})
	}
	e := newService(t, func(m map[string]map[string]string) {
		m["replicator"]["allowed_endpoint_networks"] = "127.0.0.1/32"
	})
	const secret = "a secret of sixteen bytes or more"
	alice, admin := newReceiver(t, secret), newReceiver(t, secret)
	r := e.do("PUT", "/_scheduler/webhooks/mine", asAlice, map[string]any{"url": alice.url(), "secret": secret})
	require.Equal(t, 201, r.Status, r.Raw)
	r = e.do("PUT", "/_scheduler/webhooks/ops", asAdmin, map[string]any{"url": admin.url(), "secret": secret,
		"events": []string{"completed", "failed"}})
	require.Equal(t, 201, r.Status, r.Raw)
	r = e.do("GET", "/_scheduler/webhooks/mine", asAlice, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "*****", r.Body["secret"], "the secret is never shown")
	require.NotContains(t, r.Raw, secret)
	require.Equal(t, false, r.Body["all_replications"])

	// Alice's one-shot replication: her receiver hears each change, in
	// order; the admin's hears its completion.
	post := map[string]any{"source": couch.AuthDBURL("wh-src"), "target": couch.AuthDBURL("wh-tgt"), "create_target": true}
	r = e.do("POST", "/_replicate", asAlice, post)
	require.Equal(t, 200, r.Status, r.Raw)
	var jobID string
	testutil.Eventually(t, "alice's receiver heard her replication complete", func() bool {
		for id := range alice.jobs() {
			jobID = id
		}
		s := alice.states(jobID)
		return len(s) > 0 && strings.HasSuffix(s[len(s)-1], " -> completed")
	})
	require.True(t, chained(alice.states(jobID)), "in order: %v", alice.states(jobID))
	testutil.Eventually(t, "the admin's receiver heard it complete, and only that", func() bool {
		s := admin.states(jobID)
		return len(s) == 1 && strings.HasSuffix(s[0], " -> completed")
	})

	// A receiver that fails, then answers slowly: the changes come once it
	// takes them, still in order; GET showed the failed attempt.
	alice.set(1, 0)
	couch.PutDoc(t, "wh-src", map[string]any{"_id": "more"})
	r = e.do("POST", "/_replicate", asAlice, map[string]any{"source": couch.AuthDBURL("wh-src"),
		"target": couch.AuthDBURL("wh-tgt2"), "create_target": true})
	require.Equal(t, 200, r.Status, r.Raw)
	var second string
	testutil.Eventually(t, "the second replication's changes came after a failure", func() bool {
		for id := range alice.jobs() {
			if id != jobID {
				second = id
			}
		}
		s := alice.states(second)
		return len(s) > 0 && strings.HasSuffix(s[len(s)-1], " -> completed")
	})
	require.True(t, chained(alice.states(second)), "in order after a failure: %v", alice.states(second))
	r = e.do("GET", "/_scheduler/webhooks/mine", asAlice, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Contains(t, r.Raw, "the receiver answered 500 Internal Server Error", "the failed attempt is shown")
	require.NotContains(t, r.Raw, "failing on purpose", "not the receiver's body")
	require.Contains(t, r.Raw, second)

	// A receiver that goes away and comes back, slow: nothing is lost.
	alice.down()
	before := len(alice.states(second))
	r = e.do("POST", "/_replicate", asAlice, map[string]any{"source": couch.AuthDBURL("wh-src"),
		"target": couch.AuthDBURL("wh-tgt3"), "create_target": true})
	require.Equal(t, 200, r.Status, r.Raw)
	third := ""
	testutil.Eventually(t, "a delivery failed against the closed receiver", func() bool {
		g := e.do("GET", "/_scheduler/webhooks/mine", asAlice, nil)
		ds, _ := g.Body["deliveries"].([]any)
		for _, d := range ds {
			d := d.(map[string]any)
			if d["job_id"] != jobID && d["job_id"] != second && d["errors"] != nil {
				third = d["job_id"].(string)
				return true
			}
		}
		return false
	})
	alice.set(0, 300*time.Millisecond)
	alice.up()
	testutil.Eventually(t, "the third replication's changes came once the receiver was back", func() bool {
		s := alice.states(third)
		return len(s) > 0 && strings.HasSuffix(s[len(s)-1], " -> completed")
	})
	require.True(t, chained(alice.states(third)), "in order after an outage: %v", alice.states(third))
	require.Len(t, alice.states(second), before, "nothing more for the second")
	r = e.do("GET", "/_scheduler/webhooks/mine", asAlice, nil)
	require.NotContains(t, r.Raw, "resting_until", "a taken change ends the receiver's rest")

	// Bob's replication: not for Alice's webhook.
	r = e.do("POST", "/_replicate", asBob, map[string]any{"source": couch.AuthDBURL("wh-src"),
		"target": couch.AuthDBURL("wh-tgt4"), "create_target": true})
	require.Equal(t, 200, r.Status, r.Raw)
	testutil.Eventually(t, "the admin's receiver heard bob's completion", func() bool { return len(admin.jobs()) == 4 })
	require.Len(t, alice.jobs(), 3, "alice hears only her own")

	// Reads and removal are the owner's, and a server admin's.
	require.Equal(t, 404, e.do("GET", "/_scheduler/webhooks/mine", asBob, nil).Status)
	require.Equal(t, 404, e.do("DELETE", "/_scheduler/webhooks/mine", asBob, nil).Status)
	require.Equal(t, 403, e.do("GET", "/_scheduler/webhooks/mine?user=alice", asBob, nil).Status)
	require.Equal(t, 403, e.do("GET", "/_scheduler/webhooks?user=alice", asBob, nil).Status)
	r = e.do("GET", "/_scheduler/webhooks/mine?user=alice", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Contains(t, r.Raw, third, "an admin reads a user's webhook with its deliveries")
	r = e.do("GET", "/_scheduler/webhooks?user=alice", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Len(t, r.Body["webhooks"], 1, r.Raw)
	require.Equal(t, 401, e.do("GET", "/_scheduler/webhooks", nil, nil).Status)
	l := e.do("GET", "/_scheduler/webhooks", asAlice, nil)
	require.Equal(t, 200, l.Status, l.Raw)
	require.Len(t, l.Body["webhooks"], 1, l.Raw)
	require.Equal(t, 200, e.do("DELETE", "/_scheduler/webhooks/mine", asAlice, nil).Status)
	require.Equal(t, 404, e.do("GET", "/_scheduler/webhooks/mine", asAlice, nil).Status)
	posts := alice.postCount()
	r = e.do("POST", "/_replicate", asAlice, map[string]any{"source": couch.AuthDBURL("wh-src"),
		"target": couch.AuthDBURL("wh-tgt5"), "create_target": true})
	require.Equal(t, 200, r.Status, r.Raw)
	testutil.Eventually(t, "the admin's receiver heard the fifth", func() bool { return len(admin.jobs()) == 5 })
	require.Equal(t, posts, alice.postCount(), "a deleted webhook hears nothing")

	// A server admin's webhook, its owner then made a plain user: the
	// changes of others' replications queued meanwhile are dropped, and
	// it hears only its owner's from then on.
	carol := &creds{Name: "carol", Pass: "carol's password"}
	require.Equal(t, 200, e.do("PUT", "/_node/_cluster/_config/admins/carol", asAdmin, `"carol's password"`).Status)
	testutil.Eventually(t, "carol is a server admin", func() bool {
		r := e.do("PUT", "/_scheduler/webhooks/watch", carol, map[string]any{"url": alice.url(), "secret": secret})
		return r.Status == 201 && e.do("GET", "/_scheduler/webhooks/watch", carol, nil).Body["all_replications"] == true
	})
	require.Equal(t, 200, e.do("DELETE", "/_node/_cluster/_config/admins/carol", asAdmin, nil).Status)
	require.Equal(t, 200, e.do("PUT", "/_node/_cluster/_config/users/carol", asAdmin, `"carol's password"`).Status)
	testutil.Eventually(t, "carol is no longer a server admin", func() bool {
		r := e.do("GET", "/_session", carol, nil)
		roles, _ := r.Body["userCtx"].(map[string]any)["roles"].([]any)
		return r.Status == 200 && !slices.Contains(roles, any("_admin"))
	})
	heard := maps.Clone(alice.jobs())
	r = e.do("POST", "/_replicate", asBob, map[string]any{"source": couch.AuthDBURL("wh-src"),
		"target": couch.AuthDBURL("wh-tgt7"), "create_target": true})
	require.Equal(t, 200, r.Status, r.Raw)
	testutil.Eventually(t, "carol's webhook hears only her replications again", func() bool {
		return e.do("GET", "/_scheduler/webhooks/watch", carol, nil).Body["all_replications"] == false
	})
	testutil.Eventually(t, "the admin's receiver heard bob's", func() bool { return len(admin.jobs()) == 6 })
	for id := range alice.jobs() {
		require.True(t, heard[id], "carol's webhook posted none of bob's changes: %s %v", id, alice.states(id))
	}

	// Loopback no longer allowed (at run time): the next delivery is
	// refused, also over the connection kept open from the last one.
	r = e.do("PUT", "/_node/_cluster/_config/replicator/allowed_endpoint_networks", asAdmin, `""`)
	require.Equal(t, 200, r.Status, r.Raw)
	testutil.Eventually(t, "the change applied (the rules the nodes share refuse a loopback webhook)", func() bool {
		p := e.do("PUT", "/_scheduler/webhooks/probe", asAdmin, map[string]any{"url": admin.url(), "secret": secret})
		return p.Status == 403
	})
	// (Counted by replication, not by post: a change heard before may be
	// posted again, deliveries being at least once.)
	heardBefore := admin.jobs()
	r = e.do("POST", "/_replicate", asAlice, map[string]any{"source": couch.AuthDBURL("wh-src"),
		"target": couch.AuthDBURL("wh-tgt6"), "create_target": true})
	require.Equal(t, 200, r.Status, r.Raw)
	testutil.Eventually(t, "the admin's delivery refused", func() bool {
		return strings.Contains(e.do("GET", "/_scheduler/webhooks/ops", asAdmin, nil).Raw, "is a loopback address")
	})
	require.Equal(t, heardBefore, admin.jobs(), "nothing of the new replication reached the receiver")
}

// TestWebhooksBadInput: each bad webhook is refused with the field named,
// and nothing is stored.
func TestWebhooksBadInput(t *testing.T) {
	t.Parallel()
	e := newService(t)
	const secret = "a secret of sixteen bytes or more"
	for _, tc := range []struct {
		name   string
		id     string
		body   any
		status int
		reason string
	}{
		{"loopback", "a", map[string]any{"url": "http://127.0.0.1:9/x", "secret": secret}, 403, "allowed_endpoint_networks"},
		{"link-local", "a", map[string]any{"url": "http://169.254.169.254/x", "secret": secret}, 403, "address not allowed"},
		{"scheme", "a", map[string]any{"url": "ftp://example.com/x", "secret": secret}, 403, "valid_endpoint_protocols"},
		{"relative", "a", map[string]any{"url": "/x", "secret": secret}, 400, "`url`"},
		{"credentials", "a", map[string]any{"url": "http://u:p@example.com/x", "secret": secret}, 400, "without credentials"},
		{"no url", "a", map[string]any{"secret": secret}, 400, "`url` is required"},
		{"no secret", "a", map[string]any{"url": "http://example.com/x"}, 400, "`secret` is required"},
		{"short secret", "a", map[string]any{"url": "http://example.com/x", "secret": "short"}, 400, "at least 16 bytes"},
		{"redacted", "a", map[string]any{"url": "http://example.com/x", "secret": "*****"}, 400, "at least 16 bytes"},
		{"secret type", "a", map[string]any{"url": "http://example.com/x", "secret": 12}, 400, "`secret` must be a string"},
		{"events type", "a", map[string]any{"url": "http://example.com/x", "secret": secret, "events": "failed"}, 400, "`events` must be an array"},
		{"unknown event", "a", map[string]any{"url": "http://example.com/x", "secret": secret, "events": []string{"exploded"}}, 400, "unknown state"},
		{"unknown field", "a", map[string]any{"url": "http://example.com/x", "secret": secret, "headers": map[string]any{}}, 400, "unknown field `headers`"},
		{"not an object", "a", []any{1}, 400, ""},
		{"bad id", "-x", map[string]any{"url": "http://example.com/x", "secret": secret}, 400, "webhook id"},
		{"long id", strings.Repeat("x", 200), map[string]any{"url": "http://example.com/x", "secret": secret}, 400, "webhook id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("PUT", "/_scheduler/webhooks/"+tc.id, asAlice, tc.body)
			require.Equal(t, tc.status, r.Status, r.Raw)
			require.Contains(t, r.Raw, tc.reason)
			require.NotContains(t, r.Raw, secret)
		})
	}
	l := e.do("GET", "/_scheduler/webhooks", asAlice, nil)
	require.Equal(t, 200, l.Status, l.Raw)
	require.Empty(t, l.Body["webhooks"], "nothing stored")
	require.Equal(t, 401, e.do("PUT", "/_scheduler/webhooks/a", nil, map[string]any{"url": "http://example.com/x", "secret": secret}).Status)

	// At most WebhooksPerOwnerMax each; a replaced one is not one more.
	for i := range replicator.WebhooksPerOwnerMax {
		r := e.do("PUT", fmt.Sprintf("/_scheduler/webhooks/h%d", i), asAlice, map[string]any{"url": "http://example.com/x", "secret": secret})
		require.Equal(t, 201, r.Status, r.Raw)
	}
	r := e.do("PUT", "/_scheduler/webhooks/h0", asAlice, map[string]any{"url": "http://example.com/y", "secret": secret})
	require.Equal(t, 200, r.Status, r.Raw)
	r = e.do("PUT", "/_scheduler/webhooks/one-more", asAlice, map[string]any{"url": "http://example.com/x", "secret": secret})
	require.Equal(t, 403, r.Status, r.Raw)
	require.Contains(t, r.Raw, "the most a user may have")
	r = e.do("PUT", "/_scheduler/webhooks/h0", asBob, map[string]any{"url": "http://example.com/x", "secret": secret})
	require.Equal(t, 201, r.Status, "bob's ids are his own: %s", r.Raw)
}
