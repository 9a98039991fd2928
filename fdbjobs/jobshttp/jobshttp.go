package jobshttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
)

// Bounds and defaults of the feed's parameters, in milliseconds where a
// request gives them.
const (
	// TimeoutDefault is how long a longpoll read waits for an event, and a
	// continuous one streams, without a timeout parameter.
	TimeoutDefault = time.Minute
	// TimeoutMax is the longest timeout a request may ask.
	TimeoutMax = time.Hour
	// HeartbeatDefault is how often a continuous read sends a newline while
	// idle, without a heartbeat parameter; HeartbeatMin the shortest one a
	// request may ask.
	HeartbeatDefault = 10 * time.Second
	HeartbeatMin     = 100 * time.Millisecond
)

// Options configure the handler.
type Options struct {
	// Logger receives the store's failures, which answers give as 500
	// without their detail; nil discards them.
	Logger *zerolog.Logger
	// Managed are kinds whose jobs and schedules an application of their
	// own manages (fdbrep's replications): the web page shows their
	// counts, jobs and errors but not their arguments (the application
	// shows them itself, its secrets hidden), offers no action on them,
	// and refuses one (403).
	Managed []string
}

// New returns the handler of c's kinds.
func New(c *fdbjobs.Client, opts Options) http.Handler {
	log := zerolog.Nop()
	if opts.Logger != nil {
		log = *opts.Logger
	}
	h := &handler{c: c, log: log, opts: opts, csrf: http.NewCrossOriginProtection()}
	h.csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusForbidden, "forbidden", "cross-origin request refused") // as the other errors, not Go's plain text
	}))
	mux := http.NewServeMux()
	h.routeUI(mux)
	mux.HandleFunc("GET /{$}", h.kinds)
	mux.HandleFunc("GET /{kind}", h.kind)
	mux.HandleFunc("GET /{kind}/_feed", h.feed)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such path: GET /, /{kind} or /{kind}/_feed")
	})
	return mux
}

type handler struct {
	c    *fdbjobs.Client
	log  zerolog.Logger
	opts Options
	csrf *http.CrossOriginProtection // of the web page's actions
}

func (h *handler) kinds(w http.ResponseWriter, r *http.Request) {
	kinds, err := h.c.Types(r.Context(), nil)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"kinds": kinds})
}

