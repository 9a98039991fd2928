package replicator

import (
	"encoding/json"
	"errors"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

func TestParseSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		body, reason string
	}{
		{`[]`, "the replication must be a JSON object"},
		{`{"target":"http://h/b"}`, "Missing `source` field"},
		{`{"source":"http://h/a"}`, "Missing `target` field"},
		{`{"source":"a","target":"http://h/b"}`, "`source`: \"a\" is not an http:// or https:// URL (local database names are not supported)"},
		{`{"source":{"junk":42},"target":"http://h/b"}`, "`source`: endpoint object has no string \"url\""},
		// What Fauxton's form saves for a database it took for a local one
		// it does not list: the server's root.
		{`{"source":{"url":"http://127.0.0.1:5984/","headers":{"Authorization":"Basic YTpi"}},"target":"http://h/b"}`,
			"`source` names no database: http://a:*****@127.0.0.1:5984/ is a server's URL; if Fauxton's form showed it as a local database with no name, edit the document's JSON instead (docs/COMPAT.md, Fauxton)"},
		{`{"source":"http://h/a","target":"http://u:p@h"}`, "`target` names no database: http://u:*****@h/ is a server's URL; if Fauxton's form showed it as a local database with no name, edit the document's JSON instead (docs/COMPAT.md, Fauxton)"},
		{`{"source":"http://h/a","target":"http://h/b","create_target":"bad"}`, "`create_target` must be a boolean"},
		{`{"source":"http://h/a","target":"http://h/b","continuous":1}`, "`continuous` must be a boolean"},
		{`{"source":"http://h/a","target":"http://h/b","skip_deleted":"yes"}`, "`skip_deleted` must be a boolean"},
		{`{"source":"http://h/a","target":"http://h/b","follow_purges":1}`, "`follow_purges` must be a boolean"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"cron":"* * *"}}`, "`schedule`: `cron` \"* * *\": expected exactly 5 fields, found 3: [* * *]"},
		// every is a minute at least (ScheduleEveryMin), ten years at most.
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":0}}`, "`schedule.every` must be at least 60"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":1}}`, "`schedule.every` must be at least 60"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":59}}`, "`schedule.every` must be at least 60"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":-60}}`, "`schedule.every` must be at least 60"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":315360001}}`, "`schedule.every` must be at most 315360000"},
		// every is a JSON number of seconds: no string, not even of one.
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":"10"}}`, "`schedule.every` must be a JSON number of seconds"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":" 3600"}}`, "`schedule.every` must be a JSON number of seconds"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":true}}`, "`schedule.every` must be a JSON number of seconds"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":[3600]}}`, "`schedule.every` must be a JSON number of seconds"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"every":3600.5}}`, "`schedule.every` must be an integer"},
		{`{"source":"http://h/a","target":"http://h/b","schedule":{"cron":"@daily","tz":"Nowhere/Here"}}`, "`schedule`: `tz` \"Nowhere/Here\": not an IANA time zone name"},
		{`{"source":"http://h/a","target":"http://h/b","doc_ids":42}`, "`doc_ids` must be an array"},
		{`{"source":"http://h/a","target":"http://h/b","doc_ids":[1]}`, "`doc_ids` array must contain strings"},
		{`{"source":"http://h/a","target":"http://h/b","selector":{},"filter":"d/f"}`, "`doc_ids`, `filter` and `selector` are mutually exclusive: use at most one"},
		{`{"source":"http://h/a","target":"http://h/b","selector":[]}`, "`selector` must be a JSON object"},
		{`{"source":"http://h/a","target":"http://h/b","filter":7}`, "`filter` must be a string"},
		{`{"source":"http://h/a","target":"http://h/b","query_params":"x"}`, "`query_params` must be null or an object"},
		{`{"source":"http://h/a","target":"http://h/b","worker_processes":"many"}`, "`worker_processes` must be an integer"},
		{`{"source":"http://h/a","target":"http://h/b","worker_processes":0}`, "`worker_processes` must be at least 1"},
		{`{"source":"http://h/a","target":"http://h/b","worker_processes":100000000}`, "`worker_processes` must be at most 64"},
		{`{"source":"http://h/a","target":"http://h/b","worker_processes":9223372036854775807}`, "`worker_processes` must be at most 64"},
		{`{"source":"http://h/a","target":"http://h/b","worker_batch_size":1000000000}`, "`worker_batch_size` must be at most 10000"},
		{`{"source":"http://h/a","target":"http://h/b","worker_batch_size":4611686018427387904,"worker_processes":4}`, "`worker_batch_size` must be at most 10000"},
		{`{"source":"http://h/a","target":"http://h/b","worker_batch_size":10000,"worker_processes":11}`, "`worker_processes` × `worker_batch_size` must be at most 100000"},
		{`{"source":"http://h/a","target":"http://h/b","http_connections":2147483648}`, "`http_connections` must be at most 1000"},
		{`{"source":"http://h/a","target":"http://h/b","connection_timeout":"9223372036854775807"}`, "`connection_timeout` must be at most 3600000"},
		{`{"source":"http://h/a","target":"http://h/b","retries_per_request":1000}`, "`retries_per_request` must be at most 100"},
		{`{"source":"http://h/a","target":"http://h/b","checkpoint_interval":3600001}`, "`checkpoint_interval` must be at most 3600000"},
		{`{"source":"http://h/a","target":"http://h/b","proxy":"http://p","source_proxy":"http://q"}`, "`proxy` is mutually exclusive with `source_proxy`"},
		{`{"source":"http://h/a","target":"http://h/b","proxy":"ftp://p"}`, "Unsupported proxy protocol in `proxy`: use http, https or socks5"},
		// Sealing takes a URL with an '@' past its userinfo whole.
		{`{"source":"fdbrep-sealed:v1:k.b:x","target":"http://h/b"}`, "`source`: " + sealedWholeReason},
		{`{"source":"http://h/a","target":{"url":"fdbrep-sealed:v1:k.b:x"}}`, "`target`: " + sealedWholeReason},
		{`{"source":"http://h/a","target":"http://h/b","proxy":"fdbrep-sealed:v1:k.b:x"}`, "`proxy`: " + sealedWholeReason},
		{`{"source":"http://h/a","target":"http://h/b","target_proxy":"http://pu:8080?pw@p:3128"}`, "`target_proxy` has an invalid url: escape '@', '/', '?' and '#' in the user name and password (%40, %2F, %3F, %23)"},
		{`{"source":"http://h/a","target":"http://h/b","filter":"nofilter"}`, "Invalid filter. Must match `ddocname/filtername`."},
		{`{"source":"http://h/a","target":"http://h/b","socket_options":[["nodelay",true]]}`, "`socket_options` must be a string such as \"[{keepalive, true}, {nodelay, false}]\""},
		{`{"source":"http://h/a","target":"http://h/b","socket_options":"[{buffer, 8192}]"}`, "`socket_options`: buffer (the Erlang runtime's own receive buffer) has no equivalent in fdbrep; use recbuf for the kernel's"},
		{`{"source":"http://h/a","target":"http://h/b","socket_options":"[{tos, 4}]"}`, "`socket_options`: tos is not supported; fdbrep applies keepalive, nodelay, sndbuf, recbuf and priority"},
		{`{"source":"http://h/a","target":"http://h/b","socket_options":"[{sndbuf, 1000000000}]"}`, "`socket_options`: sndbuf takes an integer from 1 to 67108864, got 1000000000"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			_, err := ParseSpec(json.RawMessage(tc.body))
			require.ErrorIs(t, err, ErrBadRequest)
			require.Equal(t, tc.reason, Reason(err))
		})
	}
}

