package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
)

// readDocBody reads and parses a document body within the size and depth
// limits.
func (s *Server) readDocBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	b, he := readBody(w, r, s.opts.MaxRequestSize)
	if he == nil {
		var body map[string]any
		body, he = decodeObject(b, s.opts.MaxJSONDepth)
		if he == nil {
			return body, true
		}
	}
	writeError(w, he)
	return nil, false
}

// checkDocID applies CouchDB's document id rules.
func checkDocID(id string) *httpError {
	illegal := func(reason string) *httpError {
		return newError(http.StatusBadRequest, "illegal_docid", reason)
	}
	switch {
	case id == "":
		return illegal("Document id must not be empty")
	case !utf8.ValidString(id):
		return illegal("Document id must be valid UTF-8")
	case len(id) > repdb.MaxDocIDLength:
		return illegal(fmt.Sprintf("Document id is longer than %d bytes", repdb.MaxDocIDLength))
	case strings.HasPrefix(id, repdb.DesignPrefix) && len(id) > len(repdb.DesignPrefix),
		strings.HasPrefix(id, repdb.LocalPrefix) && len(id) > len(repdb.LocalPrefix):
		return nil
	case strings.HasPrefix(id, "_"):
		return illegal("Only reserved document ids may start with underscore.")
	}
	return nil
}

// docSpecials are a document body's special members.
type docSpecials struct {
	rev     string
	deleted bool
	// revisions is the path _revisions gives, newest first (nil without).
	revisions []string
}

// ignoredSpecials are special members CouchDB accepts in a written
// document and drops: they describe a document as read.
var ignoredSpecials = map[string]bool{"_conflicts": true, "_deleted_conflicts": true, "_revs_info": true, "_local_seq": true}

// splitSpecial removes the special members from body: _id, _rev,
// _deleted and _revisions are returned, those of ignoredSpecials dropped,
// an empty _attachments dropped; the replicator's _replication_* fields
// stay (CouchDB lets them through). Anything else starting with '_' is
// refused, as attachments are (fdbrep stores none).
func splitSpecial(body map[string]any) (sp docSpecials, he *httpError) {
	for k, v := range body {
		if !strings.HasPrefix(k, "_") {
			continue
		}
		switch {
		case k == "_id", ignoredSpecials[k]:
		case k == "_rev":
			s, ok := v.(string)
			if !ok {
				return sp, badRequest("_rev must be a string")
			}
			sp.rev = s
		case k == "_deleted":
			b, ok := v.(bool)
			if !ok {
				return sp, newError(http.StatusBadRequest, "doc_validation", "_deleted must be a boolean")
			}
			sp.deleted = b
		case k == "_revisions":
			if sp.revisions, he = parseRevisions(v); he != nil {
				return sp, he
			}
		case k == "_attachments":
			if m, ok := v.(map[string]any); !ok || len(m) > 0 {
				return sp, newError(http.StatusUnsupportedMediaType, "bad_content_type", "attachments are not supported")
			}
		case strings.HasPrefix(k, "_replication_"):
			continue
		default:
			return sp, newError(http.StatusBadRequest, "doc_validation", "Bad special document member: "+k)
		}
		delete(body, k)
	}
	return sp, nil
}

// parseRevisions reads CouchDB's _revisions ({"start": N, "ids": [...]})
// into a revision path, newest first.
func parseRevisions(v any) ([]string, *httpError) {
	bad := badRequest("_revisions must be {\"start\": N, \"ids\": [ids, newest first]}")
	m, ok := v.(map[string]any)
	if !ok {
		return nil, bad
	}
	n, _ := m["start"].(json.Number)
	start, err := strconv.Atoi(string(n))
	ids, ok := m["ids"].([]any)
	if err != nil || !ok || len(ids) == 0 || start < len(ids) {
		return nil, bad
	}
	path := make([]string, len(ids))
	for i, id := range ids {
		s, ok := id.(string)
		if !ok {
			return nil, bad
		}
		path[i] = strconv.Itoa(start-i) + "-" + s
		if _, _, ok := repdb.ParseRev(path[i]); !ok {
			return nil, badRequest("Invalid rev format")
		}
	}
	return path, nil
}

// revFromRequest merges the rev given in ?rev=, If-Match and the body.
func revFromRequest(r *http.Request, bodyRev string) (string, *httpError) {
	rev := bodyRev
	for _, other := range []string{r.URL.Query().Get("rev"), strings.Trim(r.Header.Get("If-Match"), `"`)} {
		if other == "" {
			continue
		}
		if rev != "" && rev != other {
			return "", badRequest("Document rev from request body and query string have different values")
		}
		rev = other
	}
	if rev != "" {
		if _, ok := repdb.RevPos(rev); !ok && !strings.HasPrefix(rev, "0-") {
			return "", badRequest("Invalid rev format")
		}
	}
	return rev, nil
}

