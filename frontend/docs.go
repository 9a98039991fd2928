package frontend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/fdbrep/fdbrep/pkg/kv"
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
	case len(id) > maxDocIDLength:
		return illegal(fmt.Sprintf("Document id is longer than %d bytes", maxDocIDLength))
	case strings.HasPrefix(id, designPrefix) && len(id) > len(designPrefix),
		strings.HasPrefix(id, localPrefix) && len(id) > len(localPrefix):
		return nil
	case strings.HasPrefix(id, "_"):
		return illegal("Only reserved document ids may start with underscore.")
	}
	return nil
}

// splitSpecial removes _id, _rev and _deleted from body and refuses other
// special members, except the replicator's _replication_* fields (which
// CouchDB lets through).
func splitSpecial(body map[string]any) (rev string, deleted bool, he *httpError) {
	for k, v := range body {
		if !strings.HasPrefix(k, "_") {
			continue
		}
		switch {
		case k == "_id":
		case k == "_rev":
			s, ok := v.(string)
			if !ok {
				return "", false, badRequest("_rev must be a string")
			}
			rev = s
		case k == "_deleted":
			b, ok := v.(bool)
			if !ok {
				return "", false, newError(http.StatusBadRequest, "doc_validation", "_deleted must be a boolean")
			}
			deleted = b
		case strings.HasPrefix(k, "_replication_"):
			continue
		default:
			return "", false, newError(http.StatusBadRequest, "doc_validation", "Bad special document member: "+k)
		}
		delete(body, k)
	}
	return rev, deleted, nil
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
		if _, ok := revPos(rev); !ok && !strings.HasPrefix(rev, "0-") {
			return "", badRequest("Invalid rev format")
		}
	}
	return rev, nil
}

// writeDoc runs a document write for the handlers: the owner rules and
// validation for replication documents, then the transactional write with
// the job hook. body has had its special members removed by the caller or
// is a deletion (deleted=true). It answers the request.
func (s *Server) writeDoc(w http.ResponseWriter, r *http.Request, db, id string, body map[string]any) {
	if he := checkDocID(id); he != nil {
		writeError(w, he)
		return
	}
	if bid, ok := body["_id"]; ok && bid != id {
		writeError(w, badRequest("Document id must match document id in URL"))
		return
	}
	bodyRev, deleted, he := splitSpecial(body)
	if he != nil {
		writeError(w, he)
		return
	}
	rev, he := revFromRequest(r, bodyRev)
	if he != nil {
		writeError(w, he)
		return
	}
	s.commitDoc(w, r, db, id, body, rev, deleted, http.StatusCreated)
}

