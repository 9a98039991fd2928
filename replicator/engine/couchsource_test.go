package engine_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/fdbrep/fdbrep/replicator/engine/enginetest"
	"github.com/stretchr/testify/require"
)

// fakeCouchSource serves one database the way CouchDB does where
// pouchdb-server differs: opaque string sequences, a streamed feed and
// open_revs answered as multipart/mixed with a multipart/related document
// whose attachments follow, one of them stored gzip-encoded.
func fakeCouchSource(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped text"))
	zw.Close()
	var multipartFetches atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /src/{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"db_name":"src","update_seq":"3-g1AAAA","instance_start_time":"0","doc_count":3}`)
	})
	mux.HandleFunc("GET /src/_local/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"not_found","reason":"missing"}`)
	})
	mux.HandleFunc("PUT /src/_local/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true,"id":"_local/x","rev":"0-1"}`)
	})
	mux.HandleFunc("POST /src/_ensure_full_commit", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true,"instance_start_time":"0"}`)
	})
	mux.HandleFunc("GET /src/_changes", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("limit") == "0" { // changes_pending
			io.WriteString(w, `{"results":[],"last_seq":"3-g1AAAA","pending":0}`)
			return
		}
		if r.URL.Query().Get("feed") != "normal" || r.URL.Query().Has("limit") {
			t.Errorf("unexpected changes request %s (CouchDB's feed is read in one request)", r.URL.RawQuery)
		}
		io.WriteString(w, `{"results":[
{"seq":"1-g1AAAA","id":"plain","changes":[{"rev":"1-c"}],"doc":{"_id":"plain","_rev":"1-c","v":1}},
{"seq":"2-g1AAAA","id":"m","changes":[{"rev":"2-b"}],"doc":{"_id":"m","_rev":"2-b","_attachments":{}}},
{"seq":"3-g1AAAA","id":"_design/d","changes":[{"rev":"1-d"}]}
],"last_seq":"3-g1AAAA","pending":0}`)
	})
	mux.HandleFunc("POST /src/_bulk_get", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"results":[
{"id":"_design/d","docs":[{"ok":{"_id":"_design/d","_rev":"1-d","_revisions":{"start":1,"ids":["d"]},"views":{}}}]},
{"id":"m","docs":[{"ok":{"_id":"m","_rev":"2-b","_revisions":{"start":2,"ids":["b","a"]},"_attachments":{"plain.txt":{"stub":true}}}}]}]}`)
	})
	mux.HandleFunc("GET /src/m", func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept"), "multipart/mixed") || r.URL.Query().Get("open_revs") != `["2-b"]` {
			t.Errorf("unexpected open_revs request: %s, Accept %q", r.URL.RawQuery, r.Header.Get("Accept"))
		}
		multipartFetches.Add(1)
		var body bytes.Buffer
		mixed := multipart.NewWriter(&body)
		var rel bytes.Buffer
		related := multipart.NewWriter(&rel)
		p, _ := related.CreatePart(map[string][]string{"Content-Type": {"application/json"}})
		fmt.Fprintf(p, `{"_id":"m","_rev":"2-b","_revisions":{"start":2,"ids":["b","a"]},"v":2,"_attachments":{`+
			`"plain.txt":{"content_type":"text/plain","revpos":2,"length":5,"follows":true},`+
			`"z.txt":{"content_type":"text/plain","revpos":2,"length":11,"follows":true,"encoding":"gzip","encoded_length":%d}}}`, gz.Len())
		p, _ = related.CreatePart(map[string][]string{"Content-Disposition": {`attachment; filename="plain.txt"`}, "Content-Type": {"text/plain"}})
		p.Write([]byte("hello"))
		p, _ = related.CreatePart(map[string][]string{"Content-Disposition": {`attachment; filename="z.txt"`}, "Content-Type": {"text/plain"},
			"Content-Encoding": {"gzip"}})
		p.Write(gz.Bytes())
		related.Close()
		p, _ = mixed.CreatePart(map[string][]string{"Content-Type": {`multipart/related; boundary="` + related.Boundary() + `"`}})
		p.Write(rel.Bytes())
		mixed.Close()
		w.Header().Set("Content-Type", `multipart/mixed; boundary="`+mixed.Boundary()+`"`)
		w.Write(body.Bytes())
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &multipartFetches
}

// TestCouchDBSource replicates from a CouchDB-shaped source into
// pouchdb-server: the multipart/mixed open_revs reply is parsed and the
// document is written with a multipart PUT, the gzip attachment decoded for
// pouchdb-server.
func TestCouchDBSource(t *testing.T) {
	t.Parallel()
	src, fetches := fakeCouchSource(t)
	pouch := couchtest.StartPouchDB(t)
	rep := engine.Replication{Source: endpoint(t, src.URL+"/src"), Target: endpoint(t, pouch.DBURL("tgt")), CreateTarget: true}
	res := runOnce(t, rep, engine.Options{})
	require.Equal(t, int64(3), res.Stats.DocsWritten)
	require.NotNil(t, res.Stats.ChangesPending)
	require.Equal(t, int64(1), fetches.Load())
	require.Equal(t, "3-g1AAAA", res.Stats.ThroughSeq)
	require.JSONEq(t, `"3-g1AAAA"`, string(res.SourceLastSeq))

	got := enginetest.Take(t, pouch.DBURL("tgt"))
	require.Len(t, got, 3)
	m := got["m"]["2-b"]
	require.Equal(t, []string{"2-b", "1-a"}, m.Path)
	require.Equal(t, "hello", string(m.Attachments["plain.txt"].Data))
	require.Equal(t, "zipped text", string(m.Attachments["z.txt"].Data))
	require.Equal(t, []string{"1-c"}, got["plain"]["1-c"].Path)
	require.Contains(t, got, "_design/d")
	var v json.Number = "2"
	require.Equal(t, v, m.Body["v"])
	require.False(t, strings.Contains(fmt.Sprint(m.Body), "follows"))
}
