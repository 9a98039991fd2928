package frontend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
)

func parseNonNeg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a non-negative integer")
	}
	return n, nil
}

func urlUnescape(s string) (string, error) { return url.PathUnescape(s) }

func queryParseError(reason string) *httpError {
	return newError(http.StatusBadRequest, "query_parse_error", reason)
}

// intParam parses an integer query parameter (def when absent).
func intParam(q url.Values, name string, def int) (int, *httpError) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, queryParseError(fmt.Sprintf("Invalid value for integer: %q", v))
	}
	if n < 0 {
		return 0, queryParseError(fmt.Sprintf("%s must be a non-negative integer", name))
	}
	return n, nil
}

func boolParam(q url.Values, name string) (bool, *httpError) {
	switch v := q.Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, queryParseError(fmt.Sprintf("Invalid boolean parameter: %q", v))
	}
}

// params reads query parameters with intParam, boolParam and
// jsonStringParam, keeping the first error (err) so a handler checks once.
type params struct {
	q   url.Values
	err *httpError
}

func (p *params) int(name string, def int) int {
	v, he := intParam(p.q, name, def)
	p.keep(he)
	return v
}

func (p *params) bool(name string) bool {
	v, he := boolParam(p.q, name)
	p.keep(he)
	return v
}

func (p *params) jsonString(names ...string) *string {
	v, he := jsonStringParam(p.q, names...)
	p.keep(he)
	return v
}

func (p *params) keep(he *httpError) {
	if p.err == nil {
		p.err = he
	}
}

// jsonStringParam parses a JSON-encoded string parameter (startkey="a").
func jsonStringParam(q url.Values, names ...string) (*string, *httpError) {
	for _, name := range names {
		v, ok := q[name]
		if !ok {
			continue
		}
		var s string
		if err := json.Unmarshal([]byte(v[0]), &s); err != nil {
			return nil, queryParseError(fmt.Sprintf("Invalid JSON for %s: document ids are JSON strings, e.g. %s=\"abc\"", name, name))
		}
		return &s, nil
	}
	return nil, nil
}

// dbFromPath returns the decoded, checked database name of the request.
func dbFromPath(w http.ResponseWriter, r *http.Request) (string, bool) {
	name, he := pathVar(r, "db")
	if he == nil {
		he = checkDBName(name)
	}
	if he != nil {
		writeError(w, he)
		return "", false
	}
	return name, true
}

func (s *Server) handleDB(w http.ResponseWriter, r *http.Request) {
	name, he := pathVar(r, "db")
	if he != nil {
		writeError(w, he)
		return
	}
	if strings.HasPrefix(name, "_") && name != repdb.ReplicatorDB {
		writeError(w, badRequest("Unknown or unsupported endpoint /"+name))
		return
	}
	if he := checkDBName(name); he != nil {
		writeError(w, he)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if !s.dbUser(w, r, name) {
			return
		}
		info, err := s.store.Info(r.Context(), name)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"db_name": name, "update_seq": info.UpdateSeq, "purge_seq": 0,
			"doc_count": info.DocCount, "doc_del_count": info.DelCount,
			"sizes":               map[string]int{"file": 0, "external": 0, "active": 0},
			"disk_format_version": 8, "compact_running": false,
			"cluster":             map[string]int{"q": 1, "n": 1, "w": 1, "r": 1},
			"instance_start_time": "0", "uuid": info.UUID,
		})
	case http.MethodPut:
		if !requireAdmin(w, r) {
			return
		}
		if err := s.createDB(r.Context(), name); err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("Location", "/"+url.PathEscape(name))
		writeJSON(w, http.StatusCreated, map[string]bool{"ok": true})
	case http.MethodDelete:
		if !requireAdmin(w, r) {
			return
		}
		if r.URL.Query().Has("rev") {
			writeError(w, badRequest("You tried to DELETE a database with a ?rev= parameter. Did you mean to DELETE a document instead?"))
			return
		}
		err := s.store.DeleteDB(r.Context(), name, func(tr kv.Transaction) error {
			if s.opts.Replicator != nil {
				return s.opts.Replicator.DBDeleted(r.Context(), tr, name)
			}
			return nil
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	case http.MethodPost:
		if !s.dbUser(w, r, name) {
			return
		}
		if !isJSONType(r.Header.Get("Content-Type")) {
			writeError(w, errJSONContentType)
			return
		}
		body, ok := s.readDocBody(w, r)
		if !ok {
			return
		}
		id, _ := body["_id"].(string)
		if _, has := body["_id"]; has && id == "" {
			writeError(w, newError(http.StatusBadRequest, "illegal_docid", "Document id must be a non-empty string"))
			return
		}
		if id == "" {
			id = newDocID() // outside the transaction: retries keep the id
		}
		e, he := editFromBody(r, name, id, body, true)
		if he != nil {
			writeError(w, he)
			return
		}
		s.writeDoc(w, r, e, http.StatusCreated)
	}
}

