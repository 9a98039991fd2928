package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/repdb"
)

func checkDBName(name string) *httpError {
	if repdb.IsReplicatorDB(name) {
		return nil
	}
	return newError(http.StatusBadRequest, "illegal_database_name",
		"Name: '"+name+"'. fdbrep serves only replicator databases: _replicator, or a name ending in /_replicator whose prefix matches ^[a-z][a-z0-9_$()+/-]*$ (escape '/' as %2F in URLs).")
}

// ownerRules applies CouchDB's before_doc_update owner handling to a
// replication document written by u (who is not anonymous and has no
// _replicator role), and, unlike CouchDB, also checks the owner of the
// document being replaced or deleted, so that users cannot take over or
// delete other users' replications. Admins of the database (server
// admins and those its security object names) write any user's
// documents, as in CouchDB; user_ctx may name other users and roles for
// server admins only (CouchDB's _replicator validation). body is nil for a
// deletion.
func ownerRules(body map[string]any, old *repdb.Doc, u *User) *httpError {
	errOther := forbidden("Can't update replication documents from other users.")
	if old != nil && !u.isDBAdmin() {
		if owner, _ := old.Body["owner"].(string); owner != u.Name {
			return errOther
		}
	}
	if body == nil {
		return nil
	}
	owner, present := body["owner"]
	switch {
	case !present:
		body["owner"] = u.Name
	case owner == u.Name:
	case u.isDBAdmin():
		if owner == nil {
			body["owner"] = u.Name
		}
	default:
		return errOther
	}
	if uc, ok := body["user_ctx"]; ok && !u.IsAdmin() {
		m, ok := uc.(map[string]any)
		if !ok {
			return forbidden("user_ctx must be an object")
		}
		if name, ok := m["name"]; ok && name != u.Name {
			return forbidden("user_ctx.name must be your own user name")
		}
		if roles, ok := m["roles"]; ok {
			list, ok := roles.([]any)
			if !ok {
				return forbidden("user_ctx.roles must be an array")
			}
			for _, r := range list {
				s, ok := r.(string)
				if !ok || !u.HasRole(s) {
					return forbidden("user_ctx.roles may only list roles you have")
				}
			}
		}
	}
	return nil
}

// privileged reports users who may read and write every document of a
// replicator database: its admins (server admins, and those its security
// object names) and holders of the _replicator role.
func privileged(u *User) bool { return u.isDBAdmin() || u.HasRole(RoleReplicator) }

// hiddenFrom reports a document that reads show u as never written:
// another user's _local document (privileged users read every one).
// Unlike CouchDB, which lets every member read every _local document,
// _local documents belong to their writer (see docs/COMPAT.md): a
// replicator's checkpoints name its endpoints and may hold a session.
func hiddenFrom(d *repdb.Doc, u *User) bool {
	return strings.HasPrefix(d.ID, repdb.LocalPrefix) && !privileged(u) && d.Owner != u.Name
}

// lookup reads the winners of ids as u may see them, in order: nil for
// an id never written and for a document hidden from u (hiddenFrom), a
// deleted one with Deleted set (repdb.Store.Lookup). It is the one read
// of the frontend that reaches _local documents (repdb reads them by id
// only: ranges, revision reads and the changes feed never meet them),
// so every read path applies the owner rule here.
func (s *Server) lookup(ctx context.Context, u *User, db string, ids []string, conflicts bool) ([]*repdb.Doc, error) {
	docs, err := s.store.Lookup(ctx, db, ids, conflicts)
	for i, d := range docs {
		if d != nil && hiddenFrom(d, u) {
			docs[i] = nil
		}
	}
	return docs, err
}

// canSeeCredentials is CouchDB's after_doc_read rule: admins of the
// database, users with the _replicator role and the owner of a
// replication document (or of its job) see it whole.
func canSeeCredentials(owner string, u *User) bool {
	return privileged(u) || (!u.Anonymous() && owner == u.Name)
}

