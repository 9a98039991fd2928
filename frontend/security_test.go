package frontend

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSecurityObject: GET and PUT /{db}/_security as CouchDB: {} until
// set, members read it, admins of the database (server admins, names and
// roles in "admins") replace it, CouchDB's validation, and a deleted
// database's object goes with it.
func TestSecurityObject(t *testing.T) {
	e := newEnv(t)
	const path = "/_replicator/_security"
	for _, c := range []*creds{asAdmin, asAlice, asBob} {
		r := e.do("GET", path, c, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, map[string]any{}, r.Body)
	}
	requireError(t, e.do("GET", path, anon, nil), 401, "unauthorized")
	requireError(t, e.do("PUT", path, anon, map[string]any{}), 401, "unauthorized")
	r := e.do("PUT", path, asAlice, map[string]any{})
	requireError(t, r, 403, "forbidden")
	require.Equal(t, "You are not a db or server admin.", r.Body["reason"])
	requireError(t, e.do("GET", "/nope%2F_replicator/_security", asAlice, nil), 404, "not_found")
	requireError(t, e.do("DELETE", path, asAdmin, nil), 405, "method_not_allowed")

	for _, bad := range []struct {
		name, body, reason string
	}{
		{"not an object", `[1]`, "Request body must be a JSON object"},
		{"admins not an object", `{"admins":["alice"]}`, "admins or members must be a JSON list of strings"},
		{"names not strings", `{"members":{"names":[1]}}`, "names must be a JSON list of strings"},
		{"roles not a list", `{"members":{"roles":"dev"}}`, "roles must be a JSON list of strings"},
		{"readers not an object", `{"readers":true}`, "admins or members must be a JSON list of strings"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			r := e.do("PUT", path, asAdmin, bad.body)
			requireError(t, r, 400, "bad_request")
			require.Contains(t, r.Body["reason"], bad.reason)
		})
	}

	// Set, read back as set (other fields kept), then an admin of the
	// database by role replaces it; a member who is not one may not.
	sec := map[string]any{
		"admins":  map[string]any{"names": []any{}, "roles": []any{"dev"}},
		"members": map[string]any{"names": []any{bobName}, "roles": []any{}},
		"other":   "kept",
	}
	require.Equal(t, 200, e.do("PUT", path, asAdmin, sec).Status)
	require.Equal(t, sec, e.do("GET", path, asBob, nil).Body)
	requireError(t, e.do("PUT", path, asBob, map[string]any{}), 403, "forbidden")
	require.Equal(t, 200, e.do("PUT", path, asAlice, map[string]any{"members": map[string]any{"names": []any{aliceName}}}).Status)
	requireError(t, e.do("GET", path, asBob, nil), 403, "forbidden")

	// A database deleted and created again starts public.
	require.Equal(t, 201, e.do("PUT", "/x%2F_replicator", asAdmin, nil).Status)
	require.Equal(t, 200, e.do("PUT", "/x%2F_replicator/_security", asAdmin, map[string]any{"members": map[string]any{"names": []any{aliceName}}}).Status)
	requireError(t, e.do("GET", "/x%2F_replicator", asBob, nil), 403, "forbidden")
	require.Equal(t, 200, e.do("DELETE", "/x%2F_replicator", asAdmin, nil).Status)
	require.Equal(t, 201, e.do("PUT", "/x%2F_replicator", asAdmin, nil).Status)
	require.Equal(t, map[string]any{}, e.do("GET", "/x%2F_replicator/_security", asBob, nil).Body)
}

