package engine

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// Defaults of the per-replication tunables (CouchDB's [replicator] defaults).
const (
	// WorkerProcessesDefault is the number of concurrent workers. More
	// workers overlap fetching and writing; each holds up to
	// WorkerBatchSize changes in memory.
	WorkerProcessesDefault = 4
	// WorkerBatchSizeDefault is the number of changes rows a worker
	// replicates at a time (one _revs_diff, _bulk_get and _bulk_docs each).
	// Larger batches mean fewer requests but coarser checkpoints.
	WorkerBatchSizeDefault = 500
	// HTTPConnectionsDefault caps concurrent requests per endpoint.
	HTTPConnectionsDefault = 20
	// ConnectionTimeoutDefault is the socket inactivity timeout; continuous
	// feeds ask the source to end after a third of it.
	ConnectionTimeoutDefault = 30 * time.Second
	// RetriesPerRequestDefault is how often a failed request is retried
	// (250 ms doubling) before the run fails.
	RetriesPerRequestDefault = 5
	// CheckpointIntervalDefault is the time between checkpoints. Shorter
	// intervals redo less work after a crash but cost four requests each.
	CheckpointIntervalDefault = 30 * time.Second
	// MissingDocRetryDefault is missing_doc_retry_msec: the wait before a
	// revision the source's feed listed but its open_revs reported
	// missing (a cluster's copies not yet in step) is asked for again.
	MissingDocRetryDefault = 2 * time.Second
	// MaxDocIDLengthDefault is max_document_id_length: 0, no limit
	// (CouchDB's "infinity").
	MaxDocIDLengthDefault = 0
)

// Upper bounds of the per-replication tunables and of the sizes a
// specification may carry. A replication's memory and goroutines grow with
// its tunables, and any user who may write a _replicator document chooses
// them, so they are capped well above any useful setting: a value beyond a
// maximum is refused by Validate (a 400 or 403 at write time) instead of
// being allowed to exhaust the node that runs it.
const (
	// WorkerProcessesMax caps worker_processes (goroutines per run).
	WorkerProcessesMax = 64
	// WorkerBatchSizeMax caps worker_batch_size (changes per batch).
	WorkerBatchSizeMax = 10_000
	// WorkerRowsMax caps worker_processes × worker_batch_size: the changes
	// rows a run's workers may hold at once.
	WorkerRowsMax = 100_000
	// HTTPConnectionsMax caps http_connections (connections per endpoint).
	HTTPConnectionsMax = 1_000
	// ConnectionTimeoutMax caps connection_timeout.
	ConnectionTimeoutMax = time.Hour
	// RetriesPerRequestMax caps retries_per_request.
	RetriesPerRequestMax = 100
	// CheckpointIntervalMax caps checkpoint_interval.
	CheckpointIntervalMax = time.Hour
	// SinceSeqMaxBytes caps the JSON size of since_seq (CouchDB sequences
	// of clustered databases run to a few kilobytes).
	SinceSeqMaxBytes = 16 << 10
	// DocIDsMax caps the number of doc_ids.
	DocIDsMax = 10_000
	// HeadersMax caps the custom headers of one endpoint.
	HeadersMax = 64
)

