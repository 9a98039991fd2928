package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

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
		if _, ok := repdb.RevPos(rev); !ok && !strings.HasPrefix(rev, "0-") {
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
	isDesign := strings.HasPrefix(id, repdb.DesignPrefix)
	isRep := repdb.IsReplicationDoc(id)
	if isDesign && !u.IsAdmin() {
		writeError(w, notDBAdmin(u))
		return
	}
	if deleted {
		body = map[string]any{}
	}
	ownerRulesApply := isRep && !u.HasRole(RoleReplicator)
	if ownerRulesApply && !deleted {
		if he := ownerRules(body, nil, u); he != nil {
			writeError(w, he)
			return
		}
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
	rep := s.opts.Replicator
	var parsed ParsedDoc
	if isRep && !deleted && rep != nil {
		var perr error
		parsed, perr = rep.ParseDoc(db, id, canonical)
		if perr != nil && !u.HasRole(RoleReplicator) {
			writeError(w, forbidden(reasonOf(perr)))
			return
		}
	}
	wr := repdb.Write{DB: db, ID: id, BaseRev: rev, Deleted: deleted, Body: body, JSON: canonical}
	if strings.HasPrefix(id, repdb.LocalPrefix) && !privileged(u) {
		wr.Owner = u.Name // users keep to their own _local documents
	}
	if isRep {
		wr.Hook = func(tr kv.Transaction, old *repdb.Doc) error {
			if ownerRulesApply {
				if he := ownerRules(nil, old, u); he != nil {
					return he
				}
			}
			switch {
			case rep == nil:
				return nil
			case deleted:
				return rep.DocDeleted(r.Context(), tr, db, id)
			default:
				return rep.DocWritten(r.Context(), tr, parsed)
			}
		}
	}
	newRev, err := s.store.Write(r.Context(), wr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", `"`+newRev+`"`)
	writeJSON(w, okStatus, map[string]any{"ok": true, "id": id, "rev": newRev})
}

// reasonOf is the client-facing reason of a port's error.
func reasonOf(err error) string {
	var te TaggedError
	if errors.As(err, &te) {
		return te.Reason()
	}
	return err.Error()
}

// docJSON renders a document for u, with credentials stripped for readers
// who are not its owner.
func (s *Server) docJSON(d *repdb.Doc, u *User) map[string]any {
	out := make(map[string]any, len(d.Body)+2)
	for k, v := range d.Body {
		out[k] = v
	}
	if !strings.HasPrefix(d.ID, repdb.DesignPrefix) && !strings.HasPrefix(d.ID, repdb.LocalPrefix) && !canSeeCredentials(d.Body, u) {
		stripCredentials(out)
	}
	out["_id"] = d.ID
	out["_rev"] = d.Rev
	return out
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
	if !ok || !requireUser(w, r) {
		return
	}
	if he := checkDocID(id); he != nil {
		writeError(w, he)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		d, err := kv.ReadTransact(r.Context(), s.opts.DB, func(tr kv.ReadTransaction) (*repdb.Doc, error) {
			return s.store.Get(tr, db, id)
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if rev := r.URL.Query().Get("rev"); rev != "" && rev != d.Rev {
			writeError(w, notFound("missing"))
			return
		}
		if u := userFrom(r); strings.HasPrefix(id, repdb.LocalPrefix) && !privileged(u) && d.Owner != u.Name {
			writeError(w, notFound("missing")) // another user's _local document
			return
		}
		w.Header().Set("ETag", `"`+d.Rev+`"`)
		out := s.docJSON(d, userFrom(r))
		if revs, he := boolParam(r.URL.Query(), "revs"); he != nil {
			writeError(w, he)
			return
		} else if revs && !strings.HasPrefix(id, repdb.LocalPrefix) {
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
func revisions(d *repdb.Doc) map[string]any {
	pos, _ := repdb.RevPos(d.Rev)
	ids := []string{}
	for _, r := range append([]string{d.Rev}, d.Ancestors...) {
		_, h, _ := strings.Cut(r, "-")
		ids = append(ids, h)
	}
	return map[string]any{"start": pos, "ids": ids}
}
