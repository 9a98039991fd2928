package engine

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewDocAndCovers(t *testing.T) {
	d, err := newDoc(json.RawMessage(`{"_id":"a","_rev":"3-c","_revisions":{"start":3,"ids":["c","b","a"]},"_attachments":{"z":{"stub":true},"y":{"stub":true}},"v":1}`))
	require.NoError(t, err)
	require.Equal(t, []string{"3-c", "2-b", "1-a"}, d.Revisions)
	require.True(t, d.covers("3-c"))
	require.True(t, d.covers("2-b"))
	require.False(t, d.covers("2-x"))
	require.Equal(t, []string{"z", "y"}, d.AttNames, "attachment names keep document order")
	require.True(t, d.hasAttachments())

	for _, bad := range []string{`{}`, `[]`, `{"_id":"a"}`, `{"_id":"a","_rev":"1-a","_attachments":[1]}`} {
		_, err := newDoc(json.RawMessage(bad))
		require.ErrorIs(t, err, errBadDoc, bad)
	}
}

// bulkGetDocs parses a _bulk_get reply into its documents.
func bulkGetDocs(r io.Reader) ([]*doc, error) {
	var docs []*doc
	err := parseBulkGet(r, LargeDocMin, func(d *doc) error { docs = append(docs, d); return nil })
	return docs, err
}

func TestParseBulkGet(t *testing.T) {
	couch := `{"results":[
{"id":"a","docs":[{"ok":{"_id":"a","_rev":"1-x","_revisions":{"start":1,"ids":["x"]}}}]},
{"id":"b","docs":[{"error":{"id":"b","rev":"1-y","error":"not_found","reason":"missing"}}]}]}`
	docs, err := bulkGetDocs(strings.NewReader(couch))
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.Equal(t, "a", docs[0].ID)

	// pouchdb-server: grouped per id, string errors, {"missing": rev}.
	pouch := `{"results":[
{"id":"c","docs":[{"ok":{"_id":"c","_rev":"2-b","_revisions":{"start":2,"ids":["b","a"]}}}]},
{"id":"c","docs":[{"ok":{"_id":"c","_rev":"2-q","_deleted":true,"_revisions":{"start":2,"ids":["q","a"]}}}]},
{"id":"d","docs":[{"missing":"1-z"}]},
{"id":"e","docs":[{"error":"not_found","reason":"deleted"}]}]}`
	docs, err = bulkGetDocs(strings.NewReader(pouch))
	require.NoError(t, err)
	require.Len(t, docs, 2)
	require.True(t, docs[1].Deleted)

	_, err = bulkGetDocs(strings.NewReader(`{"results":[{"docs":[{"ok":{"_id":1}}]}]}`))
	require.Error(t, err)
}

// couchOpenRevs builds a CouchDB-style multipart/mixed open_revs reply.
func couchOpenRevs(t *testing.T) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mixed := multipart.NewWriter(&buf)
	// A plain JSON document.
	p, _ := mixed.CreatePart(map[string][]string{"Content-Type": {"application/json"}})
	p.Write([]byte(`{"_id":"a","_rev":"2-b","_revisions":{"start":2,"ids":["b","a"]},"v":1}`))
	// A document with two attachments; the second part has no filename.
	var rel bytes.Buffer
	related := multipart.NewWriter(&rel)
	rp, _ := related.CreatePart(map[string][]string{"Content-Type": {"application/json"}})
	rp.Write([]byte(`{"_id":"a","_rev":"2-c","_attachments":{"one.txt":{"content_type":"text/plain","length":3,"follows":true},"stub":{"stub":true},"two.bin":{"content_type":"application/octet-stream","length":2,"follows":true}}}`))
	rp, _ = related.CreatePart(map[string][]string{"Content-Disposition": {`attachment; filename="one.txt"`}, "Content-Type": {"text/plain"}})
	rp.Write([]byte("abc"))
	rp, _ = related.CreatePart(map[string][]string{"Content-Type": {"application/octet-stream"}})
	rp.Write([]byte{0, 1})
	related.Close()
	p, _ = mixed.CreatePart(map[string][]string{"Content-Type": {`multipart/related; boundary="` + related.Boundary() + `"`}})
	p.Write(rel.Bytes())
	// A missing revision.
	p, _ = mixed.CreatePart(map[string][]string{"Content-Type": {`application/json; error="true"`}})
	p.Write([]byte(`{"missing":"3-zz"}`))
	mixed.Close()
	return `multipart/mixed; boundary="` + mixed.Boundary() + `"`, buf.Bytes()
}