// TestSecurityMembers: who may use a replicator database under each
// security object, on every kind of endpoint: server admins always,
// members (by name or role, or everyone when "members" is empty), admins
// of the database; other users get 403 forbidden, anonymous users 401.
func TestSecurityMembers(t *testing.T) {
	e := newEnv(t)
	aliceRev := e.do("PUT", "/_replicator/alice_rep", asAlice, repDoc()).Body["rev"].(string)
	type who struct {
		name string
		c    *creds
	}
	users := []who{{"admin", asAdmin}, {"alice", asAlice}, {"bob", asBob}, {"anonymous", anon}}
	endpoints := []struct {
		method, path string
		body         any
		ok           int
	}{
		{"GET", "/_replicator", nil, 200},
		{"GET", "/_replicator/alice_rep", nil, 200},
		{"GET", "/_replicator/_all_docs", nil, 200},
		{"GET", "/_replicator/_changes", nil, 200},
		{"POST", "/_replicator/_bulk_get", map[string]any{"docs": []any{map[string]any{"id": "alice_rep"}}}, 200},
		{"POST", "/_replicator/_revs_diff", map[string]any{"alice_rep": []any{aliceRev}}, 200},
		{"POST", "/_replicator/_ensure_full_commit", map[string]any{}, 201},
		{"GET", "/_replicator/_security", nil, 200},
		{"POST", "/_replicator", repDoc(), 201},
		{"POST", "/_replicator/_bulk_docs", map[string]any{"docs": []any{repDoc()}}, 201},
	}
	for _, tc := range []struct {
		name    string
		sec     map[string]any
		members []string // who may use the database, besides the admin
	}{
		{"empty: public", map[string]any{}, []string{"alice", "bob"}},
		{"empty lists: public", map[string]any{"members": map[string]any{"names": []any{}, "roles": []any{}}}, []string{"alice", "bob"}},
		{"member by name", map[string]any{"members": map[string]any{"names": []any{bobName}}}, []string{"bob"}},
		{"member by role", map[string]any{"members": map[string]any{"roles": []any{"dev"}}}, []string{"alice"}},
		{"old readers", map[string]any{"readers": map[string]any{"names": []any{aliceName}}}, []string{"alice"}},
		{"db admin by name", map[string]any{"admins": map[string]any{"names": []any{bobName}}, "members": map[string]any{"names": []any{"carol"}}}, []string{"bob"}},
		{"_admin role only", map[string]any{"members": map[string]any{"roles": []any{"_admin"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, 200, e.do("PUT", "/_replicator/_security", asAdmin, tc.sec).Status)
			for _, u := range users {
				for _, ep := range endpoints {
					r := e.do(ep.method, ep.path, u.c, ep.body)
					switch {
					case u.c == anon:
						requireError(t, r, 401, "unauthorized")
					case u.c == asAdmin || contains(tc.members, u.name):
						require.Equal(t, ep.ok, r.Status, "%s %s %s: %s", u.name, ep.method, ep.path, r.Raw)
					default:
						requireError(t, r, 403, "forbidden")
						require.Equal(t, "You are not allowed to access this db.", r.Body["reason"], "%s %s", ep.method, ep.path)
					}
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestSecurityDBAdmins: an admin of a replicator database (named in its
// security object) has CouchDB's check_is_admin rights in it: other
// users' documents are shown whole and may be edited and deleted, design
// documents may be written, but a document's user_ctx may still name only
// the writer's own name and roles. A member who is not an admin keeps the
// owner rules.
func TestSecurityDBAdmins(t *testing.T) {
	e := newEnv(t)
	secret := "http://u:alice-secret@src.example/db"
	aliceRev := e.do("PUT", "/_replicator/alice_rep", asAlice, repDoc("source", secret)).Body["rev"].(string)
	require.Equal(t, 200, e.do("PUT", "/_replicator/_security", asAdmin, map[string]any{
		"admins":  map[string]any{"names": []any{bobName}},
		"members": map[string]any{"names": []any{aliceName}},
	}).Status)

	require.Equal(t, secret, e.do("GET", "/_replicator/alice_rep", asBob, nil).Body["source"])
	r := e.do("PUT", "/_replicator/alice_rep", asBob, repDoc("_rev", aliceRev, "owner", aliceName, "continuous", true))
	require.Equal(t, 201, r.Status, r.Raw)
	require.Equal(t, aliceName, e.do("GET", "/_replicator/alice_rep", asAdmin, nil).Body["owner"])
	requireError(t, e.do("PUT", "/_replicator/ctx", asBob, repDoc("user_ctx", map[string]any{"name": bobName, "roles": []any{"_admin"}})), 403, "forbidden")
	require.Equal(t, 201, e.do("PUT", "/_replicator/_design/d", asBob, map[string]any{}).Status)
	bobRev := e.do("PUT", "/_replicator/bob_rep", asBob, repDoc("source", "http://u:bob-secret@src.example/db")).Body["rev"].(string)

	// alice, a member only: bob's credentials stay hidden, his document
	// and the design document are not hers to change.
	require.Equal(t, "http://src.example/db", e.do("GET", "/_replicator/bob_rep", asAlice, nil).Body["source"])
	requireError(t, e.do("DELETE", "/_replicator/bob_rep?rev="+bobRev, asAlice, nil), 403, "forbidden")
	requireError(t, e.do("PUT", "/_replicator/_design/e", asAlice, map[string]any{}), 403, "forbidden")
	require.Equal(t, 200, e.do("DELETE", "/_replicator/bob_rep?rev="+bobRev, asBob, nil).Status)
}
