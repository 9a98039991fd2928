package frontend

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/fdbrep/fdbrep/repdb"
)

// bulkRequest checks a request to a bulk endpoint of a database and
// reads its body, which must be a JSON object sent as application/json,
// as CouchDB requires; ok is false when it answered.
func (s *Server) bulkRequest(w http.ResponseWriter, r *http.Request) (db string, body map[string]any, ok bool) {
	if db, ok = dbFromPath(w, r); !ok || !s.dbUser(w, r, db) {
		return "", nil, false
	}
	if !isJSONType(r.Header.Get("Content-Type")) {
		writeError(w, errJSONContentType)
		return "", nil, false
	}
	if body, ok = s.readDocBody(w, r); !ok {
		return "", nil, false
	}
	if _, err := s.store.Info(r.Context(), db); err != nil {
		s.fail(w, r, err)
		return "", nil, false
	}
	return db, body, true
}

// bulkWriters is how many documents of one _bulk_docs request are written
// at once, each in its own transaction: a commit waits for the store, and
// commits in flight together share its round trip.
const bulkWriters = 8

// handleBulkDocs answers POST /{db}/_bulk_docs: each document is written
// as a single-document write would be (saveDoc: its rules, its own
// transaction with its job change), so a failure is that document's
// alone. Up to bulkWriters documents are written at once; the versions of
// one document in a request are written in their order. With new_edits
// (the default) the reply lists every document's outcome, in request
// order; with new_edits=false (replication) only the failures, as CouchDB
// does. all_or_nothing is not supported: documents commit one by one.
func (s *Server) handleBulkDocs(w http.ResponseWriter, r *http.Request) {
	db, body, ok := s.bulkRequest(w, r)
	if !ok {
		return
	}
	raw, has := body["docs"]
	docs, isList := raw.([]any)
	switch {
	case !has:
		writeError(w, badRequest("POST body must include `docs` parameter."))
		return
	case !isList:
		writeError(w, badRequest("`docs` parameter must be an array."))
		return
	}
	newEdits := true
	if v, ok := body["new_edits"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			writeError(w, badRequest("`new_edits` parameter must be a boolean."))
			return
		}
		newEdits = b
	}
	type item struct {
		id, rev string
		e       *docEdit
		err     error
	}
	items := make([]item, len(docs))
	byID := map[string][]int{} // the documents to write, in order per id
	var ids []string
	for i, d := range docs {
		doc, isObj := d.(map[string]any)
		if !isObj {
			writeError(w, badRequest("Document must be a JSON object"))
			return
		}
		id, _ := doc["_id"].(string)
		if _, has := doc["_id"]; !has && newEdits {
			id = newDocID()
			doc["_id"] = id
		}
		items[i].id = id
		items[i].rev, _ = doc["_rev"].(string)
		e, he := editFromBody(nil, db, id, doc, newEdits)
		if he != nil {
			items[i].err = he
			continue
		}
		items[i].e = e
		if byID[id] == nil {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], i)
	}
	u := userFrom(r)
	sem := make(chan struct{}, bulkWriters)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(idx []int) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, i := range idx {
				items[i].rev, items[i].err = s.saveDocContained(r.Context(), u, items[i].e, items[i].rev)
			}
		}(byID[id])
	}
	wg.Wait()
	results := make([]map[string]any, 0, len(items))
	for _, it := range items {
		result := map[string]any{"id": it.id}
		switch he := toHTTPError(it.err); {
		case it.err == nil && !newEdits:
			continue // replication: only failures are listed
		case it.err == nil:
			result["ok"], result["rev"] = true, it.rev
		case he == nil:
			s.fail(w, r, it.err) // a failure of the service; other documents may be stored
			return
		default:
			result["error"], result["reason"] = he.err, he.reason
			if it.rev != "" {
				result["rev"] = it.rev
			}
		}
		results = append(results, result)
	}
	writeJSON(w, http.StatusCreated, results)
}

// saveDocContained is saveDoc for a _bulk_docs writer goroutine: a panic
// becomes that document's error (the request's recovery cannot reach
// another goroutine). It returns the new revision, or rev on failure.
func (s *Server) saveDocContained(ctx context.Context, u *User, e *docEdit, rev string) (newRev string, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Str("doc_id", e.id).Interface("panic", fmt.Sprint(p)).Msg("document write panicked")
			newRev, err = rev, fmt.Errorf("frontend: document write panicked: %v", p)
		}
	}()
	newRev, err = s.saveDoc(ctx, u, e)
	if err != nil {
		return rev, err
	}
	return newRev, nil
}