// Replication is a replication specification (a _replicator document or a
// POST /_replicate body, as the replicator package parses it). Zero tunables
// mean their defaults, which Start fills in; Validate checks everything.
type Replication struct {
	Source couch.Endpoint
	Target couch.Endpoint

	// Continuous keeps replicating new changes until stopped.
	Continuous bool
	// CreateTarget creates the target database (PUT, with
	// CreateTargetParams as query string) before replicating.
	CreateTarget       bool
	CreateTargetParams json.RawMessage

	// At most one of DocIDs, Selector and Filter selects what to replicate.
	// DocIDs is the doc_ids filter when not nil (an empty list replicates
	// nothing), as written: each id is percent-decoded as CouchDB decodes
	// it (see unquote) before it is used.
	DocIDs   []string
	Selector json.RawMessage
	// Filter is "ddoc/name" (a filter function in the source's
	// _design/ddoc) or a built-in filter such as "_view" (QueryParams
	// must then name the view: {"view": "ddoc/view"}).
	Filter      string
	QueryParams json.RawMessage

	// SinceSeq starts the replication at this source sequence when no
	// checkpoint is found.
	SinceSeq json.RawMessage
	// WinningRevsOnly replicates only winning revisions (no conflicts).
	WinningRevsOnly bool
	// SkipDeleted replicates no deletion of a document the target does not
	// have (skip_deleted): a new replica starts without the source's
	// tombstones, and deletions of documents the target holds still
	// replicate.
	SkipDeleted bool
	// FollowPurges purges on the target the revisions purged on the source
	// (follow_purges), read from the source's _purged_infos (CouchDB 3.4
	// and later) at the run's start and at each checkpoint, so purged
	// documents are not resurrected: see purges.go.
	FollowPurges bool

	// DisableCheckpoints is use_checkpoints: false — no checkpoint
	// documents are written (existing ones are still read).
	DisableCheckpoints bool
	// DisableBulkGet is use_bulk_get: false.
	DisableBulkGet bool

	CheckpointInterval time.Duration // CheckpointIntervalDefault when 0
	WorkerProcesses    int           // WorkerProcessesDefault when 0
	WorkerBatchSize    int           // WorkerBatchSizeDefault when 0
	HTTPConnections    int           // HTTPConnectionsDefault when 0
	ConnectionTimeout  time.Duration // ConnectionTimeoutDefault when 0
	// RetriesPerRequest is RetriesPerRequestDefault when 0; use a negative
	// value for no retries.
	RetriesPerRequest int

	// SourceProxy and TargetProxy route each side's requests through an
	// http, https or socks5 proxy (the "proxy" field sets both).
	SourceProxy *url.URL
	TargetProxy *url.URL

	// SocketOptions are socket_options, the TCP options of both
	// endpoints' connections (nil: Go's defaults). The replication's own
	// replace the node's as a whole, as in CouchDB.
	SocketOptions *couch.SocketOptions

	// The node's settings of its runs, which a replication cannot set
	// (CouchDB's [replicator] keys of the same names).
	//
	// RequestTimeout is request_timeout: how long a request that is not
	// a changes feed may take in all (0: no limit; see
	// couch.Options.RequestTimeout).
	RequestTimeout time.Duration
	// MissingDocRetry is missing_doc_retry_msec
	// (MissingDocRetryDefault when 0).
	MissingDocRetry time.Duration
	// MaxDocIDLength is max_document_id_length: documents whose id is
	// longer (in bytes) are not replicated, each counted in
	// doc_write_failures, as CouchDB counts them (0: no limit).
	MaxDocIDLength int

	// UserCtx is the user the replication runs as (informational for
	// remote endpoints).
	UserCtx UserCtx
}

// UserCtx identifies the user a replication runs for.
type UserCtx struct {
	Name  string   `json:"name,omitempty"`
	Roles []string `json:"roles,omitempty"`
}

// WithDefaults returns rep with every zero tunable set to its default
// (a negative RetriesPerRequest, NoRetries, becomes 0): what a run uses.
func (rep Replication) WithDefaults() Replication {
	rep.CheckpointInterval = cmp.Or(rep.CheckpointInterval, CheckpointIntervalDefault)
	rep.WorkerProcesses = cmp.Or(rep.WorkerProcesses, WorkerProcessesDefault)
	rep.WorkerBatchSize = cmp.Or(rep.WorkerBatchSize, WorkerBatchSizeDefault)
	rep.HTTPConnections = cmp.Or(rep.HTTPConnections, HTTPConnectionsDefault)
	rep.ConnectionTimeout = cmp.Or(rep.ConnectionTimeout, ConnectionTimeoutDefault)
	rep.MissingDocRetry = cmp.Or(rep.MissingDocRetry, MissingDocRetryDefault)
	switch {
	case rep.RetriesPerRequest == 0:
		rep.RetriesPerRequest = RetriesPerRequestDefault
	case rep.RetriesPerRequest < 0:
		rep.RetriesPerRequest = 0
	}
	return rep
}

