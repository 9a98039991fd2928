package frontend

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNonOwnerReadPaths walks every read endpoint of a replicator database
// as bob, a member of it, after alice wrote a replication document with
// credentials and a _local document: on every path bob sees alice's
// _local document exactly as one never written (a direct GET's 404), and
// none of her credentials.
func TestNonOwnerReadPaths(t *testing.T) {
	e := newEnv(t)
	const db = "/team%2F_replicator"
	require.Equal(t, 201, e.do("PUT", db, asAdmin, nil).Status)
	members := map[string]any{"members": map[string]any{"names": []any{aliceName, bobName}}}
	require.Equal(t, 200, e.do("PUT", db+"/_security", asAdmin, members).Status)
	rep := repDoc("source", "http://srcuser:srcpass@src.example/db",
		"target", map[string]any{"url": "http://tgt.example/db", "headers": map[string]any{"Authorization": "Basic aGRycGFzcw=="}})
	require.Equal(t, 201, e.do("PUT", db+"/alice_rep", asAlice, rep).Status)
	r := e.do("PUT", db+"/_local/alice_ck", asAlice, map[string]any{"session": "ck-secret", "history": []any{"x"}})
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, "0-1", r.Body["rev"])
	secrets := []string{"ck-secret", "srcpass", "srcuser", "aGRycGFzcw=="}

	// Each read names a document id: bob's answer for alice's _local
	// document must be his answer for a _local id never written. Alice
	// reads hers where a path shows _local documents at all (mine).
	const mine, never = "_local/alice_ck", "_local/never_written"
	reads := []struct {
		method, path, body string
		shows              bool
	}{
		{"GET", "/ID", "", true},
		{"GET", "/ID?rev=0-1", "", true},
		{"GET", "/ID?open_revs=all", "", true},
		{"GET", `/ID?open_revs=["0-1"]`, "", true},
		{"GET", "/ID?revs=true&conflicts=true&meta=true", "", true},
		{"HEAD", "/ID", "", true},
		{"GET", `/_all_docs?keys=["ID"]`, "", true},
		{"GET", `/_all_docs?include_docs=true&keys=["ID"]`, "", true},
		{"POST", "/_all_docs", `{"keys":["ID"]}`, true},
		{"POST", "/_all_docs?include_docs=true&conflicts=true", `{"keys":["ID"]}`, true},
		{"GET", `/_all_docs?include_docs=true&startkey="ID"&endkey="ID"`, "", false},
		{"POST", "/_bulk_get", `{"docs":[{"id":"ID"},{"id":"ID","rev":"0-1"}]}`, false},
		{"POST", "/_bulk_get?revs=true&latest=true", `{"docs":[{"id":"ID","rev":"0-1"}]}`, false},
		{"GET", `/_changes?include_docs=true&filter=_doc_ids&doc_ids=["ID"]`, "", false},
		{"POST", "/_changes?include_docs=true&filter=_doc_ids", `{"doc_ids":["ID"]}`, false},
		{"POST", "/_revs_diff", `{"ID":["0-1","0-2"]}`, false},
		{"GET", "/_local_docs?include_docs=true", "", false},
		{"POST", "/_local_docs?include_docs=true", `{"keys":["ID"]}`, false},
		{"GET", "/ID/att", "", false},
	}
	for _, rd := range reads {
		at := func(id string, c *creds) resp {
			esc := url.QueryEscape
			if strings.HasPrefix(rd.path, "/ID") {
				esc = url.PathEscape
			}
			var body any
			if rd.body != "" {
				body = strings.ReplaceAll(rd.body, "ID", id)
			}
			return e.do(rd.method, db+strings.ReplaceAll(rd.path, "ID", esc(id)), c, body)
		}
		name := rd.method + " " + rd.path + " " + rd.body
		got, want := at(mine, asBob), at(never, asBob)
		require.Equal(t, want.Status, got.Status, "%s: %s", name, got.Raw)
		require.Equal(t, want.Raw, strings.ReplaceAll(got.Raw, mine, never), name)
		hers := at(mine, asAlice)
		require.Equal(t, rd.shows, hers.Status != want.Status || strings.ReplaceAll(hers.Raw, mine, never) != want.Raw,
			"%s: alice's answer %s", name, hers.Raw)
	}

	// Every read path that shows documents shows bob alice's replication
	// document without its credentials, and never her _local document.
	for _, rd := range []struct{ method, path, body string }{
		{"GET", "/alice_rep", ""},
		{"GET", "/alice_rep?open_revs=all&revs=true", ""},
		{"GET", "/alice_rep?meta=true", ""},
		{"GET", "/_all_docs?include_docs=true", ""},
		{"GET", `/_all_docs?include_docs=true&keys=["alice_rep","_local/alice_ck"]`, ""},
		{"POST", "/_all_docs?include_docs=true", `{"keys":["alice_rep","_local/alice_ck"]}`},
		{"POST", "/_bulk_get", `{"docs":[{"id":"alice_rep"},{"id":"_local/alice_ck"}]}`},
		{"GET", "/_changes?include_docs=true&conflicts=true", ""},
		{"POST", "/_changes?include_docs=true&filter=_doc_ids", `{"doc_ids":["alice_rep","_local/alice_ck"]}`},
		{"GET", "/_changes?include_docs=true&feed=longpoll&since=0", ""},
	} {
		var body any
		if rd.body != "" {
			body = rd.body
		}
		r := e.do(rd.method, db+rd.path, asBob, body)
		require.Equal(t, 200, r.Status, "%s %s: %s", rd.method, rd.path, r.Raw)
		require.Contains(t, r.Raw, "src.example/db", rd.path)
		for _, s := range secrets {
			require.NotContains(t, r.Raw, s, "%s %s", rd.method, rd.path)
		}
	}
}
