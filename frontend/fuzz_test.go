package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzAPI sends the HTTP API arbitrary requests (method, path, query,
// body, credentials) with the replication ports faked: the server never
// panics, never answers 500 to bad input, and every error is CouchDB's
// {"error", "reason"}.
func FuzzAPI(f *testing.F) {
	seeds := []struct {
		method, path, body string
		user               uint8
	}{
		{"PUT", "/_replicator/d", `{"source":"http://h/a","target":"http://h/b"}`, 1},
		{"PUT", "/_replicator/d", `{"source":"http://h/a","target":"http://h/b","worker_processes":100000000}`, 2},
		{"POST", "/_replicator", `{"_id":"x","source":{"url":"http://h/a"},"target":"http://h/b","owner":"bob"}`, 2},
		{"GET", "/_replicator/_changes?since=ffffffffffffffffffffffff&feed=longpoll&timeout=1", ``, 0},
		{"GET", "/_replicator/_all_docs?keys=%5B1%5D&startkey=%22a", ``, 0},
		{"POST", "/_replicate", `{"source":"http://h/a","target":"http://h/b","cancel":true}`, 1},
		{"DELETE", "/another%2F_replicator", ``, 0},
		{"PUT", "/_replicator/_local/x", `{"_rev":"0-9","a":[[[[1]]]]}`, 2},
		{"GET", "/_scheduler/docs/_replicator/d?states=bogus&limit=-1", ``, 0},
		{"POST", "/_session", `name=alice&password=x`, 3},
		{"PUT", "/_replicator/%ZZ", `{}`, 1},
		{"COPY", "/_replicator/d", ``, 1},
		{"POST", "/_replicator/_bulk_docs", `{"new_edits":false,"docs":[{"_id":"d","_rev":"2-b","_revisions":{"start":2,"ids":["b","a"]},"source":"http://h/a","target":"http://h/b"}]}`, 1},
		{"POST", "/_replicator/_bulk_docs", `{"docs":[{"_id":"d","_rev":"1-x","_deleted":true},{"_attachments":{"a":{}}}]}`, 2},
		{"POST", "/_replicator/_bulk_get?revs=true&latest=true", `{"docs":[{"id":"d","rev":"1-a"},{"id":"d"},{"rev":"x"}]}`, 2},
		{"POST", "/_replicator/_revs_diff", `{"d":["2-b","1-a"],"e":["9-z"]}`, 1},
		{"GET", `/_replicator/d?open_revs=["1-a"]&latest=true&revs=true&meta=true`, ``, 2},
		{"GET", "/_replicator/_changes?feed=continuous&style=all_docs&timeout=1&include_docs=true&conflicts=true", ``, 1},
		{"GET", "/_replicator/_changes?feed=eventsource&since=now&heartbeat=1&limit=1", ``, 1},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.body, s.user)
	}
	e := newEnv(f)
	f.Fuzz(func(t *testing.T, method, path, body string, user uint8) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t") || len(path) > 4096 {
			return // not a request line net/http would deliver
		}
		switch method {
		case "GET", "HEAD", "PUT", "POST", "DELETE", "COPY", "OPTIONS":
		default:
			return
		}
		req, err := http.NewRequest(method, "http://x"+path, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		if strings.HasPrefix(body, "name=") {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		switch user % 4 {
		case 1:
			req.SetBasicAuth(adminName, adminPass)
		case 2:
			req.SetBasicAuth(aliceName, alicePass)
		case 3:
			req.SetBasicAuth(bobName, "wrong")
		}
		// Waiting feeds end with the request (a bound, not an expectation).
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		req = req.WithContext(ctx)
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				// A stream cut once started is how net/http's servers end
				// it: not a failure.
				if p := recover(); p != nil && p != http.ErrAbortHandler {
					panic(p)
				}
			}()
			e.srv.ServeHTTP(rec, req)
		}()
		if rec.Code >= 500 {
			// Only the missing scheduler of this test's server (503).
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, "%s %s %q: %s", method, path, body, rec.Body.String())
		}
		if rec.Code >= 400 && method != "HEAD" {
			var reply map[string]any
			require.NoError(t, json.Unmarshal(bytes.TrimSpace(rec.Body.Bytes()), &reply), "%s", rec.Body.String())
			require.IsType(t, "", reply["error"], "%s", rec.Body.String())
			require.IsType(t, "", reply["reason"], "%s", rec.Body.String())
		}
	})
}
