package frontend

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/repdb"
)

// Timing of waiting feeds (longpoll, continuous, eventsource).
const (
	// LongpollTimeoutDefault is how long a waiting feed waits for a change
	// when the client names no timeout, and the cap of its timeout
	// parameter (CouchDB's changes_timeout): without a heartbeat, a feed
	// idle this long ends with its last sequence.
	LongpollTimeoutDefault = 60 * time.Second
	// MinHeartbeat is the shortest heartbeat interval served; shorter
	// ones are raised to it, so that a client cannot make the node write
	// newlines in a loop.
	MinHeartbeat = 100 * time.Millisecond
)

// changesRequest is a parsed _changes request.
type changesRequest struct {
	feed      string // normal, longpoll, continuous or eventsource
	q         repdb.ChangesQuery
	opts      readOpts // of included documents
	timeout   time.Duration
	heartbeat time.Duration // 0: none
}

// parseChanges reads a _changes request's parameters and, for POST, its
// body's doc_ids.
func (s *Server) parseChanges(w http.ResponseWriter, r *http.Request) (*changesRequest, *httpError) {
	q := r.URL.Query()
	cr := &changesRequest{timeout: LongpollTimeoutDefault}
	if r.Method == http.MethodPost {
		b, he := readBody(w, r, s.opts.MaxRequestSize)
		if he != nil {
			return nil, he
		}
		body, he := decodeObjectOrEmpty(b, s.opts.MaxJSONDepth)
		if he != nil {
			return nil, he
		}
		if ids, ok := body["doc_ids"]; ok {
			list, ok := ids.([]any)
			if !ok {
				return nil, badRequest("`doc_ids` must be an array")
			}
			cr.q.DocIDs = map[string]bool{}
			for _, id := range list {
				if s, ok := id.(string); ok {
					cr.q.DocIDs[s] = true
				}
			}
		}
	}
	switch f := q.Get("filter"); f {
	case "":
	case "_doc_ids":
		if cr.q.DocIDs == nil {
			var list []string
			if err := json.Unmarshal([]byte(q.Get("doc_ids")), &list); err != nil {
				return nil, badRequest("`doc_ids` must be a JSON array of document ids")
			}
			cr.q.DocIDs = map[string]bool{}
			for _, id := range list {
				cr.q.DocIDs[id] = true
			}
		}
	default:
		return nil, badRequest("fdbrep supports only filter=_doc_ids on replicator databases")
	}
	switch style := q.Get("style"); style {
	case "", "main_only":
	case "all_docs":
		cr.q.AllLeaves = true
	default:
		return nil, badRequest("Supported `style` values: main_only, all_docs")
	}
	var he *httpError
	if cr.feed, cr.timeout, cr.heartbeat, he = feedParams(q); he != nil {
		return nil, he
	}
	p := params{q: q}
	cr.q.Limit, cr.q.IncludeDocs, cr.q.Descending = p.int("limit", -1), p.bool("include_docs"), p.bool("descending")
	cr.opts = readOptsOf(&p)
	cr.q.Conflicts = cr.opts.conflicts || cr.opts.deletedConflicts
	if p.err != nil {
		return nil, p.err
	}
	if cr.q.Descending && cr.feed != "normal" {
		return nil, badRequest("descending is only supported with feed=normal")
	}
	cr.q.Since = q.Get("since")
	return cr, nil
}

// feedParams reads a waiting feed's parameters, as _changes has them:
// feed (normal, longpoll, continuous or eventsource; live is continuous),
// timeout (LongpollTimeoutDefault when absent) and heartbeat (0: none; true
// is LongpollTimeoutDefault; at least MinHeartbeat).
func feedParams(q url.Values) (feed string, timeout, heartbeat time.Duration, he *httpError) {
	switch feed = q.Get("feed"); feed {
	case "", "normal":
		feed = "normal"
	case "live":
		feed = "continuous"
	case "longpoll", "continuous", "eventsource":
	default:
		return "", 0, 0, badRequest("Supported `feed` types: normal, continuous, live, longpoll, eventsource")
	}
	if timeout, he = msParam(q, "timeout", LongpollTimeoutDefault); he != nil {
		return "", 0, 0, he
	}
	switch hb := q.Get("heartbeat"); hb {
	case "", "false":
	case "true":
		heartbeat = LongpollTimeoutDefault
	default:
		if heartbeat, he = msParam(q, "heartbeat", 0); he != nil {
			return "", 0, 0, he
		}
		heartbeat = max(heartbeat, MinHeartbeat)
	}
	return feed, timeout, heartbeat, nil
}

// msParam reads a duration in milliseconds, capped at
// LongpollTimeoutDefault; def when absent.
func msParam(q map[string][]string, name string, def time.Duration) (time.Duration, *httpError) {
	v := ""
	if l := q[name]; len(l) > 0 {
		v = l[0]
	}
	if v == "" {
		return def, nil
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 0 {
		return 0, queryParseError(fmt.Sprintf("Invalid value for integer: %q", v))
	}
	return min(time.Duration(ms)*time.Millisecond, LongpollTimeoutDefault), nil
}

// decodeObjectOrEmpty is decodeObject, with a blank body as {}.
func decodeObjectOrEmpty(b []byte, depth int) (map[string]any, *httpError) {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return decodeObject(b, depth)
		}
	}
	return map[string]any{}, nil
}

