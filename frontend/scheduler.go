package frontend

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/repdb"
)

var errNoScheduler = newError(http.StatusServiceUnavailable, "service_unavailable", "this node runs no replication scheduler")

// schedulerFor checks that the request comes from a server admin and that
// a Scheduler is wired in, and answers the request when not.
func (s *Server) schedulerFor(w http.ResponseWriter, r *http.Request) bool {
	if !requireAdmin(w, r) {
		return false
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return false
	}
	return true
}

// answer writes a Scheduler's reply.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, body any, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// pageParams parses limit and skip as CouchDB's scheduler endpoints do
// (limit -1 when absent: the Scheduler's default page).
func pageParams(q url.Values) (limit, skip int, he *httpError) {
	limit, skip = -1, 0
	for _, p := range []struct {
		name string
		dst  *int
	}{{"limit", &limit}, {"skip", &skip}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, 0, queryParseError(p.name + " must be an integer")
		}
		if n < 0 {
			return 0, 0, queryParseError(p.name + " not in range of [0,infinity]")
		}
		*p.dst = n
	}
	return limit, skip, nil
}

func (s *Server) handleReplicate(w http.ResponseWriter, r *http.Request) {
	if !requireUser(w, r) {
		return
	}
	if !isJSONType(r.Header.Get("Content-Type")) {
		writeError(w, errJSONContentType)
		return
	}
	b, he := readBody(w, r, s.opts.MaxRequestSize)
	if he != nil {
		writeError(w, he)
		return
	}
	if he := checkObject(b, s.opts.MaxJSONDepth); he != nil {
		writeError(w, he)
		return
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return
	}
	res, err := s.opts.Scheduler.Replicate(r.Context(), b, userFrom(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status, body := replicateReply(res)
	writeJSON(w, status, body)
}

func (s *Server) handleActiveTasks(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	if s.opts.Scheduler == nil {
		writeJSON(w, http.StatusOK, []any{})
		return
	}
	resp, err := s.opts.Scheduler.ActiveTasks(r.Context())
	s.answer(w, r, resp, err)
}

func (s *Server) handleSchedulerJobs(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	limit, skip, he := pageParams(r.URL.Query())
	if he != nil {
		writeError(w, he)
		return
	}
	resp, err := s.opts.Scheduler.SchedulerJobs(r.Context(), limit, skip)
	s.answer(w, r, resp, err)
}

func (s *Server) handleSchedulerJob(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	id, he := pathVar(r, "id")
	if he != nil {
		writeError(w, he)
		return
	}
	// A '+' in a job id may arrive as a space (form encoding), as CouchDB
	// accepts.
	id = strings.ReplaceAll(id, " ", "+")
	resp, err := s.opts.Scheduler.SchedulerJob(r.Context(), id)
	s.answer(w, r, resp, err)
}

func (s *Server) handleSchedulerDocs(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	s.schedulerDocs(w, r, "")
}

// schedulerDocs serves a _scheduler/docs listing of db ("" for all).
func (s *Server) schedulerDocs(w http.ResponseWriter, r *http.Request, db string) {
	q := r.URL.Query()
	limit, skip, he := pageParams(q)
	if he != nil {
		writeError(w, he)
		return
	}
	var states []string
	if v := q.Get("states"); v != "" {
		for _, st := range strings.Split(v, ",") {
			if st = strings.TrimSpace(st); st != "" {
				states = append(states, st)
			}
		}
	}
	resp, err := s.opts.Scheduler.SchedulerDocs(r.Context(), db, states, limit, skip)
	s.answer(w, r, resp, err)
}

// handleSchedulerDocsPath serves /_scheduler/docs/{db} and
// /_scheduler/docs/{db}/{docid}. The database name may arrive with its '/'
// escaped or not ("/_scheduler/docs/other/_replicator/doc1" works), so the
// path is split at the first "_replicator" segment.
func (s *Server) handleSchedulerDocsPath(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/_scheduler/docs/")
	segs := strings.Split(rest, "/")
	var dec []string
	for _, seg := range segs {
		d, err := urlUnescape(seg)
		if err != nil {
			writeError(w, badRequest("Invalid path"))
			return
		}
		dec = append(dec, d)
	}
	db, docID := "", ""
	for i, seg := range dec {
		if seg == repdb.ReplicatorDB || strings.HasSuffix(seg, "/"+repdb.ReplicatorDB) {
			db = strings.Join(dec[:i+1], "/")
			docID = strings.Join(dec[i+1:], "/")
			break
		}
	}
	if db == "" || !repdb.IsReplicatorDB(db) {
		writeError(w, badRequest("Invalid path: the database must be _replicator or end in /_replicator"))
		return
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return
	}
	if docID == "" {
		s.schedulerDocs(w, r, db)
		return
	}
	resp, err := s.opts.Scheduler.SchedulerDoc(r.Context(), db, docID)
	s.answer(w, r, resp, err)
}