// TestParseSchedule: the schedules a document may have, as its job
// keeps them.
func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		want     RepSchedule
	}{
		{`{"every":3600}`, RepSchedule{Every: 3600}},
		{`{"every":60}`, RepSchedule{Every: ScheduleEveryMin}},
		{`{"every":315360000}`, RepSchedule{Every: ScheduleEveryMax}},
		{`{"every": 86400 }`, RepSchedule{Every: 86400}},
		{`{"cron":"0 3 * * *","tz":"Europe/Paris"}`, RepSchedule{Cron: "0 3 * * *", TZ: "Europe/Paris"}},
		{`{"cron":"@daily","every":null}`, RepSchedule{Cron: "@daily"}},
	} {
		t.Run(tc.schedule, func(t *testing.T) {
			s, err := ParseSpec(json.RawMessage(`{"source":"http://h/a","target":"http://h/b","schedule":` + tc.schedule + `}`))
			require.NoError(t, err)
			require.Equal(t, &tc.want, s.Schedule)
		})
	}
}

func TestParseSpecNormalizes(t *testing.T) {
	s, err := ParseSpec(json.RawMessage(`{"source":"http://u:p@h/a","target":{"url":"http://h/b?x=1","headers":{"Authorization":"Basic dTI6cDI=","X-Y":"z"}},
		"worker_processes":"3","use_checkpoints":false,"continuous":true,"doc_ids":["b","a"]}`))
	require.NoError(t, err)
	require.Equal(t, "http://h/a/", s.Source.URL)
	require.Equal(t, "u", s.Source.Username)
	require.Equal(t, "p", s.Source.Password)
	require.Equal(t, "http://h/b?x=1", s.Target.URL)
	require.Equal(t, "u2", s.Target.Username)
	require.Equal(t, map[string]string{"X-Y": "z"}, s.Target.Headers)
	require.Equal(t, 3, s.WorkerProcesses)
	require.NotNil(t, s.UseCheckpoints)
	require.False(t, *s.UseCheckpoints)
	require.Nil(t, s.UseBulkGet, "unset: the node's default")
	require.Equal(t, "http://u:*****@h/a/", s.Source.Redacted())

	// Equal replications compare equal whatever the key and doc_ids order.
	s2, err := ParseSpec(json.RawMessage(`{"doc_ids":["a","b"],"continuous":true,"use_checkpoints":false,"worker_processes":3,
		"target":{"headers":{"X-Y":"z","Authorization":"Basic dTI6cDI="},"url":"http://h/b?x=1"},"source":"http://u:p@h/a"}`))
	require.NoError(t, err)
	require.True(t, SameReplication(s, s2))
	require.Equal(t, TransientJobID("uuid", s, "bob"), TransientJobID("uuid", s2, "bob"))
	require.NotEqual(t, TransientJobID("uuid", s, "bob"), TransientJobID("uuid", s, "eve"))
	s2.Continuous = false
	require.False(t, SameReplication(s, s2))
}