// handleChanges answers GET and POST /{db}/_changes: feed=normal (one
// JSON object, streamed), longpoll (the same once a change comes),
// continuous (one JSON row per line, heartbeats as blank lines, a
// {"last_seq"} line when it ends) and eventsource (server-sent events).
// The feed is read page by page (repdb.Store.Feed), never in one
// transaction; waiting feeds wait on the database's watch, and their
// connections may be closed to admit others when the node is full.
func (s *Server) handleChanges(w http.ResponseWriter, r *http.Request) {
	db, ok := dbFromPath(w, r)
	if !ok || !s.dbUser(w, r, db) {
		return
	}
	cr, he := s.parseChanges(w, r)
	if he != nil {
		writeError(w, he)
		return
	}
	if cr.q.Since == "now" {
		info, err := s.store.Info(r.Context(), db)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		cr.q.Since = info.UpdateSeq
	}
	fw := &feedWriter{w: w, r: r, s: s}
	u := userFrom(r)
	switch cr.feed {
	case "normal":
		s.normalFeed(fw, db, cr, u)
	case "longpoll":
		evictableDuring(r, func() {
			if cr.q.Limit != 0 && fw.wait(db, cr, "\n") == waitStopped {
				return
			}
			s.normalFeed(fw, db, cr, u) // the change, or an empty reply after the timeout
		})
	default:
		evictableDuring(r, func() { s.streamFeed(fw, db, cr, u) })
	}
}

// changeRow renders a row of the feed for u.
func (s *Server) changeRow(c repdb.Change, u *User, cr *changesRequest) map[string]any {
	changes := make([]map[string]string, len(c.Revs))
	for i, rev := range c.Revs {
		changes[i] = map[string]string{"rev": rev}
	}
	row := map[string]any{"seq": c.Seq, "id": c.ID, "changes": changes}
	if c.Deleted {
		row["deleted"] = true
	}
	if cr.q.IncludeDocs {
		if c.Doc != nil {
			row["doc"] = s.renderDoc(c.Doc, u, cr.opts)
		} else {
			row["doc"] = map[string]any{"_id": c.ID, "_rev": c.Rev, "_deleted": true}
		}
	}
	return row
}

// normalFeed streams a feed=normal reply: {"results": [rows],
// "last_seq", "pending"}.
func (s *Server) normalFeed(fw *feedWriter, db string, cr *changesRequest, u *User) {
	n := 0
	last, err := s.store.Feed(fw.r.Context(), db, cr.q, func(c repdb.Change) error {
		sep := ",\n"
		if n == 0 {
			sep = "{\"results\":[\n"
		}
		n++
		return fw.row(sep, s.changeRow(c, u, cr), "")
	})
	if err != nil {
		fw.fail(err)
		return
	}
	head := "\n"
	if n == 0 {
		head = "{\"results\":["
	}
	lastJSON, _ := json.Marshal(last)
	fw.end(head + "],\n\"last_seq\":" + string(lastJSON) + ",\"pending\":0}\n")
}

// streamFeed serves feed=continuous and feed=eventsource: the rows after
// since, then each change as it comes, until the limit, the client
// leaving, or (without a heartbeat) timeout of silence.
func (s *Server) streamFeed(fw *feedWriter, db string, cr *changesRequest, u *User) {
	events := cr.feed == "eventsource"
	fw.contentType = "application/json"
	beat := "\n"
	if events {
		fw.contentType, beat = "text/event-stream", "event: heartbeat\ndata: \n\n"
	}
	q := cr.q
	for done := false; !done; {
		n := 0
		last, err := s.store.Feed(fw.r.Context(), db, q, func(c repdb.Change) error {
			n++
			row := s.changeRow(c, u, cr)
			if events {
				seq, _ := json.Marshal(c.Seq)
				return fw.row("data: ", row, "\nid: "+string(seq)+"\n\n")
			}
			return fw.row("", row, "\n")
		})
		if err != nil {
			fw.fail(err)
			return
		}
		q.Since = last
		if q.Limit > 0 {
			q.Limit = max(q.Limit-n, 0)
		}
		if q.Limit == 0 {
			break // the limit is reached
		}
		switch fw.wait(db, &changesRequest{q: q, timeout: cr.timeout, heartbeat: cr.heartbeat}, beat) {
		case waitStopped:
			return
		case waitTimeout:
			done = true
		}
	}
	if events {
		fw.end("")
		return
	}
	lastJSON, _ := json.Marshal(q.Since)
	fw.end("{\"last_seq\":" + string(lastJSON) + ",\"pending\":0}\n")
}

