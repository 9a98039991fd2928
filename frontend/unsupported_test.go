package frontend

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What fdbrep does not have answers as such, with a CouchDB error that
// says so, and never as if an endpoint were a document id: attachments
// (a standalone PUT is 415, as a document with attachments), Mango
// queries, design document listings, views.
func TestUnsupportedOperations(t *testing.T) {
	e := newEnv(t)
	r := e.do("PUT", "/_replicator/d", asAdmin, repDoc())
	require.Equal(t, 201, r.Status, r.Raw)
	rev := r.Body["rev"].(string)

	r = e.do("PUT", "/_replicator/d/att.txt?rev="+rev, asAdmin, "hello", "Content-Type", "text/plain")
	requireError(t, r, 415, "bad_content_type")
	require.Contains(t, r.Body["reason"], "attachments are not supported")
	requireError(t, e.do("PUT", "/_replicator/_design/app/att.txt?rev=1-x", asAdmin, "hello", "Content-Type", "text/plain"), 415, "bad_content_type")
	requireError(t, e.do("GET", "/_replicator/d/att.txt", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("DELETE", "/_replicator/d/att.txt?rev="+rev, asAdmin, nil), 404, "not_found")
	requireError(t, e.do("POST", "/_replicator/d/att.txt", asAdmin, nil), 405, "method_not_allowed")
	requireError(t, e.do("PUT", "/_replicator/_local/x/att.txt", asAdmin, "hello", "Content-Type", "text/plain"), 400, "bad_request")
	requireError(t, e.do("PUT", "/_replicator/d/att.txt", anon, "hello", "Content-Type", "text/plain"), 401, "unauthorized")
	require.Equal(t, rev, e.do("GET", "/_replicator/d", asAdmin, nil).Body["_rev"], "nothing written")

	for _, tc := range []struct{ method, path, says string }{
		{"POST", "/_replicator/_find", "Mango queries"},
		{"GET", "/_replicator/_find", "Mango queries"},
		{"POST", "/_replicator/_index", "Mango queries"},
		{"DELETE", "/_replicator/_index/_design/i/json/n", "Mango queries"},
		{"POST", "/_replicator/_explain", "Mango queries"},
		{"GET", "/_replicator/_design_docs", "_all_docs with startkey"},
		{"POST", "/_replicator/_compact", "compact"},
		{"GET", "/_replicator/_design/app/_view/v", "never run"},
		{"POST", "/_replicator/_design/app/_view/v", "never run"},
		{"GET", "/_replicator/_design/app/_info", "never run"},
	} {
		r := e.do(tc.method, tc.path, asAdmin, map[string]any{})
		requireError(t, r, 400, "bad_request")
		reason := r.Body["reason"].(string)
		require.True(t, strings.HasPrefix(reason, "Unsupported endpoint "), "%s %s: %s", tc.method, tc.path, reason)
		require.Contains(t, reason, tc.says, "%s %s", tc.method, tc.path)
	}
	// A document id with an underscore is still refused as one.
	requireError(t, e.do("PUT", "/_replicator/_foo", asAdmin, repDoc()), 400, "illegal_docid")
}

// A replication document over max_document_size is refused with the limit
// and its configuration key in the reason, not only the document's id.
func TestDocumentTooLargeSaysTheLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxDocumentSize = 1000 })
	doc := repDoc("pad", strings.Repeat("a", 2000))
	for _, r := range []resp{
		e.do("PUT", "/_replicator/big", asAdmin, doc),
		e.do("POST", "/_replicator", asAdmin, doc),
	} {
		requireError(t, r, 413, "document_too_large")
		require.Contains(t, r.Body["reason"], "over the limit of 1000 bytes ([chttpd] max_document_size)")
	}
	doc["_id"] = "big"
	r := e.do("POST", "/_replicator/_bulk_docs", asAdmin, map[string]any{"docs": []any{doc}})
	require.Equal(t, 201, r.Status, r.Raw)
	row := r.List[0].(map[string]any)
	require.Equal(t, "document_too_large", row["error"])
	require.Contains(t, row["reason"], "document big is ")
	require.Contains(t, row["reason"], "[chttpd] max_document_size")
}
