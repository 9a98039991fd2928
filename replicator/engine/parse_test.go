package engine_test

import (
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/stretchr/testify/require"
)

func TestParseReplication(t *testing.T) {
	rep, err := engine.ParseReplication([]byte(`{
		"_id": "r1", "source": "http://bob:secret@h:5984/a", "target": {"url": "https://h/b", "headers": {"X-Y": "z"},
		"auth": {"basic": {"username": "u", "password": "p"}}}, "continuous": true, "create_target": true,
		"create_target_params": {"q": 1}, "filter": "d/f", "query_params": {"k": "v"}, "since_seq": 5,
		"winning_revs_only": true, "use_checkpoints": false, "use_bulk_get": false, "worker_processes": "2",
		"worker_batch_size": 10, "http_connections": 3, "connection_timeout": 1000, "retries_per_request": 0,
		"checkpoint_interval": 500, "user_ctx": {"name": "bob", "roles": ["r"]}, "owner": "bob"}`))
	require.NoError(t, err)
	require.Equal(t, "bob", rep.Source.Username)
	require.Equal(t, "http://h:5984/a/", rep.Source.URL.String())
	require.Equal(t, "u", rep.Target.Username)
	require.True(t, rep.Continuous && rep.CreateTarget && rep.WinningRevsOnly && rep.DisableCheckpoints && rep.DisableBulkGet)
	require.Equal(t, `{"q":1}`, string(rep.CreateTargetParams))
	require.Equal(t, "d/f", rep.Filter)
	require.Equal(t, "5", string(rep.SinceSeq))
	require.Equal(t, 2, rep.WorkerProcesses)
	require.Equal(t, 10, rep.WorkerBatchSize)
	require.Equal(t, 3, rep.HTTPConnections)
	require.Equal(t, time.Second, rep.ConnectionTimeout)
	require.Equal(t, 0, rep.RetriesPerRequest)
	require.Equal(t, 500*time.Millisecond, rep.CheckpointInterval)
	require.Equal(t, engine.UserCtx{Name: "bob", Roles: []string{"r"}}, rep.UserCtx)

	rep, err = engine.ParseReplication([]byte(`{"source": "http://h/a", "target": "http://h/b", "proxy": "socks5://p:1080"}`))
	require.NoError(t, err)
	require.Equal(t, "socks5://p:1080", rep.SourceProxy.String())
	require.Equal(t, rep.SourceProxy, rep.TargetProxy)
	rep, err = engine.ParseReplication([]byte(`{"source": "http://h/a", "target": "http://h/b"}`))
	require.NoError(t, err)
	require.Equal(t, engine.WorkerProcessesDefault, rep.WorkerProcesses)
	require.Equal(t, engine.WorkerBatchSizeDefault, rep.WorkerBatchSize)
	require.Equal(t, engine.CheckpointIntervalDefault, rep.CheckpointInterval)
	require.Equal(t, engine.RetriesPerRequestDefault, rep.RetriesPerRequest)
	require.False(t, rep.DisableCheckpoints)

	bad := []struct{ body, msg string }{
		{`[]`, "must be a JSON object"},
		{`{"target": "http://h/b"}`, "Missing replicator database"},
		{`{"source": "db", "target": "http://h/b"}`, "local database names are not supported"},
		{`{"source": "http://h/a", "target": "http://h/b", "continuous": "yes"}`, "parameter `continuous` must be a boolean"},
		{`{"source": "http://h/a", "target": "http://h/b", "create_target": 1}`, "parameter `create_target` must be a boolean"},
		{`{"source": "http://h/a", "target": "http://h/b", "doc_ids": "a"}`, "parameter `doc_ids` must be an array"},
		{`{"source": "http://h/a", "target": "http://h/b", "selector": []}`, "parameter `selector` must be a JSON object"},
		{`{"source": "http://h/a", "target": "http://h/b", "query_params": 1}`, "parameter `query_params` must be an object"},
		{`{"source": "http://h/a", "target": "http://h/b", "create_target_params": "q"}`, "parameter `create_target_params` must be a JSON object"},
		{`{"source": "http://h/a", "target": "http://h/b", "filter": "nofilter"}`, "Invalid filter. Must match `ddocname/filtername`."},
		{`{"source": "http://h/a", "target": "http://h/b", "filter": "_view"}`, "Invalid `view` parameter."},
		{`{"source": "http://h/a", "target": "http://h/b", "filter": "d/f", "doc_ids": ["a"]}`, "`doc_ids`,`filter`,`selector` are mutually exclusive"},
		{`{"source": "http://h/a", "target": "http://h/b", "worker_processes": "many"}`, "parameter `worker_processes` must be an integer"},
		{`{"source": "http://h/a", "target": "http://h/b", "worker_batch_size": 0}`, "parameter `worker_batch_size` must be a positive integer"},
		{`{"source": "http://bob:pw@h/a", "target": "ftp://bob:pw@h/b"}`, "only http and https"},
		{`{"source": "http://h/a", "target": "http://h/b", "proxy": "ftp://p"}`, "proxy has an invalid url"},
		{`{"source": "http://h/a", "target": "http://h/b", "proxy": "http://p", "source_proxy": "http://q"}`, "`proxy` is mutually exclusive with `source_proxy`"},
	}
	for _, b := range bad {
		_, err := engine.ParseReplication([]byte(b.body))
		require.ErrorIs(t, err, engine.ErrInvalidSpec, b.body)
		require.Contains(t, err.Error(), b.msg)
		require.NotContains(t, err.Error(), "pw")
	}
}