func (s *Server) handleAllDocs(w http.ResponseWriter, r *http.Request) {
	db, ok := dbFromPath(w, r)
	if !ok || !s.dbUser(w, r, db) {
		return
	}
	q := r.URL.Query()
	p := params{q: q}
	adq := repdb.AllDocsQuery{
		Limit: p.int("limit", -1), Skip: p.int("skip", 0), Descending: p.bool("descending"),
		StartKey: p.jsonString("startkey", "start_key"), EndKey: p.jsonString("endkey", "end_key"),
	}
	includeDocs, o := p.bool("include_docs"), readOptsOf(&p)
	adq.Conflicts = includeDocs && (o.conflicts || o.deletedConflicts)
	var keys []string
	he := p.err
	if he == nil {
		keys, he = s.allDocsKeys(w, r)
	}
	if he != nil {
		writeError(w, he)
		return
	}
	if keys != nil {
		s.allDocsByKeys(w, r, db, keys, includeDocs, o)
		return
	}
	u := userFrom(r)
	var rows []map[string]any
	total, err := s.store.AllDocs(r.Context(), db, adq, func(d *repdb.Doc) error {
		rows = append(rows, s.allDocsRow(d, u, includeDocs, o))
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rows == nil {
		rows = []map[string]any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_rows": total, "offset": adq.Skip, "rows": rows})
}

// allDocsKeys returns the ids asked for by keys: the query parameter (a
// JSON array) or, for POST, the body's "keys"; nil when none.
func (s *Server) allDocsKeys(w http.ResponseWriter, r *http.Request) ([]string, *httpError) {
	bad := queryParseError("`keys` must be a JSON array of document ids")
	var raw []byte
	if v, ok := r.URL.Query()["keys"]; ok {
		raw = []byte(v[0])
	}
	if r.Method == http.MethodPost {
		b, he := readBody(w, r, s.opts.MaxRequestSize)
		if he != nil {
			return nil, he
		}
		body, he := decodeObject(b, s.opts.MaxJSONDepth)
		if he != nil {
			return nil, he
		}
		if k, ok := body["keys"]; ok {
			if raw, _ = json.Marshal(k); raw == nil {
				return nil, bad
			}
		}
	}
	if raw == nil {
		return nil, nil
	}
	keys := []string{}
	if json.Unmarshal(raw, &keys) != nil {
		return nil, bad
	}
	return keys, nil
}

// allDocsByKeys answers _all_docs for the given ids, in their order, as
// CouchDB does: a row per id, "error": "not_found" for ids never written,
// "deleted": true (and a null doc) for deleted ones.
func (s *Server) allDocsByKeys(w http.ResponseWriter, r *http.Request, db string, keys []string, includeDocs bool, o readOpts) {
	u := userFrom(r)
	docs, err := s.lookup(r.Context(), u, db, keys, includeDocs && (o.conflicts || o.deletedConflicts))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := s.store.Info(r.Context(), db)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows := make([]map[string]any, 0, len(keys))
	for i, d := range docs {
		if d == nil {
			rows = append(rows, map[string]any{"key": keys[i], "error": "not_found"})
			continue
		}
		rows = append(rows, s.allDocsRow(d, u, includeDocs, o))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_rows": info.DocCount, "offset": nil, "rows": rows})
}

// allDocsRow is a document's _all_docs row, CouchDB's shape; a deleted
// one (only listed by keys) says so and has a null doc.
func (s *Server) allDocsRow(d *repdb.Doc, u *User, includeDocs bool, o readOpts) map[string]any {
	value := map[string]any{"rev": d.Rev}
	row := map[string]any{"id": d.ID, "key": d.ID, "value": value}
	switch {
	case d.Deleted:
		value["deleted"] = true
		if includeDocs {
			row["doc"] = nil
		}
	case includeDocs:
		o.revs, o.revsInfo = false, false // not offered by _all_docs
		row["doc"] = s.renderDoc(d, u, o)
	}
	return row
}