func TestParseOpenRevs(t *testing.T) {
	ct, body := couchOpenRevs(t)
	docs, missing, err := parseOpenRevs(ct, bytes.NewReader(body))
	require.NoError(t, err)
	require.Equal(t, []string{"3-zz"}, missing)
	require.Len(t, docs, 2)
	require.Equal(t, "2-b", docs[0].Rev)
	require.Equal(t, []byte("abc"), docs[1].Atts["one.txt"])
	require.Equal(t, []byte{0, 1}, docs[1].Atts["two.bin"])

	// pouchdb-server answers JSON (labelled text/plain by 4.2.0).
	js := `[{"missing":"1-q"},{"ok":{"_id":"a","_rev":"1-x","_attachments":{"f":{"content_type":"text/plain","data":"aGk="}}}}]`
	docs, missing, err = parseOpenRevs("text/plain; charset=utf-8", strings.NewReader(js))
	require.NoError(t, err)
	require.Equal(t, []string{"1-q"}, missing)
	require.Len(t, docs, 1)

	bad := []struct{ ct, body string }{
		{"multipart/mixed", ""},
		{"application/json", "{"},
		{"multipart/mixed; boundary=x", "--x\r\nContent-Type: multipart/related\r\n\r\n\r\n--x--"},
		{"multipart/mixed; boundary=x", "--x\r\nContent-Type: application/json\r\n\r\n{}\r\n--x--"},
	}
	for _, b := range bad {
		_, _, err := parseOpenRevs(b.ct, strings.NewReader(b.body))
		require.Error(t, err, b.body)
	}
}

func FuzzParseOpenRevs(f *testing.F) {
	var t testing.T
	ct, body := couchOpenRevs(&t)
	f.Add(ct, body)
	f.Add("application/json", []byte(`[{"ok":{"_id":"a","_rev":"1-x"}},{"missing":"2-y"}]`))
	f.Add("text/plain", []byte(`[{"ok":{"_id":"a","_rev":"1-x","_attachments":{"f":{"follows":true}}}}]`))
	f.Add("multipart/mixed; boundary=x", []byte("--x\r\nContent-Type: application/json; error=\"true\"\r\n\r\n{\"missing\":\"1-a\"}\r\n--x--\r\n"))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		docs, _, err := parseOpenRevs(ct, bytes.NewReader(body))
		requireIdentified(t, docs, err)
	})
}

// requireIdentified fails t for a document without id or revision among
// those a parser returned without error.
func requireIdentified(t *testing.T, docs []*doc, err error) {
	t.Helper()
	if err != nil {
		return
	}
	for _, d := range docs {
		if d.ID == "" || d.Rev == "" {
			t.Fatalf("document without id or rev: %+v", d)
		}
	}
}

func FuzzParseBulkGet(f *testing.F) {
	f.Add([]byte(`{"results":[{"id":"a","docs":[{"ok":{"_id":"a","_rev":"1-x"}},{"missing":"1-y"},{"error":"x"}]}]}`))
	f.Add([]byte(`{"results":[{"id":"b","docs":[{"error":{"id":"b","rev":"1-y","error":"not_found"}}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		docs, err := bulkGetDocs(bytes.NewReader(body))
		requireIdentified(t, docs, err)
	})
}

func TestMultipartDocRoundTrip(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped text"))
	zw.Close()
	d, err := newDoc(json.RawMessage(`{"_id":"d","_rev":"2-b","_revisions":{"start":2,"ids":["b","a"]},"v":"x",
"_attachments":{"inline.txt":{"content_type":"text/plain","revpos":2,"data":"aGVsbG8="},
"old":{"content_type":"text/plain","revpos":1,"stub":true,"length":4},
"z.gz":{"content_type":"text/plain","revpos":2,"follows":true,"encoding":"gzip"}}}`))
	require.NoError(t, err)
	d.Atts = map[string][]byte{"z.gz": gz.Bytes()}

	for _, decode := range []bool{false, true} {
		ct, body, err := multipartDoc(context.Background(), d, "BOUNDARY", decode)
		require.NoError(t, err)
		mt, params, err := mime.ParseMediaType(ct)
		require.NoError(t, err)
		require.Equal(t, "multipart/related", mt)
		got, err := parseRelatedDoc(multipart.NewReader(bytes.NewReader(body), params["boundary"]))
		require.NoError(t, err)
		require.Equal(t, "d", got.ID)
		require.Equal(t, []byte("hello"), got.Atts["inline.txt"])
		require.NotContains(t, got.Atts, "old")
		var m struct {
			Atts map[string]map[string]any `json:"_attachments"`
		}
		require.NoError(t, json.Unmarshal(got.Body, &m))
		require.Equal(t, true, m.Atts["old"]["stub"])
		require.Nil(t, m.Atts["inline.txt"]["data"])
		require.Equal(t, float64(5), m.Atts["inline.txt"]["length"])
		if decode {
			require.Equal(t, []byte("zipped text"), got.Atts["z.gz"])
			require.Nil(t, m.Atts["z.gz"]["encoding"])
		} else {
			require.Equal(t, gz.Bytes(), got.Atts["z.gz"])
			require.Equal(t, "gzip", m.Atts["z.gz"]["encoding"])
		}
	}

	plain, err := newDoc(json.RawMessage(`{"_id":"p","_rev":"1-a","_attachments":{"s":{"stub":true}}}`))
	require.NoError(t, err)
	ct, body, err := multipartDoc(context.Background(), plain, "B", false)
	require.NoError(t, err)
	require.Equal(t, "application/json", ct)
	require.JSONEq(t, string(plain.Body), string(body))

	broken, err := newDoc(json.RawMessage(`{"_id":"p","_rev":"1-a","_attachments":{"s":{"content_type":"x"}}}`))
	require.NoError(t, err)
	_, _, err = multipartDoc(context.Background(), broken, "B", false)
	require.ErrorIs(t, err, errBadDoc)
}