func TestReplicationID(t *testing.T) {
	parse := func(body string) engine.Replication {
		t.Helper()
		rep, err := engine.ParseReplication([]byte(body))
		require.NoError(t, err)
		return rep
	}
	id := func(body, code string) (string, string) {
		t.Helper()
		base, full, err := engine.ReplicationID(parse(body), testUUID, code)
		require.NoError(t, err)
		require.Len(t, base, 32)
		return base, full
	}
	base, full := id(`{"source": "http://h/a", "target": "http://h/b"}`, "")
	require.Equal(t, base, full)

	same := []string{
		`{"source": "http://h/a/", "target": "http://h:80/b"}`,
		`{"source": "http://h:5984/a", "target": "http://h/b", "worker_processes": 1, "checkpoint_interval": 10, "use_checkpoints": false}`,
		`{"source": {"url": "http://h/a"}, "target": "http://h/b", "create_target_params": {"q": 8}}`,
	}
	for _, s := range same {
		b, _ := id(s, "")
		require.Equal(t, base, b, s)
	}
	// The password does not count; the user name does.
	p1, _ := id(`{"source": "http://u:p1@h/a", "target": "http://h/b"}`, "")
	p2, _ := id(`{"source": "http://u:p2@h/a", "target": "http://h/b"}`, "")
	require.Equal(t, p1, p2)

	different := []string{
		`{"source": "http://u:p1@h/a", "target": "http://h/b"}`,
		`{"source": "http://h/a", "target": "http://h/c"}`,
		`{"source": "http://h:81/a", "target": "http://h/b"}`,
		`{"source": "https://h/a", "target": "http://h/b"}`,
		`{"source": {"url": "http://h/a", "headers": {"X": "1"}}, "target": "http://h/b"}`,
		`{"source": "http://h/a", "target": "http://h/b", "doc_ids": ["x"]}`,
		`{"source": "http://h/a", "target": "http://h/b", "selector": {"a": 1}}`,
		`{"source": "http://h/a", "target": "http://h/b", "filter": "_view", "query_params": {"view": "d/v"}}`,
		`{"source": "http://h/a", "target": "http://h/b", "winning_revs_only": true}`,
		`{"source": "http://h/a", "target": "http://h/b", "since_seq": 3}`,
	}
	seen := map[string]string{base: "plain"}
	for _, s := range different {
		b, _ := id(s, "")
		require.NotContains(t, seen, b, "%s collides with %s", s, seen[b])
		seen[b] = s
	}
	// Equal filters hash alike whatever their key or id order.
	a, _ := id(`{"source": "http://h/a", "target": "http://h/b", "doc_ids": ["y", "x", "x"]}`, "")
	b, _ := id(`{"source": "http://h/a", "target": "http://h/b", "doc_ids": ["x", "y"]}`, "")
	require.Equal(t, a, b)
	a, _ = id(`{"source": "http://h/a", "target": "http://h/b", "selector": {"a": 1, "b": {"c": 2, "d": 3}}}`, "")
	b, _ = id(`{"source": "http://h/a", "target": "http://h/b", "selector": {"b": {"d": 3, "c": 2}, "a": 1}}`, "")
	require.Equal(t, a, b)
	// A design document filter hashes its code and query_params.
	f1, _ := id(`{"source": "http://h/a", "target": "http://h/b", "filter": "d/f"}`, "function(doc) { return true; }")
	f2, _ := id(`{"source": "http://h/a", "target": "http://h/b", "filter": "d/g"}`, "  function(doc) { return true; }\n")
	f3, _ := id(`{"source": "http://h/a", "target": "http://h/b", "filter": "d/f"}`, "function(doc) { return false; }")
	f4, _ := id(`{"source": "http://h/a", "target": "http://h/b", "filter": "d/f", "query_params": {"k": "v"}}`, "function(doc) { return true; }")
	require.Equal(t, f1, f2, "same code, same id")
	require.NotEqual(t, f1, f3)
	require.NotEqual(t, f1, f4)
	// Suffixes.
	_, full = id(`{"source": "http://h/a", "target": "http://h/b", "continuous": true, "create_target": true}`, "")
	require.Equal(t, base+"+continuous+create_target", full)
	_, full = id(`{"source": "http://h/a", "target": "http://h/b", "create_target": true}`, "")
	require.Equal(t, base+"+create_target", full)
	// The server UUID is part of the id.
	other, _, err := engine.ReplicationID(parse(`{"source": "http://h/a", "target": "http://h/b"}`), "another-uuid", "")
	require.NoError(t, err)
	require.NotEqual(t, base, other)
}