// docRowFor shows u a _scheduler/docs row as a read of its document
// shows it (canSeeCredentials): whole to those who see the document
// whole; to other members without what the read strips or has no field
// for. Endpoints and proxies lose their user name (the views show it, its
// password hidden, to those who may see it). Of info go the free texts
// that quote the peers, which may hold personal data: failed_docs (each
// refusal's reason from the target), the stall's detail and the parked
// watch's reason; what remains loses any URL userinfo, as the document's
// _replication_state_reason does. Counters, states, times, the stall's
// reason (a closed list) and the node stay. A refused address's error
// (couch.AddressDeniedReason, in the info's reason or stall detail) is
// shown without its detail to everyone but server admins, the row's owner
// included: which address a name resolved to, and which rule refused it,
// would tell a writer what lies behind names and ports it cannot reach.
func docRowFor(d api.DocInfo, u *User) api.DocInfo {
	if !u.IsAdmin() {
		d.Info = couch.HideAddressDetailJSON(d.Info)
	}
	if canSeeCredentials(d.Owner, u) {
		return d
	}
	for _, p := range []**string{&d.Source, &d.Target, &d.SourceProxy, &d.TargetProxy} {
		if *p != nil {
			s := StripURLUserinfo(**p)
			*p = &s
		}
	}
	dec := json.NewDecoder(bytes.NewReader(d.Info))
	dec.UseNumber()
	var info any
	if len(d.Info) == 0 || dec.Decode(&info) != nil {
		d.Info = json.RawMessage("null")
		return d
	}
	if m, ok := info.(map[string]any); ok {
		delete(m, "failed_docs")
		if stall, ok := m["stall"].(map[string]any); ok {
			delete(stall, "detail")
		}
		if parked, ok := m["parked"].(map[string]any); ok {
			if watch, ok := parked["watch"].(map[string]any); ok {
				delete(watch, "reason")
			}
		}
	}
	d.Info, _ = json.Marshal(couch.MapStrings(info, StripURLUserinfo))
	return d
}

// stripCredentials removes credentials from a replication document's
// endpoints for readers who are not its owner: URL userinfo goes, endpoint
// objects lose "headers" and "auth". Proxy URLs lose their userinfo too.
func stripCredentials(body map[string]any) {
	for _, field := range []string{"source", "target"} {
		switch ep := body[field].(type) {
		case string:
			body[field] = StripURLUserinfo(ep)
		case map[string]any:
			c := make(map[string]any, len(ep))
			for k, v := range ep {
				if k == "headers" || k == "auth" {
					continue
				}
				c[k] = v
			}
			if u, ok := c["url"].(string); ok {
				c["url"] = StripURLUserinfo(u)
			}
			body[field] = c
		}
	}
	for _, field := range []string{"proxy", "source_proxy", "target_proxy", "_replication_state_reason"} {
		if s, ok := body[field].(string); ok {
			body[field] = StripURLUserinfo(s)
		}
	}
}

// redacted is what reads show for a sealed credential of a replication
// document (the replicator seals them when configured to: see
// docs/CONFIG.md, seal_public_key_file), to its owner too.
const redacted = couch.Redacted

// hideSealed shows each sealed credential of a replication document's
// body as redacted (the body's nested objects are copied, never changed).
func hideSealed(body map[string]any) {
	_ = couch.WalkSecrets(body, func(_, v string) (string, error) {
		if seal.IsSealed(v) {
			return redacted, nil
		}
		return v, nil
	})
}