// docEdit is one document write as a handler received it.
type docEdit struct {
	db, id string
	// body is the document without its special members.
	body    map[string]any
	deleted bool
	// rev is the edited revision of a new edit ("" for a new document).
	rev string
	// revisions, for a replicated revision (new_edits=false), is its
	// path, newest first; nil for a new edit.
	revisions []string
}

// replicated reports a new_edits=false write.
func (e *docEdit) replicated() bool { return e.revisions != nil }

// editFromBody builds the edit of a document body for db/id: specials
// split, the revision given in the body (and, for new edits, in r's
// ?rev= and If-Match when r is not nil) checked.
func editFromBody(r *http.Request, db, id string, body map[string]any, newEdits bool) (*docEdit, *httpError) {
	if he := checkDocID(id); he != nil {
		return nil, he
	}
	if bid, ok := body["_id"]; ok && bid != id {
		return nil, badRequest("Document id must match document id in URL")
	}
	sp, he := splitSpecial(body)
	if he != nil {
		return nil, he
	}
	e := &docEdit{db: db, id: id, body: body, deleted: sp.deleted}
	if !newEdits {
		switch {
		case sp.revisions == nil && sp.rev == "":
			return nil, badRequest("When `new_edits: false`, the document needs `_rev` or `_revisions` specified")
		case sp.revisions == nil:
			if _, _, ok := repdb.ParseRev(sp.rev); !ok {
				return nil, badRequest("Invalid rev format")
			}
			e.revisions = []string{sp.rev}
		case sp.rev != "" && sp.rev != sp.revisions[0]:
			return nil, badRequest("_rev and _revisions disagree")
		default:
			e.revisions = sp.revisions
		}
		return e, nil
	}
	rev := sp.rev
	if r != nil {
		if rev, he = revFromRequest(r, rev); he != nil {
			return nil, he
		}
	} else if rev != "" {
		if _, ok := repdb.RevPos(rev); !ok {
			return nil, badRequest("Invalid rev format")
		}
	}
	e.rev = rev
	if e.deleted {
		e.body = map[string]any{} // a deletion keeps no body
	}
	return e, nil
}

// writeDoc answers a single-document write (PUT, POST /{db}, DELETE).
func (s *Server) writeDoc(w http.ResponseWriter, r *http.Request, e *docEdit, okStatus int) {
	rev, err := s.saveDoc(r.Context(), userFrom(r), e)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", `"`+rev+`"`)
	writeJSON(w, okStatus, map[string]any{"ok": true, "id": e.id, "rev": rev})
}

// saveDoc writes one document for u with every rule of a document write,
// whichever endpoint it came through: design documents for admins only;
// for replication documents CouchDB's owner rules (also against the
// revision replaced), the size limit, the replicator's parser (403 with
// its reason, nothing stored; for a body showing credentials redacted,
// after the revision check), and the job change in the write's own
// transaction. It returns the new revision (a replicated one's own).
// Errors are *httpError or storage errors, for toHTTPError.
func (s *Server) saveDoc(ctx context.Context, u *User, e *docEdit) (string, error) {
	if u.Anonymous() {
		return "", errAuthRequired
	}
	isRep := repdb.IsReplicationDoc(e.id)
	if strings.HasPrefix(e.id, repdb.DesignPrefix) && !u.isDBAdmin() {
		return "", notDBAdmin(u)
	}
	ownerRulesApply := isRep && !u.HasRole(RoleReplicator)
	if ownerRulesApply && !e.deleted {
		if he := ownerRules(e.body, nil, u); he != nil {
			return "", he
		}
	}
	// The refusal of a body that shows credentials redacted (read and
	// written back) is answered in the write's transaction, once the store
	// has checked the revision it edits: the credentials stand for those
	// of that revision, so over a stale one (or none, when the document
	// exists) the edit is a conflict, 409, as it is with the credentials
	// themselves. Other refusals come first, as CouchDB validates a
	// _replicator document before it checks the revision.
	masked := isRep && !e.deleted && !e.replicated() && holdsRedacted(e.body)
	var refusal *httpError
	if masked {
		if err := s.keepSealed(ctx, e); err != nil && !errors.As(err, &refusal) {
			return "", err
		}
	}
	canonical, err := json.Marshal(e.body)
	if err != nil {
		return "", badRequest("document cannot be encoded")
	}
	rep := s.opts.Replicator
	var parsed api.ParsedDoc
	if isRep && !e.deleted && rep != nil && refusal == nil {
		var perr error
		parsed, perr = rep.ParseDoc(e.db, e.id, canonical, u.Viewer())
		if perr == nil && !u.HasRole(RoleReplicator) {
			perr = rep.CheckEndpoints(ctx, parsed)
		}
		var te api.TaggedError
		switch {
		case perr != nil && !errors.As(perr, &te):
			return "", perr // a failure of the service: nothing stored
		case perr != nil && !u.HasRole(RoleReplicator) && masked:
			refusal = forbidden(reasonOf(perr))
		case perr != nil && !u.HasRole(RoleReplicator):
			return "", forbidden(reasonOf(perr))
		}
		if stored := parsed.Stored(); stored != nil && refusal == nil {
			// Its credentials sealed: what is stored, and counts for
			// the size limit.
			body, he := decodeObject(stored, s.opts.MaxJSONDepth+3) // auth.basic may add levels
			if he != nil {
				return "", he
			}
			e.body, canonical = body, stored
		}
	}
	if len(canonical) > s.opts.MaxDocumentSize && refusal == nil {
		return "", newError(http.StatusRequestEntityTooLarge, "document_too_large",
			fmt.Sprintf("document %s is %d bytes of JSON (as stored), over the limit of %d bytes ([chttpd] max_document_size)",
				e.id, len(canonical), s.opts.MaxDocumentSize))
	}
	var hook repdb.Hook
	if isRep {
		hook = func(tr kv.Transaction, ev repdb.WriteEvent) (bool, error) {
			if ownerRulesApply {
				if he := ownerRules(nil, ev.Replaced, u); he != nil {
					return false, he
				}
			}
			if refusal != nil {
				return false, refusal // the revision edited is current: the redacted credentials' refusal
			}
			return s.jobChange(ctx, tr, e.db, e.id, ev, parsed, u.Viewer())
		}
	}
	if e.replicated() {
		if strings.HasPrefix(e.id, repdb.LocalPrefix) {
			return "", badRequest("_local documents are not replicated")
		}
		_, err := s.store.WriteReplicated(ctx, repdb.ReplicatedWrite{DB: e.db, ID: e.id, Revisions: e.revisions,
			Deleted: e.deleted, Body: e.body, JSON: canonical, Hook: hook})
		return e.revisions[0], err
	}
	wr := repdb.Write{DB: e.db, ID: e.id, BaseRev: e.rev, Deleted: e.deleted, Body: e.body, JSON: canonical, Hook: hook}
	if strings.HasPrefix(e.id, repdb.LocalPrefix) && !privileged(u) {
		wr.Owner = u.Name // users keep to their own _local documents
	}
	return s.store.Write(ctx, wr)
}

