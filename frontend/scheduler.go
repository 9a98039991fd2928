package frontend

import (
	"net/http"
	"strings"
)

var errNoScheduler = newError(http.StatusServiceUnavailable, "service_unavailable", "this node runs no replication scheduler")

// answer writes a Scheduler's reply.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, status int, body any, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, status, body)
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
	body, he := decodeObject(b, s.opts.MaxJSONDepth)
	if he != nil {
		writeError(w, he)
		return
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return
	}
	st, resp, err := s.opts.Scheduler.Replicate(r.Context(), body, userFrom(r))
	s.answer(w, r, st, resp, err)
}

func (s *Server) handleActiveTasks(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	if s.opts.Scheduler == nil {
		writeJSON(w, http.StatusOK, []any{})
		return
	}
	st, resp, err := s.opts.Scheduler.ActiveTasks(r.Context())
	s.answer(w, r, st, resp, err)
}

func (s *Server) handleSchedulerJobs(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return
	}
	st, resp, err := s.opts.Scheduler.SchedulerJobs(r.Context(), r.URL.Query())
	s.answer(w, r, st, resp, err)
}

func (s *Server) handleSchedulerJob(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	id, he := pathVar(r, "id")
	if he != nil {
		writeError(w, he)
		return
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return
	}
	// A '+' in a job id may arrive as a space (form encoding), as CouchDB
	// accepts.
	id = strings.ReplaceAll(id, " ", "+")
	st, resp, err := s.opts.Scheduler.SchedulerJob(r.Context(), id)
	s.answer(w, r, st, resp, err)
}

func (s *Server) handleSchedulerDocs(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return
	}
	st, resp, err := s.opts.Scheduler.SchedulerDocs(r.Context(), "", r.URL.Query())
	s.answer(w, r, st, resp, err)
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
		if seg == ReplicatorDB || strings.HasSuffix(seg, "/"+ReplicatorDB) {
			db = strings.Join(dec[:i+1], "/")
			docID = strings.Join(dec[i+1:], "/")
			break
		}
	}
	if db == "" || !IsReplicatorDB(db) {
		writeError(w, badRequest("Invalid path: the database must be _replicator or end in /_replicator"))
		return
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return
	}
	var (
		st   int
		resp any
		err  error
	)
	if docID == "" {
		st, resp, err = s.opts.Scheduler.SchedulerDocs(r.Context(), db, r.URL.Query())
	} else {
		st, resp, err = s.opts.Scheduler.SchedulerDoc(r.Context(), db, docID)
	}
	s.answer(w, r, st, resp, err)
}
