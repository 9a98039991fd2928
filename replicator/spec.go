package replicator

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"net/textproto"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// EndpointSpec is a normalized replication endpoint as stored in job data:
// the URL without credentials (trailing slash added unless it has a query
// string), the Basic credentials taken from auth.basic, the URL or an
// Authorization: Basic header (in that order of precedence), and the other
// headers.
type EndpointSpec struct {
	URL      string            `json:"url"`
	Headers  map[string]string `json:"headers,omitempty"`
	Username string            `json:"username,omitempty"`
	Password string            `json:"password,omitempty"`
	Proxy    string            `json:"proxy,omitempty"`
	// Token is the endpoint's token credentials (couch.TokenAuth), nil
	// for none; its secret is sealed as passwords are.
	Token *TokenSpec `json:"token,omitempty"`
}

// TokenSpec is the storable form of couch.TokenAuth.
type TokenSpec struct {
	URL          string `json:"url"`
	APIKey       string `json:"api_key,omitempty"`
	ClientID     string `json:"client_id,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
	Scope        string `json:"scope,omitempty"`
}

// Redacted returns the URL as monitoring shows it: user kept, password
// replaced by *****.
func (e EndpointSpec) Redacted() string {
	u, err := url.Parse(e.URL)
	if err != nil {
		return ""
	}
	return couch.RedactURL(u, e.Username)
}

// Spec is a parsed, validated replication: what a _replicator document or
// a POST /_replicate body asks for, in a form that survives a JSON round
// trip through job data. Engine converts it for the protocol engine.
type Spec struct {
	Source EndpointSpec `json:"source"`
	Target EndpointSpec `json:"target"`

	Continuous         bool            `json:"continuous,omitempty"`
	CreateTarget       bool            `json:"create_target,omitempty"`
	CreateTargetParams json.RawMessage `json:"create_target_params,omitempty"`
	// DocIDs is doc_ids as written (percent-encoded ids are decoded by
	// the engine); nil when there is none. An empty list, which
	// replicates nothing and has its own replication id, as in CouchDB,
	// is kept as one through job data (omitzero).
	DocIDs          []string        `json:"doc_ids,omitzero"`
	Selector        json.RawMessage `json:"selector,omitempty"`
	Filter          string          `json:"filter,omitempty"`
	QueryParams     json.RawMessage `json:"query_params,omitempty"`
	SinceSeq        json.RawMessage `json:"since_seq,omitempty"`
	WinningRevsOnly bool            `json:"winning_revs_only,omitempty"`
	// SkipDeleted is fdbrep's skip_deleted (engine.Replication.SkipDeleted).
	SkipDeleted bool `json:"skip_deleted,omitempty"`
	// FollowPurges is fdbrep's follow_purges (engine.Replication.FollowPurges).
	FollowPurges bool `json:"follow_purges,omitempty"`
	// Paused is a document's "paused": true, which keeps its replication
	// from running (StatePaused); not part of the replication's identity.
	Paused bool `json:"paused,omitempty"`
	// Schedule makes a one-shot replication of a document run again at
	// each of its periods (schedule.go); nil for none.
	Schedule *RepSchedule `json:"schedule,omitempty"`
	// Template makes a document's replication a template: one
	// replication per database of a server (template.go); nil for none.
	Template *TemplateSpec `json:"template,omitempty"`
	// UseCheckpoints and UseBulkGet are use_checkpoints and use_bulk_get,
	// nil when the replication leaves them to the node's defaults.
	UseCheckpoints *bool `json:"use_checkpoints,omitempty"`
	UseBulkGet     *bool `json:"use_bulk_get,omitempty"`

	// Tunables; zero means the engine's default. Durations in ms.
	CheckpointInterval int64 `json:"checkpoint_interval,omitempty"`
	WorkerProcesses    int   `json:"worker_processes,omitempty"`
	WorkerBatchSize    int   `json:"worker_batch_size,omitempty"`
	HTTPConnections    int   `json:"http_connections,omitempty"`
	ConnectionTimeout  int64 `json:"connection_timeout,omitempty"`
	RetriesPerRequest  int   `json:"retries_per_request,omitempty"`
	// SocketOptions is socket_options in CouchDB's syntax, normalized
	// ("" leaves the node's default).
	SocketOptions string `json:"socket_options,omitempty"`

	// UserCtx is the document's user_ctx (informational).
	UserCtx *UserCtx `json:"user_ctx,omitempty"`
}

// Replication returns the engine's form of the specification, validated
// with the engine's rules and bounds; errors wrap ErrBadRequest with the
// reason for the user. Job data is checked with it before a node runs it,
// so data written by an older version or by hand is held to today's
// bounds.
func (s *Spec) Replication() (engine.Replication, error) {
	rep, err := s.Engine()
	if err == nil {
		err = rep.Validate()
	}
	if err != nil {
		return engine.Replication{}, newReason(ErrBadRequest, "%s", engineReason(err))
	}
	return rep, nil
}

// Engine returns the engine's form of the specification, unvalidated.
func (s *Spec) Engine() (engine.Replication, error) {
	src, err := s.Source.engine()
	if err != nil {
		return engine.Replication{}, err
	}
	tgt, err := s.Target.engine()
	if err != nil {
		return engine.Replication{}, err
	}
	rep := engine.Replication{
		Source: src, Target: tgt,
		Continuous: s.Continuous, CreateTarget: s.CreateTarget, CreateTargetParams: s.CreateTargetParams,
		DocIDs: s.DocIDs, Selector: s.Selector, Filter: s.Filter, QueryParams: s.QueryParams,
		SinceSeq: s.SinceSeq, WinningRevsOnly: s.WinningRevsOnly, SkipDeleted: s.SkipDeleted, FollowPurges: s.FollowPurges,
		DisableCheckpoints: s.UseCheckpoints != nil && !*s.UseCheckpoints,
		DisableBulkGet:     s.UseBulkGet != nil && !*s.UseBulkGet,
		CheckpointInterval: time.Duration(s.CheckpointInterval) * time.Millisecond,
		WorkerProcesses:    s.WorkerProcesses, WorkerBatchSize: s.WorkerBatchSize,
		HTTPConnections:   s.HTTPConnections,
		ConnectionTimeout: time.Duration(s.ConnectionTimeout) * time.Millisecond,
		RetriesPerRequest: s.RetriesPerRequest,
	}
	if s.UserCtx != nil {
		rep.UserCtx = engine.UserCtx{Name: s.UserCtx.Name, Roles: s.UserCtx.Roles}
	}
	if s.SocketOptions != "" {
		o, err := couch.ParseSocketOptions(s.SocketOptions)
		if err != nil {
			return engine.Replication{}, newReason(ErrBadRequest, "`socket_options`: %s", socketReason(err))
		}
		rep.SocketOptions = &o
	}
	if rep.SourceProxy, err = proxyURL(s.Source.Proxy); err != nil {
		return engine.Replication{}, err
	}
	if rep.TargetProxy, err = proxyURL(s.Target.Proxy); err != nil {
		return engine.Replication{}, err
	}
	return rep, nil
}

// proxyURL parses a proxy the parser has already validated; "" means none.
func proxyURL(p string) (*url.URL, error) {
	if p == "" {
		return nil, nil
	}
	u, err := url.Parse(p)
	if err != nil {
		return nil, newReason(ErrBadRequest, "proxy has an invalid url")
	}
	return u, nil
}

func (e EndpointSpec) engine() (couch.Endpoint, error) {
	raw, _ := json.Marshal(e.URL)
	ep, err := couch.ParseEndpoint(raw)
	if err != nil {
		return couch.Endpoint{}, err
	}
	ep.Username, ep.Password = e.Username, e.Password
	if t := e.Token; t != nil {
		ep.Token = &couch.TokenAuth{URL: t.URL, APIKey: t.APIKey, ClientID: t.ClientID, ClientSecret: t.ClientSecret, Scope: t.Scope}
	}
	ep.Headers = make(map[string][]string, len(e.Headers))
	for k, v := range e.Headers {
		ep.Headers[textproto.CanonicalMIMEHeaderKey(k)] = []string{v}
	}
	return ep, nil
}

// UserFilter reports whether the replication uses a design document filter
// (whose code is part of the replication id and may change).
func (s *Spec) UserFilter() bool { return s.Filter != "" && !strings.HasPrefix(s.Filter, "_") }

// SameReplication reports whether two specifications describe the same
// replication (CouchDB's compare_reps): endpoints with their credentials
// and headers, and every option. Key order and doc_ids order do not
// matter.
func SameReplication(a, b *Spec) bool {
	if a == nil || b == nil {
		return a == b
	}
	na, nb := a.normalized(), b.normalized()
	return reflect.DeepEqual(na, nb)
}

// SameRequest is SameReplication for POST /_replicate, whose credentials
// are sealed afresh by each request: sealed values match each other, as
// CouchDB matches a transient replication by its id, which no password
// is part of.
func SameRequest(a, b *Spec) bool {
	if a == nil || b == nil {
		return a == b
	}
	mask := func(s *Spec) *Spec {
		c := s.clone()
		c.eachSecret(func(_, _ string, v *string) {
			if seal.IsSealed(*v) {
				*v = seal.Prefix
			}
		})
		return c
	}
	return SameReplication(mask(a), mask(b))
}

func (s *Spec) normalized() Spec {
	n := *s
	n.DocIDs = slices.Clone(s.DocIDs) // nil stays nil, empty stays empty
	sort.Strings(n.DocIDs)
	n.Selector = canonicalJSON(s.Selector)
	n.QueryParams = canonicalJSON(s.QueryParams)
	n.CreateTargetParams = canonicalJSON(s.CreateTargetParams)
	n.SinceSeq = canonicalJSON(s.SinceSeq)
	if len(n.Source.Headers) == 0 {
		n.Source.Headers = nil
	}
	if len(n.Target.Headers) == 0 {
		n.Target.Headers = nil
	}
	return n
}

// canonicalJSON re-encodes raw with sorted object keys (nil for absent or
// null).
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	b, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return raw
	}
	return b
}

// TransientJobID is the job id of a POST /_replicate replication: a hash of
// the server UUID, both endpoints (URL, user name, headers; never the
// password), the user, the options that change the replication id, and
// the filter as given (its code is not fetched).
func TransientJobID(serverUUID string, s *Spec, user string) string {
	type ep struct {
		URL     string
		User    string
		Headers [][2]string
	}
	mk := func(e EndpointSpec) ep {
		out := ep{URL: e.URL, User: e.Username}
		for k, v := range e.Headers {
			out.Headers = append(out.Headers, [2]string{strings.ToLower(k), v})
		}
		sort.Slice(out.Headers, func(i, j int) bool { return out.Headers[i][0] < out.Headers[j][0] })
		return out
	}
	n := s.normalized()
	parts := []any{serverUUID, mk(s.Source), mk(s.Target), user}
	opts := ""
	if s.Continuous {
		opts += "+continuous"
	}
	if s.CreateTarget {
		opts += "+create_target"
	}
	parts = append(parts, opts, n.DocIDs, n.Selector, n.Filter, n.QueryParams, n.SinceSeq, s.WinningRevsOnly)
	if s.SkipDeleted {
		parts = append(parts, "skip_deleted") // only when set: the ids of others stay
	}
	for _, e := range []EndpointSpec{s.Source, s.Target} {
		if t := e.Token; t != nil { // who the token is for, as User for a password
			parts = append(parts, "token", t.URL, t.ClientID)
		}
	}
	if s.FollowPurges {
		parts = append(parts, "follow_purges")
	}
	b, _ := json.Marshal(parts)
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// DocJobID is the job id of a _replicator document: the database
// instance's UUID and the document id.
func DocJobID(dbUUID, docID string) string { return dbUUID + "|" + docID }