// jobChange makes a replication document's job follow its winning
// revision, in the write's transaction: none when the winner did not
// change, DocDeleted when it became a deletion, DocWritten otherwise,
// with the written body's parse (parsed) or, when another leaf now wins,
// that leaf's (a body invalid now becomes a failed job), parsed as
// writer's. It returns whether the replicator's stale fields must go.
func (s *Server) jobChange(ctx context.Context, tr kv.Transaction, db, id string, ev repdb.WriteEvent, parsed api.ParsedDoc, writer api.User) (bool, error) {
	rep := s.opts.Replicator
	switch {
	case rep == nil || !ev.WinnerChanged():
		return false, nil
	case ev.New == nil:
		return false, rep.DocDeleted(ctx, tr, db, id)
	}
	if !ev.Written || parsed == nil {
		raw, err := json.Marshal(ev.New.Body)
		if err != nil {
			return false, err
		}
		parsed, _ = rep.ParseDoc(db, id, raw, writer) // a failure becomes the job's state
	}
	return rep.DocWritten(ctx, tr, parsed)
}

// reasonOf is the client-facing reason of a port's error.
func reasonOf(err error) string {
	var te api.TaggedError
	if errors.As(err, &te) {
		return te.Reason()
	}
	return err.Error()
}

// docHandler serves a document whose id is prefix followed by the path
// variable name: "docid" for plain documents, "ddoc" under _design/, "id"
// under _local/.
func (s *Server) docHandler(prefix, name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, he := pathVar(r, name)
		if he != nil {
			writeError(w, he)
			return
		}
		s.docRequest(w, r, prefix+id)
	}
}

func (s *Server) docRequest(w http.ResponseWriter, r *http.Request, id string) {
	db, ok := dbFromPath(w, r)
	if !ok || !s.dbUser(w, r, db) {
		return
	}
	if he := checkDocID(id); he != nil {
		writeError(w, he)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.getDoc(w, r, db, id)
	case http.MethodPut:
		if mt := r.Header.Get("Content-Type"); strings.HasPrefix(mt, "multipart/") {
			writeError(w, newError(http.StatusUnsupportedMediaType, "bad_content_type", "attachments are not supported; send application/json"))
			return
		}
		p := params{q: r.URL.Query()}
		newEdits := !p.q.Has("new_edits") || p.bool("new_edits")
		if p.err != nil {
			writeError(w, p.err)
			return
		}
		body, ok := s.readDocBody(w, r)
		if !ok {
			return
		}
		e, he := editFromBody(r, db, id, body, newEdits)
		if he != nil {
			writeError(w, he)
			return
		}
		s.writeDoc(w, r, e, http.StatusCreated)
	case http.MethodDelete:
		rev, he := revFromRequest(r, "")
		if he != nil {
			writeError(w, he)
			return
		}
		if rev == "" {
			writeError(w, errConflict)
			return
		}
		s.writeDoc(w, r, &docEdit{db: db, id: id, body: map[string]any{}, rev: rev, deleted: true}, http.StatusOK)
	}
}