// handleRevsDiff answers POST /{db}/_revs_diff: for each document, the
// revisions of the request it lacks and its possible ancestors; documents
// that lack none are left out.
func (s *Server) handleRevsDiff(w http.ResponseWriter, r *http.Request) {
	db, body, ok := s.bulkRequest(w, r)
	if !ok {
		return
	}
	revs := make(map[string][]string, len(body))
	for id, v := range body {
		list, isList := v.([]any)
		if !isList {
			writeError(w, badRequest("_revs_diff takes {\"docid\": [revisions], …}"))
			return
		}
		for _, x := range list {
			rev, _ := x.(string)
			if _, _, ok := repdb.ParseRev(rev); !ok {
				writeError(w, badRequest("Invalid rev format"))
				return
			}
			revs[id] = append(revs[id], rev)
		}
	}
	diff, err := s.store.RevsDiff(r.Context(), db, revs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make(map[string]any, len(diff))
	for id, d := range diff {
		entry := map[string]any{"missing": d.Missing}
		if len(d.PossibleAncestors) > 0 {
			entry["possible_ancestors"] = d.PossibleAncestors
		}
		out[id] = entry
	}
	writeJSON(w, http.StatusOK, out)
}

// handleBulkGet answers POST /{db}/_bulk_get with JSON (CouchDB also
// sends multipart to clients that prefer it): for each {"id", "rev"?}
// asked, the revision (or, without rev, every leaf) as {"ok": doc}, or
// {"error": {id, rev, error, reason}}. revs, latest and the conflicts
// options come from the query string or the body; attachments are
// ignored (fdbrep stores none). Documents are read at most 50 per
// transaction (repdb.ReadRevs).
func (s *Server) handleBulkGet(w http.ResponseWriter, r *http.Request) {
	db, body, ok := s.bulkRequest(w, r)
	if !ok {
		return
	}
	p := params{q: r.URL.Query()}
	o, latest := readOptsOf(&p), p.bool("latest")
	if p.err != nil {
		writeError(w, p.err)
		return
	}
	if b, _ := body["revs"].(bool); b {
		o.revs = true
	}
	if b, _ := body["latest"].(bool); b {
		latest = true
	}
	docs, isList := body["docs"].([]any)
	if !isList {
		writeError(w, badRequest("Missing JSON list of 'docs'."))
		return
	}
	type item struct {
		id, rev string
		err     map[string]any // a request refused before reading
	}
	items := make([]item, len(docs))
	var reqs []repdb.RevRequest
	for i, d := range docs {
		m, _ := d.(map[string]any)
		id, _ := m["id"].(string)
		rev, _ := m["rev"].(string)
		items[i] = item{id: id, rev: rev}
		errEntry := func(tag, reason string) map[string]any {
			e := map[string]any{"id": nil, "rev": nil, "error": tag, "reason": reason}
			if id != "" {
				e["id"] = id
			}
			if rev != "" {
				e["rev"] = rev
			}
			return map[string]any{"error": e}
		}
		switch {
		case m == nil:
			items[i].err = errEntry("bad_request", "document must be a JSON object")
		case id == "":
			items[i].err = errEntry("bad_request", "document id missed")
		case checkDocID(id) != nil:
			he := checkDocID(id)
			items[i].err = errEntry(he.err, he.reason)
		case rev != "" && !validRev(rev):
			items[i].err = errEntry("bad_request", "Invalid rev format")
		default:
			q := repdb.OpenRevsQuery{All: rev == "", Latest: latest}
			if rev != "" {
				q.Revs = []string{rev}
			}
			reqs = append(reqs, repdb.RevRequest{ID: id, Query: q})
		}
	}
	res, err := s.store.ReadRevs(r.Context(), db, reqs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	u := userFrom(r)
	results := make([]map[string]any, len(items))
	for i, it := range items {
		var out []map[string]any
		missing := func(rev string) map[string]any {
			return map[string]any{"error": map[string]any{"id": it.id, "rev": rev, "error": "not_found", "reason": "missing"}}
		}
		switch {
		case it.err != nil:
			out = []map[string]any{it.err}
		default:
			rr := res[0]
			res = res[1:]
			for _, rv := range rr.Revs {
				if rv.Doc != nil {
					out = append(out, map[string]any{"ok": s.renderDoc(rv.Doc, u, o)})
				} else {
					out = append(out, missing(rv.Missing))
				}
			}
			if len(out) == 0 {
				out = []map[string]any{missing(cmp.Or(it.rev, "undefined"))}
			}
		}
		results[i] = map[string]any{"id": it.id, "docs": out}
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
}

// validRev reports a revision "N-id" ParseRev accepts.
func validRev(rev string) bool {
	_, _, ok := repdb.ParseRev(rev)
	return ok
}

// handleEnsureFullCommit answers POST /{db}/_ensure_full_commit, which
// replicators send to targets: every acknowledged write is durable
// already.
func (s *Server) handleEnsureFullCommit(w http.ResponseWriter, r *http.Request) {
	db, ok := dbFromPath(w, r)
	if !ok || !s.dbUser(w, r, db) {
		return
	}
	if _, err := s.store.Info(r.Context(), db); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"ok": true, "instance_start_time": "0"})
}
