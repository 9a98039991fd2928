package couch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

func TestPouchDBInterop(t *testing.T) {
	srv := couchtest.StartPouchDB(t, couchtest.WithAdmin("bob", secret))
	db, logs := newAuthDB(t, srv.DBURL("db"), couch.Options{}, nil) // a session
	ctx := context.Background()

	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPut}, nil))
	err := db.DoJSON(ctx, couch.Request{Method: http.MethodPut}, nil)
	require.ErrorIs(t, err, couch.ErrPreconditionFailed, "file_exists")

	var info struct {
		UpdateSeq         json.RawMessage `json:"update_seq"`
		InstanceStartTime string          `json:"instance_start_time"`
	}
	require.NoError(t, db.DoJSON(ctx, couch.Request{}, &info))
	require.Equal(t, "0", string(info.UpdateSeq))
	require.NotEmpty(t, info.InstanceStartTime)

	// Replicated writes, then revs_diff sees them.
	docs := `{"new_edits":false,"docs":[{"_id":"a/1","_rev":"2-bb","_revisions":{"start":2,"ids":["bb","aa"]},"v":1}]}`
	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPost, Path: "_bulk_docs", Body: []byte(docs)}, nil))
	var diff map[string]struct {
		Missing []string `json:"missing"`
	}
	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPost, Path: "_revs_diff",
		Body: []byte(`{"a/1":["2-bb","3-cc"],"b":["1-x"]}`)}, &diff))
	require.Equal(t, []string{"3-cc"}, diff["a/1"].Missing)
	require.Equal(t, []string{"1-x"}, diff["b"].Missing)
	var doc map[string]any
	require.NoError(t, db.DoJSON(ctx, couch.Request{Path: couch.EscapeDocID("a/1")}, &doc))
	require.Equal(t, "2-bb", doc["_rev"])

	// Checkpoint documents: create, stale update conflicts, missing is 404.
	var put struct{ Rev string }
	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPut, Path: couch.EscapeDocID("_local/ck"),
		Body: []byte(`{"x":1}`)}, &put))
	require.Equal(t, "0-1", put.Rev)
	require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPut, Path: "_local/ck",
		Body: []byte(`{"_rev":"0-1","x":2}`)}, nil))
	err = db.DoJSON(ctx, couch.Request{Method: http.MethodPut, Path: "_local/ck", Body: []byte(`{"_rev":"0-1","x":3}`)}, nil)
	require.ErrorIs(t, err, couch.ErrConflict)
	err = db.DoJSON(ctx, couch.Request{Path: "_local/none"}, nil)
	require.ErrorIs(t, err, couch.ErrNotFound)

	// Wrong password: 401, never printed.
	wrong, err := couch.ParseEndpoint(json.RawMessage(`"` + strings.Replace(srv.AuthDBURL("db"), secret, "wrong-"+secret, 1) + `"`))
	require.NoError(t, err)
	db2, err := couch.NewDB(wrong, couch.Options{}, nil)
	require.NoError(t, err)
	defer db2.Close()
	err = db2.DoJSON(ctx, couch.Request{Path: "/_config"}, nil)
	require.ErrorIs(t, err, couch.ErrUnauthorized)
	require.NotContains(t, err.Error(), "wrong-")
	requireNoSecret(t, err.Error(), logs.String())

	// A continuous feed streams row by row (no compression buffering).
	resp, err := db.Do(ctx, couch.Request{Path: "_changes", Stream: true,
		Query: url.Values{"feed": {"continuous"}, "since": {"0"}, "heartbeat": {"100"}}})
	require.NoError(t, err)
	sc := bufio.NewScanner(resp.Body)
	var row struct{ ID string }
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			require.NoError(t, json.Unmarshal([]byte(line), &row))
			break
		}
	}
	require.Equal(t, "a/1", row.ID)
	require.NoError(t, resp.Body.Close())
}