// invalidSpec is the error for a specification that breaks CouchDB's
// rules or a tunable's bounds: it wraps ErrInvalidSpec, followed by format
// applied to args.
func invalidSpec(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, args...)...)
}

// Validate checks the specification with CouchDB's rules and messages.
// Errors wrap ErrInvalidSpec.
func (rep Replication) Validate() error {
	if rep.Source.URL == nil {
		return invalidSpec("Missing replicator database")
	}
	if rep.Target.URL == nil {
		return invalidSpec("Missing replicator database")
	}
	for _, p := range []*url.URL{rep.SourceProxy, rep.TargetProxy} {
		if p == nil {
			continue
		}
		if (p.Scheme != "http" && p.Scheme != "https" && p.Scheme != "socks5") || p.Host == "" {
			return invalidSpec("Invalid proxy url")
		}
	}
	if rep.SocketOptions != nil {
		if err := rep.SocketOptions.Validate(); err != nil {
			return invalidSpec("parameter `socket_options`: %s", strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": socket_options: "))
		}
	}
	n := 0
	if rep.DocIDs != nil {
		n++
	}
	if len(rep.Selector) > 0 {
		n++
	}
	if rep.Filter != "" {
		n++
	}
	if n > 1 {
		return invalidSpec("`doc_ids`,`filter`,`selector` are mutually exclusive")
	}
	if len(rep.Selector) > 0 && !isJSONObject(rep.Selector) {
		return invalidSpec("parameter `selector` must be a JSON object")
	}
	if len(rep.Selector) > 0 {
		// Mango's rules, which the replication id's normalization applies.
		if sel, err := ejson(rep.Selector, false); err == nil {
			if _, err := normalizeSelector(sel); err != nil {
				return err
			}
		}
	}
	if len(rep.QueryParams) > 0 && !isJSONObject(rep.QueryParams) && string(rep.QueryParams) != "null" {
		return invalidSpec("parameter `query_params` must be an object")
	}
	if len(rep.CreateTargetParams) > 0 && !isJSONObject(rep.CreateTargetParams) && string(rep.CreateTargetParams) != "null" {
		return invalidSpec("parameter `create_target_params` must be a JSON object")
	}
	if len(rep.SinceSeq) > 0 && !json.Valid(rep.SinceSeq) {
		return invalidSpec("parameter `since_seq` must be JSON")
	}
	if len(rep.SinceSeq) > SinceSeqMaxBytes {
		return invalidSpec("parameter `since_seq` is larger than %d bytes", SinceSeqMaxBytes)
	}
	if len(rep.DocIDs) > DocIDsMax {
		return invalidSpec("parameter `doc_ids` has more than %d ids", DocIDsMax)
	}
	for _, ep := range []struct {
		name string
		h    map[string][]string
	}{{"source", rep.Source.Headers}, {"target", rep.Target.Headers}} {
		if len(ep.h) > HeadersMax {
			return invalidSpec("`%s` has more than %d headers", ep.name, HeadersMax)
		}
	}
	for _, id := range rep.DocIDs {
		if id == "" {
			return invalidSpec("parameter `doc_ids` must not contain empty ids")
		}
	}
	switch {
	case rep.Filter == "":
	case rep.Filter == "_view":
		var qp struct {
			View string `json:"view"`
		}
		_ = json.Unmarshal(rep.QueryParams, &qp)
		if parts := strings.Split(qp.View, "/"); len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			return invalidSpec("Invalid `view` parameter.")
		}
	case strings.HasPrefix(rep.Filter, "_"):
	default:
		if parts := strings.Split(rep.Filter, "/"); len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			return invalidSpec("Invalid filter. Must match `ddocname/filtername`.")
		}
	}
	return rep.ValidateTunables()
}