func (s *Server) commitDoc(w http.ResponseWriter, r *http.Request, db, id string, body map[string]any, rev string, deleted bool, okStatus int) {
	u := userFrom(r)
	if u.Anonymous() {
		writeError(w, errAuthRequired)
		return
	}
	isDesign := strings.HasPrefix(id, designPrefix)
	isLocal := strings.HasPrefix(id, localPrefix)
	isRep := !isDesign && !isLocal
	if isDesign && !u.IsAdmin() {
		writeError(w, notDBAdmin(u))
		return
	}
	if deleted {
		body = map[string]any{}
	}
	canonical, err := json.Marshal(body)
	if err != nil {
		writeError(w, badRequest("document cannot be encoded"))
		return
	}
	if len(canonical) > s.opts.MaxDocumentSize {
		writeError(w, newError(http.StatusRequestEntityTooLarge, "document_too_large", id))
		return
	}
	ownerRulesApply := isRep && !u.HasRole(RoleReplicator)
	if ownerRulesApply && !deleted {
		if he := ownerRules(body, nil, u); he != nil {
			writeError(w, he)
			return
		}
	}
	if isRep && !deleted && s.opts.Replicator != nil && !u.HasRole(RoleReplicator) && body["_replication_state"] != "failed" {
		if err := s.opts.Replicator.ValidateDoc(db, id, body, u); err != nil {
			writeError(w, forbidden(err.Error()))
			return
		}
	}
	req := writeReq{db: db, id: id, baseRev: rev, deleted: deleted, body: body}
	if isRep {
		req.hook = func(tr kv.Transaction, old *doc, final map[string]any) error {
			if ownerRulesApply {
				if he := ownerRules(nil, old, u); he != nil {
					return he
				}
			}
			if s.opts.Replicator == nil {
				return nil
			}
			var d map[string]any
			if !deleted {
				d = final
			}
			return s.opts.Replicator.DocWritten(r.Context(), tr, db, id, d)
		}
	}
	newRev, err := s.store.writeDoc(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", `"`+newRev+`"`)
	writeJSON(w, okStatus, map[string]any{"ok": true, "id": id, "rev": newRev})
}

// docJSON renders a document for u, with credentials stripped for readers
// who are not its owner.
func (s *Server) docJSON(d *doc, u *User) map[string]any {
	out := make(map[string]any, len(d.body)+2)
	for k, v := range d.body {
		out[k] = v
	}
	if !strings.HasPrefix(d.id, designPrefix) && !strings.HasPrefix(d.id, localPrefix) && !canSeeCredentials(d.body, u) {
		stripCredentials(out)
	}
	out["_id"] = d.id
	out["_rev"] = d.rev
	return out
}

func (s *Server) handleDoc(w http.ResponseWriter, r *http.Request) {
	id, he := pathVar(r, "docid")
	if he != nil {
		writeError(w, he)
		return
	}
	s.docRequest(w, r, id)
}

func (s *Server) handleDesignDoc(w http.ResponseWriter, r *http.Request) {
	name, he := pathVar(r, "ddoc")
	if he != nil {
		writeError(w, he)
		return
	}
	s.docRequest(w, r, designPrefix+name)
}

func (s *Server) handleLocalDoc(w http.ResponseWriter, r *http.Request) {
	name, he := pathVar(r, "id")
	if he != nil {
		writeError(w, he)
		return
	}
	s.docRequest(w, r, localPrefix+name)
}

func (s *Server) docRequest(w http.ResponseWriter, r *http.Request, id string) {
	db, ok := dbFromPath(w, r)
	if !ok || !requireUser(w, r) {
		return
	}
	if he := checkDocID(id); he != nil {
		writeError(w, he)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		d, err := kv.ReadTransact(r.Context(), s.opts.DB, func(tr kv.ReadTransaction) (*doc, error) {
			return s.store.getDoc(tr, db, id)
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if rev := r.URL.Query().Get("rev"); rev != "" && rev != d.rev {
			writeError(w, notFound("missing"))
			return
		}
		w.Header().Set("ETag", `"`+d.rev+`"`)
		out := s.docJSON(d, userFrom(r))
		if revs, he := boolParam(r.URL.Query(), "revs"); he != nil {
			writeError(w, he)
			return
		} else if revs && !strings.HasPrefix(id, localPrefix) {
			out["_revisions"] = revisions(d)
		}
		writeJSON(w, http.StatusOK, out)
	case http.MethodPut:
		if mt := r.Header.Get("Content-Type"); strings.HasPrefix(mt, "multipart/") {
			writeError(w, newError(http.StatusUnsupportedMediaType, "bad_content_type", "attachments are not supported; send application/json"))
			return
		}
		body, ok := s.readDocBody(w, r)
		if !ok {
			return
		}
		s.writeDoc(w, r, db, id, body)
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
		s.commitDoc(w, r, db, id, nil, rev, true, http.StatusOK)
	}
}

// revisions renders CouchDB's _revisions: the rev position and the hashes
// of the kept history, newest first.
func revisions(d *doc) map[string]any {
	pos, _ := revPos(d.rev)
	ids := []string{}
	for _, r := range append([]string{d.rev}, d.ancestors...) {
		_, h, _ := strings.Cut(r, "-")
		ids = append(ids, h)
	}
	return map[string]any{"start": pos, "ids": ids}
}
