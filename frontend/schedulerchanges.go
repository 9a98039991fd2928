package frontend

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/api"
)

// handleSchedulerChanges serves GET /_scheduler/_changes: the
// replications' state changes, with _changes' conventions (since, limit,
// feed=normal|longpoll|continuous|eventsource, timeout, heartbeat) and
// filters by database, doc_id and states. A server admin sees every
// replication's changes, another user their own.
func (s *Server) handleSchedulerChanges(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	q := r.URL.Query()
	feed, timeout, heartbeat, he := feedParams(q)
	if he != nil {
		writeError(w, he)
		return
	}
	cq := api.ChangesQuery{Since: q.Get("since"), Database: q.Get("database"), DocID: q.Get("doc_id")}
	if id := r.Header.Get("Last-Event-ID"); feed == "eventsource" && id != "" {
		// An EventSource reconnecting: from the id of the last event it
		// got (the seq, as JSON), as CouchDB does.
		var seq string
		if json.Unmarshal([]byte(id), &seq) != nil {
			seq = id
		}
		cq.Since = seq
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, newError(http.StatusBadRequest, "query_parse_error", "Invalid value for positive integer: "+strconv.Quote(v)))
			return
		}
		cq.Limit = n
	}
	for _, st := range strings.Split(q.Get("states"), ",") {
		if st = strings.TrimSpace(st); st != "" {
			cq.States = append(cq.States, st)
		}
	}
	user := userFrom(r).Viewer()
	if feed == "normal" || feed == "longpoll" {
		if feed == "longpoll" {
			cq.Wait = timeout
		}
		page, err := s.opts.Scheduler.SchedulerChanges(r.Context(), user, cq)
		s.answer(w, r, page, err)
		return
	}
	// Continuous and eventsource: each change as it comes, a heartbeat
	// (when asked) while none does, until the limit, the client leaving,
	// or timeout of silence.
	fw := &feedWriter{w: w, r: r, s: s}
	events := feed == "eventsource"
	fw.contentType = "application/json"
	beat := "\n"
	if events {
		fw.contentType, beat = "text/event-stream", "event: heartbeat\ndata: \n\n"
	}
	left := cq.Limit
	silent := time.Now()
	for {
		cq.Wait = heartbeat
		if heartbeat == 0 {
			cq.Wait = max(timeout-time.Since(silent), time.Millisecond)
		}
		page, err := s.opts.Scheduler.SchedulerChanges(r.Context(), user, cq)
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			fw.fail(err)
			return
		}
		cq.Since = page.LastSeq
		for _, row := range page.Results {
			var werr error
			if events {
				seq, _ := json.Marshal(row.Seq)
				werr = fw.row("data: ", row, "\nid: "+string(seq)+"\n\n")
			} else {
				werr = fw.row("", row, "\n")
			}
			if werr != nil {
				return
			}
		}
		if len(page.Results) > 0 {
			silent = time.Now()
			if left > 0 {
				if left -= len(page.Results); left <= 0 {
					break
				}
				cq.Limit = left
			}
		} else if heartbeat > 0 {
			fw.start()
			fw.buf.WriteString(beat)
		} else if time.Since(silent) >= timeout {
			break
		}
		if fw.flush() != nil {
			return
		}
	}
	if events {
		fw.end("")
		return
	}
	lastJSON, _ := json.Marshal(cq.Since)
	fw.end("{\"last_seq\":" + string(lastJSON) + "}\n")
}
