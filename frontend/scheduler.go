package frontend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/repdb"
)

var errNoScheduler = newError(http.StatusServiceUnavailable, "service_unavailable", "this node runs no replication scheduler")

// schedulerFor checks that the request comes from a user (anonymous
// users get CouchDB's 401 "You are not a server admin.") and that a
// Scheduler is wired in, and answers the request when not. Server admins
// see every job; other users see their own (see handleSchedulerJobs).
func (s *Server) schedulerFor(w http.ResponseWriter, r *http.Request) bool {
	if userFrom(r).Anonymous() {
		writeError(w, errNotServerAdmin)
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

// pageParams parses a scheduler listing's page: limit and skip as
// CouchDB's scheduler endpoints do (limit -1 when absent: the
// Scheduler's default page), and fdbrep's start_key (alias startkey, as
// for views): the first row's key, JSON, a string or an array of strings.
func pageParams(q url.Values) (api.PageQuery, *httpError) {
	pq := api.PageQuery{Limit: -1}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"limit", &pq.Limit}, {"skip", &pq.Skip}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return api.PageQuery{}, queryParseError(p.name + " must be an integer")
		}
		if n < 0 {
			return api.PageQuery{}, queryParseError(p.name + " not in range of [0,infinity]")
		}
		*p.dst = n
	}
	for _, name := range []string{"startkey", "start_key"} {
		v, ok := q[name]
		if !ok {
			continue
		}
		var one string
		if err := json.Unmarshal([]byte(v[0]), &one); err == nil {
			pq.StartKey = []string{one}
		} else if err := json.Unmarshal([]byte(v[0]), &pq.StartKey); err != nil || len(pq.StartKey) == 0 {
			return api.PageQuery{}, queryParseError(fmt.Sprintf(`Invalid JSON for %s: a JSON string or a non-empty array of strings, e.g. %s=["_replicator","doc1"]`, name, name))
		}
		break
	}
	return pq, nil
}

// readObject reads the body of a user's request to the scheduler: a JSON
// object (Content-Type application/json) within the request limits. It
// answers the request itself and returns false otherwise.
func (s *Server) readObject(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if !requireUser(w, r) {
		return nil, false
	}
	if !isJSONType(r.Header.Get("Content-Type")) {
		writeError(w, errJSONContentType)
		return nil, false
	}
	b, he := readBody(w, r, s.opts.MaxRequestSize)
	if he == nil {
		he = checkObject(b, s.opts.MaxJSONDepth)
	}
	if he != nil {
		writeError(w, he)
		return nil, false
	}
	return b, true
}

func (s *Server) handleReplicate(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readObject(w, r)
	if !ok {
		return
	}
	if s.opts.Scheduler == nil {
		writeError(w, errNoScheduler)
		return
	}
	res, err := s.opts.Scheduler.Replicate(r.Context(), b, userFrom(r).Viewer())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status, body := replicateReply(res)
	writeJSON(w, status, body)
}

// handleActiveTasks lists the running replications: all of them for
// server admins, a user's own for other users (CouchDB's _active_tasks is
// for server admins only).
func (s *Server) handleActiveTasks(w http.ResponseWriter, r *http.Request) {
	u := userFrom(r)
	if u.Anonymous() {
		writeError(w, errNotServerAdmin)
		return
	}
	if s.opts.Scheduler == nil {
		writeJSON(w, http.StatusOK, []any{})
		return
	}
	resp, err := s.opts.Scheduler.ActiveTasks(r.Context(), u.Viewer())
	s.answer(w, r, resp, err)
}

// handleSchedulerJobs lists the unfinished jobs: every job for server
// admins, and for other users the jobs they own, chosen before the page
// is cut (CouchDB's _scheduler is for server admins only).
func (s *Server) handleSchedulerJobs(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	pq, he := pageParams(r.URL.Query())
	if he != nil {
		writeError(w, he)
		return
	}
	resp, err := s.opts.Scheduler.SchedulerJobs(r.Context(), userFrom(r).Viewer(), pq)
	s.answer(w, r, resp, err)
}

func (s *Server) handleSchedulerJob(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	id, ok := jobIDVar(w, r)
	if !ok {
		return
	}
	resp, err := s.opts.Scheduler.SchedulerJob(r.Context(), userFrom(r).Viewer(), id)
	s.answer(w, r, resp, err)
}

// jobIDVar is the path's job id, or false once the error is written. A
// '+' in a job id may arrive as a space (form encoding), as CouchDB
// accepts.
func jobIDVar(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, he := pathVar(r, "id")
	if he != nil {
		writeError(w, he)
		return "", false
	}
	return strings.ReplaceAll(id, " ", "+"), true
}

// handleRetryJob ends a crashing job's backoff at once (fdbrep's
// addition): for server admins, and for the job's owner.
func (s *Server) handleRetryJob(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	id, ok := jobIDVar(w, r)
	if !ok {
		return
	}
	resp, err := s.opts.Scheduler.RetryJob(r.Context(), userFrom(r).Viewer(), id)
	s.answer(w, r, resp, err)
}

// handlePauseJob pauses (or resumes) a POST /_replicate replication
// (fdbrep's own; see Plane.PauseJob): server admins, the job's owner.
func (s *Server) handlePauseJob(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.schedulerFor(w, r) {
			return
		}
		id, ok := jobIDVar(w, r)
		if !ok {
			return
		}
		f := s.opts.Scheduler.ResumeJob
		if pause {
			f = s.opts.Scheduler.PauseJob
		}
		resp, err := f(r.Context(), userFrom(r).Viewer(), id)
		s.answer(w, r, resp, err)
	}
}

// handleSchedulerDocs lists the documents' jobs of every replicator
// database for server admins. For other users it is what the path means
// in CouchDB: the _replicator database's, for its members.
func (s *Server) handleSchedulerDocs(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	if !userFrom(r).IsAdmin() {
		if !s.dbUser(w, r, repdb.ReplicatorDB) {
			return
		}
		s.schedulerDocs(w, r, repdb.ReplicatorDB)
		return
	}
	s.schedulerDocs(w, r, "")
}

// schedulerDocs serves a _scheduler/docs listing of db ("" for all).
func (s *Server) schedulerDocs(w http.ResponseWriter, r *http.Request, db string) {
	q := r.URL.Query()
	pq, he := pageParams(q)
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
	resp, err := s.opts.Scheduler.SchedulerDocs(r.Context(), db, states, pq)
	for i, d := range resp.Docs {
		resp.Docs[i] = docRowFor(d, userFrom(r))
	}
	s.answer(w, r, resp, err)
}

// handleSchedulerDocsPath serves /_scheduler/docs/{db} and
// /_scheduler/docs/{db}/{docid}. The database name may arrive with its '/'
// escaped or not ("/_scheduler/docs/other/_replicator/doc1" works), so the
// path is split at the first "_replicator" segment. As in CouchDB 4.x,
// members of the database read its rows, whoever owns them, each as they
// read its document (docRowFor).
func (s *Server) handleSchedulerDocsPath(w http.ResponseWriter, r *http.Request) {
	if userFrom(r).Anonymous() {
		writeError(w, errNotServerAdmin)
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
	if !s.dbUser(w, r, db) {
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
	s.answer(w, r, docRowFor(resp, userFrom(r)), err)
}
