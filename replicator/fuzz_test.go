package replicator

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

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