// TestEmptyDocIDs: `doc_ids: []` replicates nothing, as in CouchDB, where
// it has a replication id of its own: the empty list survives job data
// (an empty list is not the absent one) and is another replication than
// the unfiltered one.
func TestEmptyDocIDs(t *testing.T) {
	const ends = `"source":"http://u:p@h/a","target":"http://h/b"`
	empty, err := ParseSpec(json.RawMessage(`{` + ends + `,"doc_ids":[]}`))
	require.NoError(t, err)
	plain, err := ParseSpec(json.RawMessage(`{` + ends + `,"doc_ids":null}`))
	require.NoError(t, err)
	require.Nil(t, plain.DocIDs)

	b, err := json.Marshal(&JobData{Rep: empty})
	require.NoError(t, err)
	stored, err := DecodeJobData(b)
	require.NoError(t, err)
	require.NotNil(t, stored.Rep.DocIDs, "the empty list is kept in job data: %s", b)
	require.Empty(t, stored.Rep.DocIDs)
	rep, err := stored.Rep.Replication()
	require.NoError(t, err)
	require.NotNil(t, rep.DocIDs, "the engine gets the empty list")

	require.True(t, SameReplication(empty, stored.Rep))
	require.False(t, SameReplication(empty, plain))
	require.NotEqual(t, TransientJobID("uuid", plain, "bob"), TransientJobID("uuid", stored.Rep, "bob"))
	plainRep, err := plain.Replication()
	require.NoError(t, err)
	emptyID, _, err := engine.ReplicationID(rep, "uuid", "")
	require.NoError(t, err)
	plainID, _, err := engine.ReplicationID(plainRep, "uuid", "")
	require.NoError(t, err)
	require.NotEqual(t, plainID, emptyID)
}

func TestParseRequestCancel(t *testing.T) {
	r, err := ParseRequest(json.RawMessage(`{"replication_id":"abc+continuous","cancel":true}`))
	require.NoError(t, err)
	require.True(t, r.Cancel)
	require.Equal(t, "abc+continuous", r.ID)
	require.Nil(t, r.Spec)
	_, err = ParseRequest(json.RawMessage(`{"cancel":"yes","source":"http://h/a","target":"http://h/b"}`))
	require.Equal(t, "`cancel` must be a boolean", Reason(err))
	_, err = ParseRequest(json.RawMessage(`{"source":"http://h/a","target":"http://h/b","schedule":{"cron":"@daily"}}`))
	require.Equal(t, "`schedule` is for _replicator documents: a POST /_replicate runs once", Reason(err))
}