// TestPouchDBThroughFaults sends a seeded random mix of reads and replicated
// writes through a proxy injecting every kind of fault and checks, against a
// model, that every request succeeded exactly as if there were no faults.
func TestPouchDBThroughFaults(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	srv := couchtest.StartPouchDB(t, couchtest.WithAdmin("bob", secret))
	srv.CreateDB(t, "db")
	proxy := couchtest.NewFaultProxy(t, srv.URL(), couchtest.FaultConfig{
		Seed: seed, Rate500: 0.08, Rate429: 0.04, RateDrop: 0.05, RateReset: 0.05, Stall: 5 * time.Second,
	})
	// Scripted first: one of each retried fault, in front of the first
	// request.
	proxy.Script(couchtest.Fault500, couchtest.FaultDrop, couchtest.FaultReset, couchtest.Fault429)
	limiter, err := couch.NewRateLimiter(couch.RateLimiterConfig{BaseInterval: time.Millisecond})
	require.NoError(t, err)
	db, logs := newDB(t, proxy.URL()+"/db", couch.Options{
		RetriesPerRequest: 12, ConnectionTimeout: 500 * time.Millisecond, HTTPConnections: 4,
	}, limiter)
	ctx := context.Background()

	model := map[string]string{} // id -> rev
	for i := range 150 {
		if len(model) == 0 || rng.IntN(2) == 0 {
			// Replicated write (new_edits=false is idempotent, so retries after
			// a dropped answer are harmless).
			id := fmt.Sprintf("d%03d", rng.IntN(60))
			gen := 1
			if rev, ok := model[id]; ok {
				_, _ = fmt.Sscanf(rev, "%d-", &gen)
				gen++
			}
			rev := fmt.Sprintf("%d-r%d", gen, i)
			ids := []string{fmt.Sprintf("r%d", i)}
			if old, ok := model[id]; ok {
				ids = append(ids, strings.SplitN(old, "-", 2)[1])
			}
			body, _ := json.Marshal(map[string]any{"new_edits": false, "docs": []any{map[string]any{
				"_id": id, "_rev": rev, "_revisions": map[string]any{"start": gen, "ids": ids}, "i": i}}})
			require.NoError(t, db.DoJSON(ctx, couch.Request{Method: http.MethodPost, Path: "_bulk_docs", Body: body}, nil), "request %d", i)
			model[id] = rev
			continue
		}
		var res struct {
			Rows []couchtest.Row `json:"rows"`
		}
		require.NoError(t, db.DoJSON(ctx, couch.Request{Path: "_all_docs"}, &res), "request %d", i)
		require.Len(t, res.Rows, len(model), "request %d", i)
		for _, r := range res.Rows {
			require.Equal(t, model[r.ID], r.Value.Rev, "request %d doc %s", i, r.ID)
		}
	}
	c := proxy.Counts()
	t.Logf("requests %d, forwarded %d, injected %v", c.Requests, c.Forwarded, c.Injected)
	for f := couchtest.Fault500; f <= couchtest.FaultReset; f++ {
		require.Positive(t, c.Injected[f], "fault %v injected", f)
	}

	// A stall is not waited out: on a new connection the request fails at
	// once, and the next one goes through.
	fresh, _ := newDB(t, proxy.URL()+"/db", couch.Options{ConnectionTimeout: 500 * time.Millisecond}, limiter)
	proxy.Script(couchtest.FaultStall)
	err = fresh.DoJSON(ctx, couch.Request{Path: "_all_docs"}, nil)
	require.ErrorIs(t, err, couch.ErrTimeout)
	var rerr *couch.RequestError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, 1, rerr.Attempts)
	require.NoError(t, fresh.DoJSON(ctx, couch.Request{Path: "_all_docs"}, nil))
	c = proxy.Counts()

	// A peer that only answers 429 ends in max_backoff (small maximum here;
	// CouchDB's is 25 s).
	require.NoError(t, proxy.SetConfig(couchtest.FaultConfig{Rate429: 1}))
	small, err := couch.NewRateLimiter(couch.RateLimiterConfig{MaxInterval: 200 * time.Millisecond, MinUpdateInterval: time.Nanosecond})
	require.NoError(t, err)
	db2, logs2 := newDB(t, proxy.URL()+"/db", couch.Options{}, small)
	err = db2.DoJSON(ctx, couch.Request{Path: "_all_docs"}, nil)
	require.ErrorIs(t, err, couch.ErrMaxBackoff)
	require.Positive(t, proxy.Counts().Injected[couchtest.Fault429]-c.Injected[couchtest.Fault429])
	requireNoSecret(t, logs.String(), logs2.String(), err.Error())
}