// ValidateTunables checks the tunables alone (zero ones count as their
// defaults) against their bounds; errors wrap ErrInvalidSpec.
func (rep Replication) ValidateTunables() error {
	d := rep.WithDefaults()
	for _, c := range Tunables {
		v := c.get(d)
		if v < c.Min {
			return invalidSpec("parameter `%s` must be at least %d", c.Name, c.Min)
		}
		if v > c.Max {
			return invalidSpec("parameter `%s` must be at most %d", c.Name, c.Max)
		}
	}
	if d.WorkerProcesses*d.WorkerBatchSize > WorkerRowsMax {
		return invalidSpec("`worker_processes` × `worker_batch_size` must be at most %d", WorkerRowsMax)
	}
	return nil
}

// Tunable describes one integer tunable of a specification: its name in
// a _replicator document and its bounds, in the document's units
// (milliseconds for durations).
type Tunable struct {
	Name     string
	Min, Max int64
	get      func(Replication) int64
}

// Tunables lists the integer tunables with their bounds; Validate checks
// them after filling defaults, and parsers use them to refuse a value
// before it is converted.
var Tunables = []Tunable{
	{"worker_processes", 1, WorkerProcessesMax, func(r Replication) int64 { return int64(r.WorkerProcesses) }},
	{"worker_batch_size", 1, WorkerBatchSizeMax, func(r Replication) int64 { return int64(r.WorkerBatchSize) }},
	{"http_connections", 1, HTTPConnectionsMax, func(r Replication) int64 { return int64(r.HTTPConnections) }},
	{"connection_timeout", 1, ConnectionTimeoutMax.Milliseconds(), func(r Replication) int64 { return r.ConnectionTimeout.Milliseconds() }},
	{"retries_per_request", 0, RetriesPerRequestMax, func(r Replication) int64 { return int64(r.RetriesPerRequest) }},
	{"checkpoint_interval", 1, CheckpointIntervalMax.Milliseconds(), func(r Replication) int64 { return r.CheckpointInterval.Milliseconds() }},
}

// docIDs returns doc_ids as CouchDB's replicator uses them (in the
// changes request and the replication id): each id unquoted, sorted,
// without duplicates; nil when the replication has no doc_ids.
func (rep Replication) docIDs() []string {
	if rep.DocIDs == nil {
		return nil
	}
	ids := make([]string, 0, len(rep.DocIDs))
	for _, id := range rep.DocIDs {
		ids = append(ids, unquote(id))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// unquote decodes a doc_ids entry as CouchDB 3.5 does (couch_httpd:unquote:
// mochiweb_util:unquote, [chttpd] decode_plus_to_space's default), so that
// ids written percent-encoded ("_design%2Ffoo") name their documents: %XX
// (two hex digits) is that byte and + is a space; anything else, a % that
// no two hex digits follow included, stays as it is.
func unquote(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b.WriteByte(' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// userFilter reports whether Filter names a design document filter.
func (rep Replication) userFilter() bool {
	return rep.Filter != "" && !strings.HasPrefix(rep.Filter, "_")
}

func isJSONObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// ReplicationID computes the replication's base id (the checkpoint
// document is _local/<base>) and full id (base plus "+continuous" and
// "+create_target" as applicable) as CouchDB 3.5 does, from its version 4
// inputs: the server UUID; each endpoint's user name (not its password),
// host, port (http and https alike), path and custom headers; the filter
// — doc_ids (decoded, sorted, unique), the selector (normalized as Mango
// normalizes it, keys sorted), a built-in filter's name with its
// query_params, or a design document filter's source code (filterCode,
// trimmed as CouchDB trims it) with its query_params (as written);
// winning_revs_only; and since_seq, which CouchDB hashes after 3.5 and 3.5
// does not (see CheckpointIDs). Tunables, create_target_params and
// use_checkpoints do not change the id.
func ReplicationID(rep Replication, serverUUID, filterCode string) (base, full string, err error) {
	return replicationIDWith(rep, serverUUID, filterCode, idOptions{})
}