func (h *handler) kind(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	// A kind exists when it has a timeout (Types lists it): the counts of
	// any other are zeros, which would hide a misspelt name.
	if _, err := h.c.TypeTimeout(r.Context(), nil, kind); err != nil {
		if errors.Is(err, fdbjobs.ErrNotFound) {
			writeError(w, http.StatusNotFound, "not_found", "no kind "+strconv.Quote(kind)+": GET / lists the kinds")
			return
		}
		h.writeErr(w, err)
		return
	}
	counts, err := h.c.Counts(r.Context(), nil, kind)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	keep, on, err := h.c.FeedKeep(r.Context(), nil, kind)
	if err != nil {
		h.writeErr(w, err)
		return
	}
	var feed any
	if on {
		feed = map[string]any{"keep_seconds": int64(keep / time.Second)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": kind, "counts": counts, "feed": feed})
}

// feedParams are a feed request's parameters, checked.
type feedParams struct {
	since     string
	limit     int
	mode      string
	timeout   time.Duration
	heartbeat time.Duration
}

func parseFeed(r *http.Request) (feedParams, error) {
	q := r.URL.Query()
	p := feedParams{since: q.Get("since"), mode: q.Get("feed"), timeout: TimeoutDefault, heartbeat: HeartbeatDefault}
	switch p.mode {
	case "":
		p.mode = "normal"
	case "normal", "longpoll", "continuous":
	default:
		return p, fmt.Errorf("feed=%q: normal, longpoll or continuous", p.mode)
	}
	ms := func(name string, min, max time.Duration, into *time.Duration) error {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		d := time.Duration(n) * time.Millisecond
		if err != nil || n < 0 || d < min || d > max {
			return fmt.Errorf("%s=%q: milliseconds from %d to %d", name, v, min.Milliseconds(), max.Milliseconds())
		}
		*into = d
		return nil
	}
	if err := ms("timeout", 0, TimeoutMax, &p.timeout); err != nil {
		return p, err
	}
	if err := ms("heartbeat", HeartbeatMin, TimeoutMax, &p.heartbeat); err != nil {
		return p, err
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > fdbjobs.FeedPageMax {
			return p, fmt.Errorf("limit=%q: from 1 to %d", v, fdbjobs.FeedPageMax)
		}
		p.limit = n
	}
	return p, nil
}

func (h *handler) feed(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	p, err := parseFeed(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if p.since == "now" {
		if p.since, err = h.c.FeedEnd(r.Context(), nil, kind); err != nil {
			h.writeErr(w, err)
			return
		}
	}
	switch p.mode {
	case "normal":
		evs, err := h.c.ReadFeed(r.Context(), nil, kind, p.since, p.limit)
		if err != nil {
			h.writeErr(w, err)
			return
		}
		writeResults(w, evs, p.since)
	case "longpoll":
		ctx, cancel := context.WithTimeout(r.Context(), p.timeout)
		defer cancel()
		// The first read answers its errors (no feed, pruned) at once.
		evs, err := h.c.ReadFeed(r.Context(), nil, kind, p.since, p.limit)
		if err == nil && len(evs) == 0 {
			evs, err = h.c.Feed(kind, p.since, p.limit).Next(ctx)
			if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
				evs, err = nil, nil // the timeout: no event came
			}
		}
		if err != nil {
			h.writeErr(w, err)
			return
		}
		writeResults(w, evs, p.since)
	case "continuous":
		h.continuous(w, r, kind, p)
	}
}

// continuous streams kind's events from p.since, one JSON object per line,
// and a newline every p.heartbeat while none comes, for p.timeout, and
// then {"last_seq"}. Errors before the first line are answered with
// their status; later ones end the stream with an error line.
func (h *handler) continuous(w http.ResponseWriter, r *http.Request, kind string, p feedParams) {
	if _, err := h.c.ReadFeed(r.Context(), nil, kind, p.since, 1); err != nil {
		h.writeErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.timeout)
	defer cancel()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "must-revalidate")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	reader := h.c.Feed(kind, p.since, p.limit)
	enc := json.NewEncoder(w)
	for {
		wait, stop := context.WithTimeout(ctx, p.heartbeat)
		evs, err := reader.Next(wait)
		stop()
		switch {
		case err == nil:
			for _, e := range evs {
				if enc.Encode(e) != nil {
					return
				}
			}
		case ctx.Err() != nil: // the timeout, or the client left
			_ = enc.Encode(map[string]string{"last_seq": reader.Seq()})
			_ = rc.Flush()
			return
		case errors.Is(err, context.DeadlineExceeded): // a heartbeat
			if _, werr := w.Write([]byte("\n")); werr != nil {
				return
			}
		default:
			status, tag, reason := classify(err)
			if status == http.StatusInternalServerError {
				h.log.Error().Err(err).Msg("jobshttp: the job store failed")
			}
			_ = enc.Encode(map[string]any{"error": tag, "reason": reason, "status": status, "last_seq": reader.Seq()})
			_ = rc.Flush()
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

func writeResults(w http.ResponseWriter, evs []fdbjobs.FeedEvent, since string) {
	last := since
	if len(evs) > 0 {
		last = evs[len(evs)-1].Seq
	}
	if evs == nil {
		evs = []fdbjobs.FeedEvent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": evs, "last_seq": last})
}

// classify maps the layer's errors to a status, a CouchDB error tag and a
// reason.
func classify(err error) (int, string, string) {
	switch {
	case errors.Is(err, fdbjobs.ErrInvalidArgument):
		return http.StatusBadRequest, "bad_request", err.Error()
	case errors.Is(err, fdbjobs.ErrNoFeed):
		return http.StatusNotFound, "not_found", err.Error()
	case errors.Is(err, fdbjobs.ErrFeedPruned):
		return http.StatusGone, "feed_pruned", err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "timeout", "the request ended before the store answered"
	}
	return http.StatusInternalServerError, "unknown_error", "the job store failed; see the server's log"
}

func (h *handler) writeErr(w http.ResponseWriter, err error) {
	status, tag, reason := classify(err)
	if status == http.StatusInternalServerError {
		h.log.Error().Err(err).Msg("jobshttp: the job store failed")
	}
	writeError(w, status, tag, reason)
}

func writeError(w http.ResponseWriter, status int, tag, reason string) {
	writeJSON(w, status, map[string]string{"error": tag, "reason": reason})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"unknown_error","reason":"response encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "must-revalidate")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
