// Package enginetest has helpers for testing replication outcomes: a
// snapshot of a CouchDB-compatible database's revisions (every leaf of
// every document, deleted ones included, with bodies, revision paths and
// attachment contents) and a comparison of two databases.
package enginetest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Revision is one leaf revision of a document.
type Revision struct {
	Deleted bool
	// Body is the document without _id, _rev, _attachments and
	// _revisions (decoded JSON).
	Body map[string]any
	// Path is the revision path, newest first ("3-abc", "2-def", ...).
	Path []string
	// Attachments maps names to content type and decoded bytes.
	Attachments map[string]Attachment
}

// Attachment is an attachment's content.
type Attachment struct {
	ContentType string
	Data        []byte
}

// Snapshot maps document id to leaf revision id to revision.
type Snapshot map[string]map[string]Revision

// Take reads every leaf revision of the database at dbURL (which may carry
// credentials): _changes?style=all_docs for the leaves, then _bulk_get with
// revs and attachments for their contents.
func Take(t testing.TB, dbURL string) Snapshot {
	t.Helper()
	base := strings.TrimSuffix(dbURL, "/") + "/"
	var changes struct {
		Results []struct {
			ID      string `json:"id"`
			Changes []struct {
				Rev string `json:"rev"`
			} `json:"changes"`
		} `json:"results"`
	}
	request(t, http.MethodGet, base+"_changes?style=all_docs", nil, &changes)
	type want struct {
		ID  string `json:"id"`
		Rev string `json:"rev"`
	}
	var reqs []want
	for _, row := range changes.Results {
		for _, c := range row.Changes {
			reqs = append(reqs, want{row.ID, c.Rev})
		}
	}
	snap := Snapshot{}
	for len(reqs) > 0 {
		n := min(len(reqs), 500)
		chunk := reqs[:n]
		reqs = reqs[n:]
		var reply struct {
			Results []struct {
				ID   string `json:"id"`
				Docs []struct {
					OK json.RawMessage `json:"ok"`
				} `json:"docs"`
			} `json:"results"`
		}
		body := map[string]any{"docs": chunk, "revs": true, "attachments": true}
		request(t, http.MethodPost, base+"_bulk_get?revs=true&attachments=true", body, &reply)
		for _, res := range reply.Results {
			for _, d := range res.Docs {
				if len(d.OK) == 0 {
					continue
				}
				id, rev, r := decodeRevision(t, d.OK)
				if snap[id] == nil {
					snap[id] = map[string]Revision{}
				}
				snap[id][rev] = r
			}
		}
	}
	return snap
}

func decodeRevision(t testing.TB, raw json.RawMessage) (string, string, Revision) {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&m))
	id, _ := m["_id"].(string)
	rev, _ := m["_rev"].(string)
	r := Revision{Attachments: map[string]Attachment{}}
	r.Deleted, _ = m["_deleted"].(bool)
	if revs, ok := m["_revisions"].(map[string]any); ok {
		start, _ := revs["start"].(json.Number).Int64()
		ids, _ := revs["ids"].([]any)
		for i, h := range ids {
			r.Path = append(r.Path, fmt.Sprintf("%d-%s", start-int64(i), h))
		}
	}
	if atts, ok := m["_attachments"].(map[string]any); ok {
		for name, a := range atts {
			am, _ := a.(map[string]any)
			ct, _ := am["content_type"].(string)
			s, _ := am["data"].(string)
			data, err := base64.StdEncoding.DecodeString(s)
			require.NoError(t, err, "attachment %s of %s", name, id)
			r.Attachments[name] = Attachment{ContentType: ct, Data: data}
		}
	}
	for _, k := range []string{"_id", "_rev", "_revisions", "_attachments", "_deleted", "_conflicts"} {
		delete(m, k)
	}
	r.Body = m
	return id, rev, r
}

// RequireSame fails the test unless both databases hold the same documents
// with the same leaf revisions, bodies, revision paths and attachments.
func RequireSame(t testing.TB, sourceURL, targetURL string) {
	t.Helper()
	RequireEqual(t, Take(t, sourceURL), Take(t, targetURL))
}

// RequireEqual fails the test with the first differences between want and
// got.
func RequireEqual(t testing.TB, want, got Snapshot) {
	t.Helper()
	diffs := Diff(want, got)
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... and %d more", len(diffs)-10))
	}
	require.Empty(t, diffs, "databases differ")
}

// Diff lists the differences between want and got, sorted.
func Diff(want, got Snapshot) []string {
	var out []string
	for id, revs := range want {
		g, ok := got[id]
		if !ok {
			out = append(out, "missing document "+id)
			continue
		}
		for rev, w := range revs {
			gr, ok := g[rev]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s: missing leaf %s", id, rev))
			case !reflect.DeepEqual(w, gr):
				out = append(out, fmt.Sprintf("%s: leaf %s differs: want %+v, got %+v", id, rev, w, gr))
			}
		}
		for rev := range g {
			if _, ok := revs[rev]; !ok {
				out = append(out, fmt.Sprintf("%s: unexpected leaf %s", id, rev))
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			out = append(out, "unexpected document "+id)
		}
	}
	sort.Strings(out)
	return out
}

// request sends a JSON request and decodes a 2xx reply.
func request(t testing.TB, method, rawURL string, body, out any) {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	user := u.User
	u.User = nil
	req, err := http.NewRequest(method, u.String(), rd)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	if user != nil {
		pw, _ := user.Password()
		req.SetBasicAuth(user.Username(), pw)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Truef(t, resp.StatusCode/100 == 2, "%s %s: %d %s", method, u.Redacted(), resp.StatusCode, data)
	require.NoError(t, json.Unmarshal(data, out), "%s %s", method, u.Redacted())
}
