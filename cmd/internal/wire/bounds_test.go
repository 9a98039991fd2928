package wire_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// C1: the requests that killed a node (any logged-in user, through a
// _replicator document or POST /_replicate) are refused at write time with
// the limit named, and nothing is stored.
func TestTunablesBoundedAtWriteTime(t *testing.T) {
	t.Parallel()
	e := newService(t)
	for _, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"worker_processes", 100_000_000, "`worker_processes` must be at most 64"},
		{"worker_processes", uint64(9223372036854775807), "`worker_processes` must be at most 64"},
		{"worker_batch_size", 1_000_000_000, "`worker_batch_size` must be at most 10000"},
		{"http_connections", 2147483648, "`http_connections` must be at most 1000"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			doc := repDoc(tc.field, tc.value, "create_target", true)
			r := e.do("PUT", "/_replicator/dos", asAlice, doc)
			requireError(t, r, 403, "forbidden")
			require.Contains(t, r.Body["reason"], tc.want)
			requireError(t, e.do("GET", "/_replicator/dos", asAdmin, nil), 404, "not_found")

			r = e.do("POST", "/_replicate", asBob, doc)
			requireError(t, r, 400, "bad_request")
			require.Contains(t, r.Body["reason"], tc.want)
		})
	}
	r := e.do("GET", "/_scheduler/docs", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, float64(0), r.Body["total_rows"], "no job was created")
}

// A POST /_replicate body within the request limit but too large to be
// stored as job data is refused with 413, not a 500.
func TestReplicateSpecTooLarge(t *testing.T) {
	t.Parallel()
	e := newService(t)
	ids := make([]string, 9000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%060d", i)
	}
	r := e.do("POST", "/_replicate", asBob, repDoc("doc_ids", ids))
	t.Log(r.Status, r.Raw[:min(len(r.Raw), 300)])
	requireError(t, r, 413, "document_too_large")
}

// M2: a password holding '/', '?', '#' or '@' unescaped never reaches
// another user, nor its author's error reply, whatever the document
// claims to be.
func TestOddPasswordsNeverShown(t *testing.T) {
	t.Parallel()
	e := newService(t)
	for i, src := range []string{
		"http://padm:Alice/LeakPw14@127.0.0.1:25986/secsrc",
		"http://padm:Ech@o/LeakPw14@127.0.0.1:25986/secsrc",
		"http://padm:Alice?LeakPw14@127.0.0.1:25986/secsrc",
	} {
		doc := map[string]any{"_replication_state": "failed", "source": src, "target": "http://127.0.0.1:25986/x"}
		id := fmt.Sprintf("leak%d", i)
		r := e.do("PUT", "/_replicator/"+id, asAlice, doc)
		requireError(t, r, 403, "forbidden")
		require.NotContains(t, r.Raw, "LeakPw14", src)
		requireError(t, e.do("GET", "/_replicator/"+id, asBob, nil), 404, "not_found")
	}
	r := e.do("GET", "/_replicator/_all_docs?include_docs=true", asBob, nil)
	require.NotContains(t, r.Raw, "LeakPw14")
	require.NotContains(t, e.logs.String(), "LeakPw14")
}
