package soak

import (
	"fmt"
	"strings"
	"time"
)

// soakVersion is one replication the test asked for: a _replicator
// document as one write left it, or one POST /_replicate.
type soakVersion struct {
	key    string // its target database, its own: it names the version in logs and views
	db     string // its replicator database and document ("" for a POST)
	doc    string
	post   *soakPost
	cont   bool
	src    string // "live", "static" (working sources), "missing" or "closed" (failing)
	source string // the CouchDB source database (live and static sources)
	filter string // "", "selector" or "doc_ids"

	created   time.Time // its write acknowledged (a POST: its job added, as logged)
	retired   time.Time // its document updated or deleted, its database deleted, its POST cancelled
	why       string
	completed time.Time // its one-shot run completed (log)
	failed    time.Time // it failed (log)

	open      int // runs open in the logs
	everRan   bool
	runs      int
	lastEnd   time.Time // its last run ended (log), or its process restarted
	endWhy    string
	retryAt   time.Time // its crash's backoff ends
	notBefore time.Time // it waited at a kill: an acceptor may have claimed it, the activity monitor frees it by then
	// killedOpen is the last kill that ended one of its runs: a node logs
	// after its commit, so a one-shot run may have completed in the store
	// without its "completed" (or "failed") line: _scheduler/docs tells,
	// or for a POST's job _scheduler/jobs/{id} while it is retained.
	killedOpen time.Time
	crashes    int
	crashInfo  string
}

func (v *soakVersion) works() bool { return v.src == "live" || v.src == "static" }

// alive reports whether the version should exist and may run.
func (v *soakVersion) alive() bool {
	return !v.created.IsZero() && v.retired.IsZero() && v.completed.IsZero() && v.failed.IsZero()
}

func (v *soakVersion) String() string {
	var b strings.Builder
	b.WriteString(v.key)
	if v.post != nil {
		fmt.Fprintf(&b, " (POST #%d", v.post.n)
	} else {
		fmt.Fprintf(&b, " (%s/%s", v.db, v.doc)
	}
	if v.cont {
		b.WriteString(", continuous")
	} else {
		b.WriteString(", one-shot")
	}
	fmt.Fprintf(&b, ", source %s", v.src)
	if v.filter != "" {
		b.WriteString(", " + v.filter)
	}
	b.WriteString(")")
	return b.String()
}

// soakRun is a run of a version on a node, from its log lines.
type soakRun struct {
	v     *soakVersion
	job   string
	node  string
	repID string // from its start line: a document's versions share its job id
	start time.Time
}

// soakOverlap is a start of a version on one node while another node's
// run of it was open in the logs: allowed only if that run's end line
// comes within soakLag.
type soakOverlap struct {
	older *soakRun
	node  string
	at    time.Time
	ended time.Time
}

// soakPost is a POST /_replicate and its client.
type soakPost struct {
	n         int
	v         *soakVersion
	body      map[string]any
	sent      time.Time
	answered  time.Time
	status    int
	answer    string
	cut       bool // the connection broke: a kill happened while it waited
	cancelled time.Time
	// expect is the line its answer implies (the job "completed",
	// "started" or "failed"), until the logs have it.
	expect string
}

type soakAnswer struct {
	p      *soakPost
	status int
	raw    []byte
	err    error
	at     time.Time
}

// soakLimit is a max_jobs set at a time.
type soakLimit struct {
	at time.Time
	n  int
}