// feedWriter writes a streamed reply: headers on the first write (so an
// error before any row is still a proper error reply), rows through a
// buffer flushed whenever the feed waits.
type feedWriter struct {
	w           http.ResponseWriter
	r           *http.Request
	s           *Server
	contentType string // "" means application/json
	buf         *bufio.Writer
	wb          kv.Backoff // after failed watches
}

func (f *feedWriter) started() bool { return f.buf != nil }

func (f *feedWriter) start() {
	if f.buf != nil {
		return
	}
	h := f.w.Header()
	h.Set("Content-Type", cmp.Or(f.contentType, "application/json"))
	h.Set("Cache-Control", "must-revalidate")
	if f.contentType == "text/event-stream" {
		h.Set("Cache-Control", "no-cache")
	}
	f.w.WriteHeader(http.StatusOK)
	f.buf = bufio.NewWriterSize(f.w, 32<<10)
}

// row writes prefix, v as JSON and suffix.
func (f *feedWriter) row(prefix string, v any, suffix string) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f.start()
	f.buf.WriteString(prefix)
	f.buf.Write(b)
	_, err = f.buf.WriteString(suffix)
	return err
}

// flush sends what is buffered.
func (f *feedWriter) flush() error {
	f.start()
	if err := f.buf.Flush(); err != nil {
		return err
	}
	return http.NewResponseController(f.w).Flush()
}

// end writes the reply's last bytes.
func (f *feedWriter) end(s string) {
	f.start()
	f.buf.WriteString(s)
	_ = f.flush()
}

// fail answers err: as an error reply when nothing was sent yet, else by
// cutting the connection, so the client sees a broken reply rather than
// a complete one.
func (f *feedWriter) fail(err error) {
	if !f.started() {
		f.s.fail(f.w, f.r, err)
		return
	}
	_ = f.buf.Flush()
	panic(http.ErrAbortHandler)
}

// Outcomes of feedWriter.wait.
const (
	waitChanged = iota // a change follows the since sequence
	waitTimeout        // the timeout passed in silence (no heartbeat)
	waitStopped        // the client left, a write or the store failed
)

// wait waits, through the database's watch, until a change follows
// cr.q.Since, writing beat every cr.heartbeat meanwhile (when not 0);
// without a heartbeat it gives up after cr.timeout. A store error before
// anything was sent is answered.
func (f *feedWriter) wait(db string, cr *changesRequest, beat string) int {
	ctx := f.r.Context()
	if f.started() && f.flush() != nil {
		return waitStopped
	}
	var timeout, ticks <-chan time.Time
	if cr.heartbeat > 0 {
		t := time.NewTicker(cr.heartbeat)
		defer t.Stop()
		ticks = t.C
	} else {
		t := time.NewTimer(cr.timeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		watches, err := f.s.store.WaitChange(ctx, db, cr.q.Since)
		if err != nil {
			if !f.started() && ctx.Err() == nil {
				f.s.fail(f.w, f.r, err)
			}
			return waitStopped
		}
		if watches == nil {
			return waitChanged
		}
		fired, outcome := f.waitWatches(ctx, watches, ticks, timeout, beat)
		if outcome != waitChanged {
			return outcome
		}
		if _, err := fired.Get(); err != nil {
			// A failed watch (too many watches, say): look again after a
			// backoff rather than spin; a longpoll still waits for a
			// change, not for the watch's failure.
			delay, ok := f.wb.Next(err)
			if !ok {
				delay = kv.BackoffMaxDefault
			}
			if outcome := f.pause(ctx, delay, ticks, timeout, beat); outcome != waitChanged {
				return outcome
			}
			continue
		}
		f.wb.Reset()
	}
}

// waitWatches waits for one of watches, writing beat at each tick.
func (f *feedWriter) waitWatches(ctx context.Context, watches []kv.FutureNil, ticks, timeout <-chan time.Time, beat string) (kv.FutureNil, int) {
	defer func() {
		for _, w := range watches {
			w.Cancel()
		}
	}()
	for {
		select {
		case <-watches[0].Done():
			return watches[0], waitChanged
		case <-watches[1].Done():
			return watches[1], waitChanged
		case <-ticks:
			if !f.beat(beat) {
				return nil, waitStopped
			}
		case <-timeout:
			return nil, waitTimeout
		case <-ctx.Done():
			return nil, waitStopped
		}
	}
}

// pause waits for delay, writing beat at each tick: waitChanged (look
// again) once it has passed.
func (f *feedWriter) pause(ctx context.Context, delay time.Duration, ticks, timeout <-chan time.Time, beat string) int {
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return waitChanged
		case <-ticks:
			if !f.beat(beat) {
				return waitStopped
			}
		case <-timeout:
			return waitTimeout
		case <-ctx.Done():
			return waitStopped
		}
	}
}

// beat writes a heartbeat; false when the client is gone.
func (f *feedWriter) beat(beat string) bool {
	f.start()
	f.buf.WriteString(beat)
	return f.flush() == nil
}