func TestSpecEngineCarriesProxies(t *testing.T) {
	for _, tc := range []struct {
		name, body     string
		source, target string
	}{
		{"none", `{"source":"http://h/a","target":"http://h/b"}`, "", ""},
		{"proxy", `{"source":"http://h/a","target":"http://h/b","proxy":"http://p:3128"}`, "http://p:3128", "http://p:3128"},
		{"per side", `{"source":"http://h/a","target":"http://h/b","source_proxy":"socks5://s:1080"}`, "socks5://s:1080", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSpec(json.RawMessage(tc.body))
			require.NoError(t, err)
			rep, err := s.Engine()
			require.NoError(t, err)
			for _, side := range []struct {
				got  *url.URL
				want string
			}{{rep.SourceProxy, tc.source}, {rep.TargetProxy, tc.target}} {
				if side.want == "" {
					require.Nil(t, side.got)
				} else {
					require.NotNil(t, side.got)
					require.Equal(t, side.want, side.got.String())
				}
			}
		})
	}
}

// socket_options is kept normalized and reaches the engine; a replication
// without it takes the node's default, one with it replaces the default.
func TestSpecSocketOptions(t *testing.T) {
	nodeDefault, err := couch.ParseSocketOptions("[{nodelay, false}]")
	require.NoError(t, err)
	defaults := JobDefaults{SocketOptions: &nodeDefault}
	for _, tc := range []struct {
		name, opts, stored, applied string
	}{
		{"unset", ``, "", "[{nodelay, false}]"},
		{"empty", `,"socket_options":"[]"`, "", "[{nodelay, false}]"},
		{"own", `,"socket_options":"[ {sndbuf,65536}, {keepalive,false} ]"`, "[{keepalive, false}, {sndbuf, 65536}]", "[{keepalive, false}, {sndbuf, 65536}]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSpec(json.RawMessage(`{"source":"http://h/a","target":"http://h/b"` + tc.opts + `}`))
			require.NoError(t, err)
			require.Equal(t, tc.stored, s.SocketOptions)
			rep, err := s.Replication()
			require.NoError(t, err)
			rep = defaults.Apply(rep, s)
			require.NotNil(t, rep.SocketOptions)
			require.Equal(t, tc.applied, rep.SocketOptions.String())
		})
	}
	bad := couch.SocketOptions{SendBuffer: -1}
	err = JobDefaults{SocketOptions: &bad}.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "[replicator] socket_options: sndbuf")
}

// FuzzParseSpec feeds the replication-spec parser arbitrary bodies: it
// never panics, refuses with a user-facing reason, and what it accepts is
// valid for the engine, within the stored size bound, and the same
// replication after a round trip through job data.
func FuzzParseSpec(f *testing.F) {
	for _, seed := range []string{
		`{"source":"http://h/a","target":"http://h/b"}`,
		`{"source":{"url":"https://u:p@h/a","headers":{"X":"y"},"auth":{"basic":{"username":"u","password":"p"}}},"target":"http://h/b","continuous":true}`,
		`{"source":"http://h/a","target":"http://h/b","worker_processes":100000000}`,
		`{"source":"http://h/a","target":"http://h/b","worker_batch_size":"4611686018427387904","worker_processes":4}`,
		`{"source":"http://h/a","target":"http://h/b","doc_ids":["a","b"],"since_seq":"3-g1","use_checkpoints":false}`,
		`{"source":"http://h/a","target":"http://h/b","filter":"_view","query_params":{"view":"d/v"}}`,
		`{"source":"http://padm:Alice/LeakPw14@127.0.0.1:25986/secsrc","target":"http://h/b"}`,
		`{"source":"http://h/a","target":"http://h/b","proxy":"socks5://p:1080","selector":{"a":{"$gt":1}}}`,
		`{"source":"http://[::1]:5984/a","target":"http://h/b","connection_timeout":"9223372036854775807"}`,
		`{"source":"http://h/a","target":"http://h/b","socket_options":"[{nodelay, false}, {sndbuf, 4096}]"}`,
		`[]`, `null`, `{"source":1}`, `{"source":"http://h/a","target":"http://h/b","user_ctx":{"name":"x","roles":[1]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseSpec(body)
		if err != nil {
			require.True(t, errors.Is(err, ErrBadRequest) || errors.Is(err, ErrTooLarge), "%v", err)
			require.NotEmpty(t, Reason(err))
			return
		}
		_, err = s.Replication()
		require.NoError(t, err, "accepted but invalid for the engine")
		b, err := json.Marshal(s)
		require.NoError(t, err)
		require.LessOrEqual(t, len(b), SpecMaxBytes)
		var back Spec
		require.NoError(t, json.Unmarshal(b, &back))
		require.True(t, SameReplication(s, &back), "round trip through job data")
	})
}
