package engine_test

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/stretchr/testify/require"
)

// between is a replication from source to target, each given as a
// replication endpoint in JSON (a URL string or an object), changed by set.
func between(t *testing.T, source, target string, set ...func(*engine.Replication)) engine.Replication {
	t.Helper()
	var rep engine.Replication
	for _, side := range []struct {
		raw string
		ep  *couch.Endpoint
	}{{source, &rep.Source}, {target, &rep.Target}} {
		ep, err := couch.ParseEndpoint(json.RawMessage(side.raw))
		require.NoError(t, err)
		*side.ep = ep
	}
	for _, f := range set {
		f(&rep)
	}
	return rep
}

// TestValidate checks Validate's refusals, with CouchDB's messages and
// without the endpoints' passwords.
func TestValidate(t *testing.T) {
	proxy := func(raw string) *url.URL {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		return u
	}
	valid := func(set func(*engine.Replication)) engine.Replication {
		return between(t, `"http://bob:pw@h/a"`, `"http://bob:pw@h/b"`, set)
	}
	require.NoError(t, valid(func(*engine.Replication) {}).Validate())
	require.NoError(t, valid(func(r *engine.Replication) {
		r.SourceProxy, r.TargetProxy = proxy("socks5://p:1080"), proxy("socks5://p:1080")
		r.Filter, r.QueryParams = "_view", json.RawMessage(`{"view": "d/v"}`)
	}).Validate())

	for _, tc := range []struct {
		name string
		set  func(*engine.Replication)
		msg  string
	}{
		{"no source", func(r *engine.Replication) { r.Source = couch.Endpoint{} }, "Missing replicator database"},
		{"no target", func(r *engine.Replication) { r.Target = couch.Endpoint{} }, "Missing replicator database"},
		{"selector array", func(r *engine.Replication) { r.Selector = json.RawMessage(`[]`) }, "parameter `selector` must be a JSON object"},
		{"query_params number", func(r *engine.Replication) { r.QueryParams = json.RawMessage(`1`) }, "parameter `query_params` must be an object"},
		{"create_target_params string", func(r *engine.Replication) { r.CreateTargetParams = json.RawMessage(`"q"`) },
			"parameter `create_target_params` must be a JSON object"},
		{"filter without ddoc", func(r *engine.Replication) { r.Filter = "nofilter" }, "Invalid filter. Must match `ddocname/filtername`."},
		{"view without view", func(r *engine.Replication) { r.Filter = "_view" }, "Invalid `view` parameter."},
		{"filter and doc_ids", func(r *engine.Replication) { r.Filter, r.DocIDs = "d/f", []string{"a"} },
			"`doc_ids`,`filter`,`selector` are mutually exclusive"},
		{"worker_batch_size below 1", func(r *engine.Replication) { r.WorkerBatchSize = -1 }, "parameter `worker_batch_size` must be at least 1"},
		{"proxy scheme", func(r *engine.Replication) { r.SourceProxy = proxy("ftp://p") }, "Invalid proxy url"},
		{"proxy without host", func(r *engine.Replication) { r.TargetProxy = proxy("http://") }, "Invalid proxy url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := valid(tc.set).Validate()
			require.ErrorIs(t, err, engine.ErrInvalidSpec)
			require.ErrorContains(t, err, tc.msg)
			require.NotContains(t, err.Error(), "pw")
		})
	}
}

