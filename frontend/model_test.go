package frontend

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDocumentsAgainstModel runs random writes, deletes and reads through
// the HTTP API and checks every answer, _all_docs and _changes against an
// in-memory model of CouchDB's single-revision semantics. Run with
// FDBREP_KV_FAULTS=1 to do it under injected storage faults.
func TestDocumentsAgainstModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	e := newEnv(t)

	type state struct {
		rev     string
		deleted bool
		gen     int
		value   int
	}
	model := map[string]*state{}
	ids := []string{"a", "b", "c", "d/e", "f"}
	users := []*creds{asAdmin, asAlice, asBob}
	owner := map[string]string{}
	for step := 0; step < 300; step++ {
		id := ids[rng.IntN(len(ids))]
		path := "/_replicator/" + strings.ReplaceAll(id, "/", "%2F")
		m := model[id]
		u := users[rng.IntN(len(users))]
		mayWrite := m == nil || m.deleted || u == asAdmin || owner[id] == u.Name
		switch op := rng.IntN(4); op {
		case 0, 1: // put, with the current rev, a stale one or none
			v := rng.IntN(1000)
			body := repDoc("v", v)
			revKind := rng.IntN(3)
			switch {
			case revKind == 0 && m != nil:
				body["_rev"] = m.rev
			case revKind == 1:
				body["_rev"] = fmt.Sprintf("%d-%032x", rng.IntN(5)+1, rng.Uint64())
			}
			if m != nil && !m.deleted && owner[id] != "" && u != asAdmin {
				body["owner"] = owner[id] // keep the owner; other users are refused
			}
			r := e.do("PUT", path, u, body)
			rev, _ := body["_rev"].(string)
			live := m != nil && !m.deleted
			okRev := (!live && (rev == "" || (m != nil && rev == m.rev))) || (live && rev == m.rev)
			claimsOther := body["owner"] != nil && body["owner"] != u.Name && u != asAdmin
			switch {
			case claimsOther: // refused before anything is read
				requireError(t, r, 403, "forbidden")
			case !okRev:
				requireError(t, r, 409, "conflict")
			case live && !mayWrite:
				requireError(t, r, 403, "forbidden")
			default:
				require.Equal(t, 201, r.Status, "step %d: %s", step, r.Raw)
				gen := 1
				if m != nil {
					gen = m.gen + 1
				}
				require.True(t, strings.HasPrefix(r.Body["rev"].(string), fmt.Sprintf("%d-", gen)), "step %d: %v", step, r.Body)
				model[id] = &state{rev: r.Body["rev"].(string), gen: gen, value: v}
				if o, ok := body["owner"].(string); ok {
					owner[id] = o
				} else {
					owner[id] = u.Name // a missing owner becomes the writer
				}
			}
		case 2: // delete
			rev := ""
			if m != nil && rng.IntN(4) > 0 {
				rev = m.rev
			}
			r := e.do("DELETE", path+"?rev="+rev, u, nil)
			live := m != nil && !m.deleted
			switch {
			case rev == "":
				requireError(t, r, 409, "conflict")
			case !live:
				require.Equal(t, 404, r.Status, "step %d: %s", step, r.Raw)
			case !mayWrite:
				requireError(t, r, 403, "forbidden")
			default:
				require.Equal(t, 200, r.Status, "step %d: %s", step, r.Raw)
				model[id] = &state{rev: r.Body["rev"].(string), gen: m.gen + 1, deleted: true}
			}
		case 3: // read
			r := e.do("GET", path, u, nil)
			switch {
			case m == nil:
				requireError(t, r, 404, "not_found")
				require.Equal(t, "missing", r.Body["reason"])
			case m.deleted:
				requireError(t, r, 404, "not_found")
				require.Equal(t, "deleted", r.Body["reason"])
			default:
				require.Equal(t, 200, r.Status)
				require.Equal(t, m.rev, r.Body["_rev"])
				require.EqualValues(t, m.value, r.Body["v"])
			}
		}
	}
	// _all_docs lists the live documents in id order; _changes has one row
	// per document ever written, with its current rev.
	var live, all []string
	for _, id := range ids {
		if m := model[id]; m != nil {
			all = append(all, id)
			if !m.deleted {
				live = append(live, id)
			}
		}
	}
	r := e.do("GET", "/_replicator/_all_docs", asAdmin, nil)
	var got []string
	for _, row := range r.Body["rows"].([]any) {
		got = append(got, row.(map[string]any)["id"].(string))
	}
	require.Equal(t, live, got)
	require.EqualValues(t, len(live), r.Body["total_rows"])
	r = e.do("GET", "/_replicator/_changes", asAdmin, nil)
	seen := map[string]bool{}
	for _, row := range r.Body["results"].([]any) {
		c := row.(map[string]any)
		id := c["id"].(string)
		require.False(t, seen[id], "two changes rows for %s", id)
		seen[id] = true
		require.Equal(t, model[id].rev, c["changes"].([]any)[0].(map[string]any)["rev"])
		require.Equal(t, model[id].deleted, c["deleted"] == true)
	}
	require.Len(t, seen, len(all))
	info := e.do("GET", "/_replicator", asAdmin, nil).Body
	require.EqualValues(t, len(live), info["doc_count"])
	require.EqualValues(t, len(all)-len(live), info["doc_del_count"])
}