// keepSealed puts back, in the body of an edit of a replication document,
// each credential written as redacted (a document read and written back,
// as Fauxton's editor does) that the revision it replaces holds sealed at
// the same place. The write replaces that very revision or conflicts, so
// no other revision's credential is taken. A redacted value with nothing
// to keep is left for the replicator's parser to refuse. One kept while
// the edit sends it elsewhere (its endpoint's or proxy's scheme, host or
// port changed: couch.Destination) is refused, 403 naming the field: the
// writer may not have been given the credential, only the use of it
// there (the replication node also refuses to open a value bound to
// another destination).
//
// Its refusal, and the parser's of a redacted value it left, depend on the
// revision replaced: saveDoc answers them only once the store has found
// that revision current (a stale one is 409, as the same edit with the
// credentials themselves is).
func (s *Server) keepSealed(ctx context.Context, e *docEdit) error {
	if !holdsRedacted(e.body) || e.rev == "" {
		return nil
	}
	res, err := s.store.ReadRevs(ctx, e.db, []repdb.RevRequest{{ID: e.id, Query: repdb.OpenRevsQuery{Revs: []string{e.rev}}}})
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0].Err != nil || len(res[0].Revs) != 1 || res[0].Revs[0].Doc == nil {
		return nil // the write itself reports the missing revision
	}
	// Credentials are matched by place: a field and its occurrence (the
	// three proxy fields share one name, as do an endpoint's URL and
	// auth.basic passwords), which the walk visits in a fixed order.
	type sealed struct{ v, dest string }
	held, place := map[string]sealed{}, places()
	_ = couch.WalkSecretsTo(maps.Clone(res[0].Revs[0].Doc.Body), func(field, dest, v string) (string, error) {
		if p := place(field); seal.IsSealed(v) {
			held[p] = sealed{v, dest}
		}
		return v, nil
	})
	place = places()
	return couch.WalkSecretsTo(e.body, func(field, dest, v string) (string, error) {
		k, ok := held[place(field)]
		switch {
		case !ok || v != redacted:
			return v, nil
		case k.dest != dest:
			return "", forbidden(fmt.Sprintf("`%s` is %s, which keeps the credential the replaced revision sends to %s, "+
				"but this revision would send it to %s: give the credential itself to send one there", field, redacted, k.dest, dest))
		}
		if side, ok := strings.CutSuffix(field, "."+couch.SecretPassword); ok {
			was, now := endpointUser(res[0].Revs[0].Doc.Body[side]), endpointUser(e.body[side])
			if was != now {
				return "", forbidden(fmt.Sprintf("`%s` is %s, which keeps the password the replaced revision gives as user %q, "+
					"but this revision would give it as user %q: give the password itself to log in as another user", field, redacted, was, now))
			}
		}
		return k.v, nil
	})
}

// endpointUser is the user name an endpoint of a replication document's
// body logs in with, its password aside: from auth.basic, its URL's
// userinfo or a Basic Authorization header, as couch.ParseEndpoint takes
// them ("" for none, or an endpoint that does not parse).
func endpointUser(ep any) string {
	raw, err := json.Marshal(ep)
	if err != nil {
		return ""
	}
	e, err := couch.ParseEndpoint(raw)
	if err != nil {
		return ""
	}
	return e.Username
}

// holdsRedacted reports whether a replication document's body shows a
// credential as redacted (a document read and written back).
func holdsRedacted(body map[string]any) bool {
	found := false
	_ = couch.WalkSecrets(maps.Clone(body), func(_, v string) (string, error) {
		found = found || v == redacted
		return v, nil
	})
	return found
}

// places names each visit of a field by the field and how many times it
// was visited so far.
func places() func(field string) string {
	seen := map[string]int{}
	return func(field string) string {
		seen[field]++
		return field + "#" + strconv.Itoa(seen[field])
	}
}

// userinfoRe matches a URL's scheme and everything up to the last '@' of
// the same token: a password may hold '/', '?' or '#' unescaped (which
// url.Parse then reads as a path), so every '@' after "://" may end the
// userinfo.
var userinfoRe = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^\s"'<>]*@`)

// StripURLUserinfo removes the user and password of a URL string, in
// every form: a well-formed URL loses its userinfo; in anything else all
// text between "://" and the last '@' of the token goes (a URL whose path
// holds an '@' loses more than its userinfo, never less).
func StripURLUserinfo(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil && !strings.Contains(u.Host+u.Path, "@") {
		u.User = nil
		return u.String()
	}
	return userinfoRe.ReplaceAllString(s, "$1")
}