func TestReplicationID(t *testing.T) {
	id := func(rep engine.Replication, code string) (string, string) {
		t.Helper()
		base, full, err := engine.ReplicationID(rep, testUUID, code)
		require.NoError(t, err)
		require.Len(t, base, 32)
		return base, full
	}
	plain := between(t, `"http://h/a"`, `"http://h/b"`)
	base, full := id(plain, "")
	require.Equal(t, base, full)

	same := []engine.Replication{
		between(t, `"http://h/a/"`, `"http://h:80/b"`),
		between(t, `"http://h:5984/a"`, `"http://h/b"`, func(r *engine.Replication) {
			r.WorkerProcesses, r.CheckpointInterval, r.DisableCheckpoints = 1, 10*time.Millisecond, true
		}),
		between(t, `{"url": "http://h/a"}`, `"http://h/b"`, func(r *engine.Replication) {
			r.CreateTargetParams = json.RawMessage(`{"q": 8}`)
		}),
		// As CouchDB: https at its default port hashes as http.
		between(t, `"https://h/a"`, `"https://h:443/b"`),
		// Headers equal to CouchDB's own are not hashed.
		between(t, `{"url": "http://h/a", "headers": {"Accept": "application/json"}}`, `"http://h/b"`),
	}
	for i, rep := range same {
		b, _ := id(rep, "")
		require.Equal(t, base, b, "same %d", i)
	}
	// The password does not count; the user name does.
	p1, _ := id(between(t, `"http://u:p1@h/a"`, `"http://h/b"`), "")
	p2, _ := id(between(t, `"http://u:p2@h/a"`, `"http://h/b"`), "")
	require.Equal(t, p1, p2)

	with := func(set func(*engine.Replication)) engine.Replication {
		return between(t, `"http://h/a"`, `"http://h/b"`, set)
	}
	different := []struct {
		name string
		rep  engine.Replication
	}{
		{"user", between(t, `"http://u:p1@h/a"`, `"http://h/b"`)},
		{"path", between(t, `"http://h/a"`, `"http://h/c"`)},
		{"port", between(t, `"http://h:81/a"`, `"http://h/b"`)},
		{"https port", between(t, `"https://h:6984/a"`, `"http://h/b"`)},
		{"headers", between(t, `{"url": "http://h/a", "headers": {"X": "1"}}`, `"http://h/b"`)},
		{"doc_ids", with(func(r *engine.Replication) { r.DocIDs = []string{"x"} })},
		{"selector", with(func(r *engine.Replication) { r.Selector = json.RawMessage(`{"a": 1}`) })},
		{"view", with(func(r *engine.Replication) { r.Filter, r.QueryParams = "_view", json.RawMessage(`{"view": "d/v"}`) })},
		{"winning_revs_only", with(func(r *engine.Replication) { r.WinningRevsOnly = true })},
		{"since_seq", with(func(r *engine.Replication) { r.SinceSeq = json.RawMessage(`3`) })},
	}
	seen := map[string]string{base: "plain"}
	for _, d := range different {
		b, _ := id(d.rep, "")
		require.NotContains(t, seen, b, "%s collides with %s", d.name, seen[b])
		seen[b] = d.name
	}
	// doc_ids hash alike whatever their order.
	a, _ := id(with(func(r *engine.Replication) { r.DocIDs = []string{"y", "x", "x"} }), "")
	b, _ := id(with(func(r *engine.Replication) { r.DocIDs = []string{"x", "y"} }), "")
	require.Equal(t, a, b)
	// A selector's values are hashed with their keys sorted; its
	// conditions, an $and after Mango's normalization, in their order.
	a, _ = id(with(func(r *engine.Replication) { r.Selector = json.RawMessage(`{"a": {"$eq": {"c": 2, "d": 3}}}`) }), "")
	b, _ = id(with(func(r *engine.Replication) { r.Selector = json.RawMessage(`{"a": {"$eq": {"d": 3, "c": 2}}}`) }), "")
	require.Equal(t, a, b)
	a, _ = id(with(func(r *engine.Replication) { r.Selector = json.RawMessage(`{"a": 1, "b": 2}`) }), "")
	b, _ = id(with(func(r *engine.Replication) { r.Selector = json.RawMessage(`{"b": 2, "a": 1}`) }), "")
	require.NotEqual(t, a, b)
	// Selectors are normalized as Mango normalizes them.
	for _, pair := range [][2]string{
		{`{"a": 1}`, `{"a": {"$eq": 1}}`},
		{`{"a": {"b": {"$gt": 1}}}`, `{"a.b": {"$gt": 1}}`},
		{`{"$not": {"a": {"$gt": 1}}}`, `{"a": {"$lte": 1}}`},
		{`{"a": 1, "b": 2}`, `{"$and": [{"a": 1}, {"b": {"$eq": 2}}]}`},
		{`{"a": 1, "a": 2}`, `{"a": 2}`}, // a repeated key: its last value
	} {
		a, _ = id(with(func(r *engine.Replication) { r.Selector = json.RawMessage(pair[0]) }), "")
		b, _ = id(with(func(r *engine.Replication) { r.Selector = json.RawMessage(pair[1]) }), "")
		require.Equal(t, a, b, "%s and %s", pair[0], pair[1])
	}
	// query_params are hashed as written, as CouchDB does.
	a, _ = id(with(func(r *engine.Replication) {
		r.Filter, r.QueryParams = "_view", json.RawMessage(`{"view": "d/v", "k": 1}`)
	}), "")
	b, _ = id(with(func(r *engine.Replication) {
		r.Filter, r.QueryParams = "_view", json.RawMessage(`{"k": 1, "view": "d/v"}`)
	}), "")
	require.NotEqual(t, a, b)
	// A design document filter hashes its code and query_params.
	filter := func(name, params string) engine.Replication {
		return with(func(r *engine.Replication) {
			r.Filter = name
			if params != "" {
				r.QueryParams = json.RawMessage(params)
			}
		})
	}
	f1, _ := id(filter("d/f", ""), "function(doc) { return true; }")
	f2, _ := id(filter("d/g", ""), "  function(doc) { return true; } ")
	f3, _ := id(filter("d/f", ""), "function(doc) { return false; }")
	f4, _ := id(filter("d/f", `{"k": "v"}`), "function(doc) { return true; }")
	require.Equal(t, f1, f2, "same code, same id")
	// CouchDB trims spaces around a function of one line only, and keeps
	// a final newline.
	n1, _ := id(filter("d/f", ""), " function(doc) { return true; }\n")
	require.NotEqual(t, f1, n1)
	m1, _ := id(filter("d/f", ""), "function(doc) {\n  return true;\n}")
	m2, _ := id(filter("d/f", ""), "function(doc) {\n  return true;\n}\n")
	require.NotEqual(t, m1, m2)
	require.NotEqual(t, f1, f3)
	require.NotEqual(t, f1, f4)
	// Suffixes.
	_, full = id(with(func(r *engine.Replication) { r.Continuous, r.CreateTarget = true, true }), "")
	require.Equal(t, base+"+continuous+create_target", full)
	_, full = id(with(func(r *engine.Replication) { r.CreateTarget = true }), "")
	require.Equal(t, base+"+create_target", full)
	// The server UUID is part of the id.
	other, _, err := engine.ReplicationID(plain, "another-uuid", "")
	require.NoError(t, err)
	require.NotEqual(t, base, other)
}
