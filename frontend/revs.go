package frontend

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
)

// readOpts are the metadata a document read adds (GET, _bulk_get,
// open_revs, include_docs): _revisions, _conflicts, _deleted_conflicts,
// _revs_info.
type readOpts struct {
	revs, conflicts, deletedConflicts, revsInfo bool
}

// readOptsOf reads revs, conflicts, deleted_conflicts, revs_info and meta
// (the last three at once).
func readOptsOf(p *params) readOpts {
	meta := p.bool("meta")
	return readOpts{revs: p.bool("revs"), conflicts: p.bool("conflicts") || meta,
		deletedConflicts: p.bool("deleted_conflicts") || meta, revsInfo: p.bool("revs_info") || meta}
}

// needTree reports options that need the revision tree.
func (o readOpts) needTree() bool { return o.revs || o.conflicts || o.deletedConflicts || o.revsInfo }

// renderDoc renders a revision for u, as CouchDB's JSON: credentials of a
// replication document stripped for readers who are not its owner, the
// detail of a refused address in its _replication_state_reason for
// readers who are not server admins (docRowFor),
// _deleted for deletions, and the metadata of o that d carries (Path and
// conflicts come with tree reads).
func (s *Server) renderDoc(d *repdb.Doc, u *User, o readOpts) map[string]any {
	out := make(map[string]any, len(d.Body)+4)
	for k, v := range d.Body {
		out[k] = v
	}
	if repdb.IsReplicationDoc(d.ID) {
		if owner, _ := d.Body["owner"].(string); !canSeeCredentials(owner, u) {
			stripCredentials(out)
		}
		hideSealed(out)
		if reason, ok := out["_replication_state_reason"].(string); ok && !u.IsAdmin() {
			out["_replication_state_reason"] = couch.HideAddressDetail(reason)
		}
	}
	out["_id"] = d.ID
	out["_rev"] = d.Rev
	if d.Deleted {
		out["_deleted"] = true
	}
	if o.revs && !strings.HasPrefix(d.ID, repdb.LocalPrefix) {
		out["_revisions"] = revisions(d)
	}
	if o.conflicts && len(d.Conflicts) > 0 {
		out["_conflicts"] = d.Conflicts
	}
	if o.deletedConflicts && len(d.DeletedConflicts) > 0 {
		out["_deleted_conflicts"] = d.DeletedConflicts
	}
	if o.revsInfo && len(d.Path) > 0 {
		info := make([]map[string]string, len(d.Path))
		for i, r := range d.Path {
			status := "missing" // CouchDB keeps no body for ancestors either
			switch {
			case i == 0 && d.Deleted:
				status = "deleted"
			case i == 0:
				status = "available"
			}
			info[i] = map[string]string{"rev": r, "status": status}
		}
		out["_revs_info"] = info
	}
	return out
}

// revisions renders CouchDB's _revisions: the rev position and the ids of
// the kept history, newest first.
func revisions(d *repdb.Doc) map[string]any {
	path := d.Path
	if len(path) == 0 {
		path = []string{d.Rev}
	}
	pos, _ := repdb.RevPos(path[0])
	ids := make([]string, 0, len(path))
	for _, r := range path {
		_, h, _ := strings.Cut(r, "-")
		ids = append(ids, h)
	}
	return map[string]any{"start": pos, "ids": ids}
}

// getDoc answers GET /{db}/{docid}: the winner, or with rev= one
// revision (any leaf, deletions included), or with open_revs= a JSON array
// of revisions, with the metadata asked for.
func (s *Server) getDoc(w http.ResponseWriter, r *http.Request, db, id string) {
	p := params{q: r.URL.Query()}
	o, latest := readOptsOf(&p), p.bool("latest")
	if p.err != nil {
		writeError(w, p.err)
		return
	}
	u := userFrom(r)
	if strings.HasPrefix(id, repdb.LocalPrefix) {
		docs, err := s.lookup(r.Context(), u, db, []string{id}, false)
		switch {
		case err != nil:
			s.fail(w, r, err)
		case docs[0] == nil, p.q.Has("rev") && p.q.Get("rev") != docs[0].Rev:
			writeError(w, notFound("missing"))
		default:
			w.Header().Set("ETag", `"`+docs[0].Rev+`"`)
			writeJSON(w, http.StatusOK, s.renderDoc(docs[0], u, readOpts{}))
		}
		return
	}
	if p.q.Has("open_revs") {
		s.openRevs(w, r, db, id, o, latest)
		return
	}
	rev := p.q.Get("rev")
	if rev == "" && !o.needTree() {
		d, err := kv.ReadTransact(r.Context(), s.opts.DB, func(tr kv.ReadTransaction) (*repdb.Doc, error) {
			return s.store.Get(tr, db, id)
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("ETag", `"`+d.Rev+`"`)
		writeJSON(w, http.StatusOK, s.renderDoc(d, u, o))
		return
	}
	q := repdb.OpenRevsQuery{Latest: latest}
	if rev != "" {
		if _, _, ok := repdb.ParseRev(rev); !ok {
			writeError(w, badRequest("Invalid rev format"))
			return
		}
		q.Revs = []string{rev}
	}
	res, err := kv.ReadTransact(r.Context(), s.opts.DB, func(tr kv.ReadTransaction) ([]repdb.OpenRev, error) {
		return s.store.OpenRevs(tr, db, id, q)
	})
	switch {
	case err != nil:
		s.fail(w, r, err)
	case len(res) == 0 || res[0].Doc == nil:
		writeError(w, notFound("missing"))
	case rev == "" && res[0].Doc.Deleted:
		writeError(w, notFound("deleted"))
	default:
		w.Header().Set("ETag", `"`+res[0].Doc.Rev+`"`)
		writeJSON(w, http.StatusOK, s.renderDoc(res[0].Doc, u, o))
	}
}

// revsParam parses open_revs: "all" or a JSON array of revisions.
func revsParam(v string) (all bool, revs []string, he *httpError) {
	if v == "all" {
		return true, nil, nil
	}
	if json.Unmarshal([]byte(v), &revs) != nil || len(revs) == 0 {
		return false, nil, badRequest("open_revs must be \"all\" or a JSON array of revisions")
	}
	for _, rev := range revs {
		if _, _, ok := repdb.ParseRev(rev); !ok {
			return false, nil, badRequest("Invalid rev format")
		}
	}
	return false, revs, nil
}

// openRevs answers GET /{db}/{docid}?open_revs=…: a JSON array of
// {"ok": doc} and {"missing": rev} (CouchDB sends multipart/mixed to
// clients that prefer it; JSON is what both CouchDB's and PouchDB's
// replicators read too).
func (s *Server) openRevs(w http.ResponseWriter, r *http.Request, db, id string, o readOpts, latest bool) {
	all, revs, he := revsParam(r.URL.Query().Get("open_revs"))
	if he != nil {
		writeError(w, he)
		return
	}
	res, err := kv.ReadTransact(r.Context(), s.opts.DB, func(tr kv.ReadTransaction) ([]repdb.OpenRev, error) {
		return s.store.OpenRevs(tr, db, id, repdb.OpenRevsQuery{Revs: revs, All: all, Latest: latest})
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	u := userFrom(r)
	out := make([]map[string]any, len(res))
	for i, rv := range res {
		if rv.Doc == nil {
			out[i] = map[string]any{"missing": rv.Missing}
		} else {
			out[i] = map[string]any{"ok": s.renderDoc(rv.Doc, u, o)}
		}
	}
	writeJSON(w, http.StatusOK, out)
}
