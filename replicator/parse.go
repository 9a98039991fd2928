package replicator

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// UserCtx is the user on whose behalf a request is made (api.User).
type UserCtx = api.User

// Request is a parsed POST /_replicate body: a replication, or a cancel
// naming the replication by its specification or by id.
type Request struct {
	Spec   *Spec  // nil for a cancel by id
	Cancel bool   // "cancel": true
	ID     string // "replication_id", "id" or "_local_id" (cancel by id)
	// Ignored are the fields of CouchDB's it has that fdbrep ignores
	// (IgnoredFields).
	Ignored []string
}

// ParseSpec parses and validates a replication specification (the body of a
// _replicator document or of POST /_replicate). Errors wrap ErrBadRequest;
// Reason gives the message for the user.
func ParseSpec(body json.RawMessage) (*Spec, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	return parseSpec(obj)
}

// ParseRequest parses a POST /_replicate body. A cancel may name the
// replication by id instead of by source and target.
func ParseRequest(body json.RawMessage) (*Request, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	req := &Request{Ignored: IgnoredFields(obj)}
	if v, ok := obj["cancel"]; ok {
		b, err := boolField(v, "cancel")
		if err != nil {
			return nil, err
		}
		req.Cancel = b
	}
	for _, k := range []string{"replication_id", "id", "_local_id"} {
		if v, ok := obj[k]; ok && string(v) != "null" {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return nil, newReason(ErrBadRequest, "`%s` must be a string", k)
			}
			req.ID = s
		}
	}
	if req.Cancel && req.ID != "" {
		return req, nil
	}
	if req.Spec, err = parseSpec(obj); err != nil {
		return nil, err
	}
	if req.Spec.Schedule != nil {
		return nil, newReason(ErrBadRequest, "`schedule` is for _replicator documents: a POST /_replicate runs once")
	}
	if t := req.Spec.Template; t != nil {
		return nil, newReason(ErrBadRequest, "`%s.databases` makes a template, which is for _replicator documents: a POST /_replicate replicates one database", t.Side)
	}
	return req, nil
}

func decodeObject(body json.RawMessage) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil || obj == nil {
		return nil, newReason(ErrBadRequest, "the replication must be a JSON object")
	}
	return obj, nil
}

func boolField(v json.RawMessage, name string) (bool, error) {
	var b bool
	if json.Unmarshal(v, &b) != nil {
		return false, newReason(ErrBadRequest, "`%s` must be a boolean", name)
	}
	return b, nil
}

// intField accepts an integer in [min, max] or a string holding one, as
// CouchDB does.
func intField(v json.RawMessage, name string, min, max int64) (int64, error) {
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return 0, newReason(ErrBadRequest, "`%s` must be an integer", name)
		}
		n = json.Number(strings.TrimSpace(s))
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0, newReason(ErrBadRequest, "`%s` must be an integer", name)
	}
	if i < min {
		return 0, newReason(ErrBadRequest, "`%s` must be at least %d", name, min)
	}
	if i > max {
		return 0, newReason(ErrBadRequest, "`%s` must be at most %d", name, max)
	}
	return i, nil
}

func isNull(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

func isObject(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && v[0] == '{' && json.Valid(v)
}

// ParseObject is ParseSpec for a body already decoded into its members.
func ParseObject(obj map[string]json.RawMessage) (*Spec, error) { return parseSpec(obj) }

func parseSpec(obj map[string]json.RawMessage) (*Spec, error) {
	s := &Spec{}
	src, tgt := (*TemplateSpec)(nil), (*TemplateSpec)(nil)
	var err error
	if s.Source, src, err = parseEndpoint(obj, "source"); err != nil {
		return nil, err
	}
	if s.Target, tgt, err = parseEndpoint(obj, "target"); err != nil {
		return nil, err
	}
	switch {
	case src != nil && tgt != nil:
		return nil, newReason(ErrBadRequest, "`source.databases` and `target.databases`: a template matches the databases of one endpoint's server, not both")
	case src != nil:
		s.Template = src
	case tgt != nil:
		s.Template = tgt
	}
	for _, name := range []string{"continuous", "create_target", "winning_revs_only", "use_bulk_get", "skip_deleted", "follow_purges", "paused"} {
		v, ok := obj[name]
		if !ok || isNull(v) {
			continue
		}
		b, err := boolField(v, name)
		if err != nil {
			return nil, err
		}
		switch name {
		case "continuous":
			s.Continuous = b
		case "create_target":
			s.CreateTarget = b
		case "winning_revs_only":
			s.WinningRevsOnly = b
		case "use_bulk_get":
			s.UseBulkGet = &b
		case "skip_deleted":
			s.SkipDeleted = b
		case "follow_purges":
			s.FollowPurges = b
		case "paused":
			s.Paused = b
		}
	}
	if v, ok := obj["schedule"]; ok && !isNull(v) {
		if s.Schedule, err = parseSchedule(v, s.Continuous); err != nil {
			return nil, err
		}
	}
	if v, ok := obj["use_checkpoints"]; ok {
		var b bool
		if json.Unmarshal(v, &b) != nil && !isNull(v) {
			return nil, newReason(ErrBadRequest, "`use_checkpoints` must be a boolean")
		}
		if !isNull(v) {
			s.UseCheckpoints = &b
		}
	}
	if v, ok := obj["create_target_params"]; ok && !isNull(v) {
		if !isObject(v) {
			return nil, newReason(ErrBadRequest, "`create_target_params` must be an object")
		}
		s.CreateTargetParams = v
	}
	n := 0
	if v, ok := obj["doc_ids"]; ok && !isNull(v) {
		var raw []json.RawMessage
		if json.Unmarshal(v, &raw) != nil {
			return nil, newReason(ErrBadRequest, "`doc_ids` must be an array")
		}
		s.DocIDs = make([]string, 0, len(raw))
		for _, e := range raw {
			var id string
			if json.Unmarshal(e, &id) != nil {
				return nil, newReason(ErrBadRequest, "`doc_ids` array must contain strings")
			}
			s.DocIDs = append(s.DocIDs, id)
		}
		n++
	}
	if v, ok := obj["filter"]; ok && !isNull(v) {
		if json.Unmarshal(v, &s.Filter) != nil {
			return nil, newReason(ErrBadRequest, "`filter` must be a string")
		}
		if s.Filter != "" {
			n++
		}
	}
	if v, ok := obj["selector"]; ok && !isNull(v) {
		if !isObject(v) {
			return nil, newReason(ErrBadRequest, "`selector` must be a JSON object")
		}
		s.Selector = v
		n++
	}
	if n > 1 {
		return nil, newReason(ErrBadRequest, "`doc_ids`, `filter` and `selector` are mutually exclusive: use at most one")
	}
	if v, ok := obj["query_params"]; ok && !isNull(v) {
		if !isObject(v) {
			return nil, newReason(ErrBadRequest, "`query_params` must be null or an object")
		}
		s.QueryParams = v
	}
	if v, ok := obj["since_seq"]; ok && !isNull(v) {
		s.SinceSeq = v
	}
	set := map[string]func(int64){
		"worker_processes":   func(i int64) { s.WorkerProcesses = int(i) },
		"worker_batch_size":  func(i int64) { s.WorkerBatchSize = int(i) },
		"http_connections":   func(i int64) { s.HTTPConnections = int(i) },
		"connection_timeout": func(i int64) { s.ConnectionTimeout = i },
		"retries_per_request": func(i int64) {
			s.RetriesPerRequest = int(i)
			if i == 0 {
				s.RetriesPerRequest = -1
			}
		},
		"checkpoint_interval": func(i int64) { s.CheckpointInterval = i },
	}
	for _, t := range engine.Tunables {
		if v, ok := obj[t.Name]; ok && !isNull(v) {
			i, err := intField(v, t.Name, t.Min, t.Max)
			if err != nil {
				return nil, err
			}
			set[t.Name](i)
		}
	}
	if err := parseProxies(obj, s); err != nil {
		return nil, err
	}
	if v, ok := obj["socket_options"]; ok && !isNull(v) {
		var raw string
		if json.Unmarshal(v, &raw) != nil {
			return nil, newReason(ErrBadRequest, "`socket_options` must be a string such as \"[{keepalive, true}, {nodelay, false}]\"")
		}
		o, err := couch.ParseSocketOptions(raw)
		if err != nil {
			return nil, newReason(ErrBadRequest, "`socket_options`: %s", socketReason(err))
		}
		if !o.IsZero() {
			s.SocketOptions = o.String()
		}
	}
	if v, ok := obj["user_ctx"]; ok && !isNull(v) {
		var u UserCtx
		if !isObject(v) || json.Unmarshal(v, &u) != nil {
			return nil, newReason(ErrBadRequest, "`user_ctx` must be an object with a string `name` and an array of string `roles`")
		}
		s.UserCtx = &u
	}
	if err := s.checkTemplate(); err != nil {
		return nil, err
	}
	if s.Template == nil {
		if _, err := s.Replication(); err != nil {
			return nil, err
		}
	}
	if b, err := json.Marshal(s); err != nil || len(b) > SpecMaxBytes {
		return nil, newReason(ErrTooLarge, "the replication is larger than %d bytes", SpecMaxBytes)
	}
	return s, nil
}

// SpecMaxBytes bounds the stored form of a replication (its JSON in the
// job data, which lives in one FoundationDB value with the job's state and
// history).
const SpecMaxBytes = 64 << 10

// socketReason strips the class prefix from a socket_options error.
func socketReason(err error) string {
	msg := strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": ")
	return strings.TrimPrefix(msg, "socket_options: ")
}

// engineReason strips the engine's class prefix from a validation error.
func engineReason(err error) string {
	msg := err.Error()
	if errors.Is(err, engine.ErrInvalidSpec) {
		msg = strings.TrimPrefix(msg, engine.ErrInvalidSpec.Error()+": ")
	}
	return msg
}

// sealedWholeReason is why an endpoint or proxy URL sealed whole is
// refused: sealing (couch.WalkSecretsTo) takes a URL with an '@' where a
// URL cannot hold one for a password it cannot tell from the rest.
const sealedWholeReason = "its URL holds an '@' past the user name and password (so it was sealed whole, and is not stored): escape '@', '/', '?' and '#' in the user name and password (%40, %2F, %3F, %23)"

// sealedWhole reports whether endpoint v (a URL string, or an object with
// "url") is a URL sealed whole.
func sealedWhole(v json.RawMessage) bool {
	var s string
	if json.Unmarshal(v, &s) != nil {
		var o struct {
			URL string `json:"url"`
		}
		if json.Unmarshal(v, &o) != nil {
			return false
		}
		s = o.URL
	}
	return seal.IsSealed(s)
}

// parseEndpoint parses endpoint name of obj; a template's endpoint (an
// object with "databases") names a server, and its template is returned
// too.
func parseEndpoint(obj map[string]json.RawMessage, name string) (EndpointSpec, *TemplateSpec, error) {
	v, ok := obj[name]
	if !ok || isNull(v) {
		return EndpointSpec{}, nil, newReason(ErrBadRequest, "Missing `%s` field", name)
	}
	ep, err := couch.ParseEndpoint(v)
	if err != nil && sealedWhole(v) {
		return EndpointSpec{}, nil, newReason(ErrBadRequest, "`%s`: %s", name, sealedWholeReason)
	}
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), couch.ErrInvalidEndpoint.Error()+": ")
		return EndpointSpec{}, nil, newReason(ErrBadRequest, "`%s`: %s", name, msg)
	}
	if v, ok := templateOf(v); ok {
		t, err := parseTemplate(v, name)
		if err != nil {
			return EndpointSpec{}, nil, err
		}
		if ep.URL.RawQuery != "" {
			return EndpointSpec{}, nil, newReason(ErrBadRequest, "`%s.url` names a server whose databases `%s.databases` matches: it takes no query string", name, name)
		}
		out := endpointSpecOf(ep)
		out.URL = strings.TrimSuffix(out.URL, "/") + "/"
		return out, t, nil
	}
	if strings.Trim(ep.URL.Path, "/") == "" {
		// A server, not a database: what Fauxton's replication form saves
		// for an endpoint it took for a local database it does not list
		// (any URL that contains the page's host name, whatever its port).
		return EndpointSpec{}, nil, newReason(ErrBadRequest, "`%s` names no database: %s is a server's URL; "+
			"if Fauxton's form showed it as a local database with no name, edit the document's JSON instead (docs/COMPAT.md, Fauxton)",
			name, ep.Redacted())
	}
	return endpointSpecOf(ep), nil, nil
}

// templateOf returns the "databases" member of an endpoint written as an
// object, if it has one (null too: parseTemplate refuses it).
func templateOf(v json.RawMessage) (json.RawMessage, bool) {
	if !isObject(v) {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return nil, false
	}
	d, ok := m["databases"]
	return d, ok
}

// endpointSpecOf is the storable form of a parsed endpoint.
func endpointSpecOf(ep couch.Endpoint) EndpointSpec {
	out := EndpointSpec{URL: ep.URL.String(), Username: ep.Username, Password: ep.Password}
	if t := ep.Token; t != nil {
		out.Token = &TokenSpec{URL: t.URL, APIKey: t.APIKey, ClientID: t.ClientID, ClientSecret: t.ClientSecret, Scope: t.Scope}
	}
	for k := range ep.Headers {
		if out.Headers == nil {
			out.Headers = map[string]string{}
		}
		out.Headers[k] = ep.Headers.Get(k)
	}
	return out
}

func parseProxies(obj map[string]json.RawMessage, s *Spec) error {
	get := func(k string) (string, error) {
		v, ok := obj[k]
		if !ok || isNull(v) {
			return "", nil
		}
		var p string
		if json.Unmarshal(v, &p) != nil {
			return "", newReason(ErrBadRequest, "`%s` must be a string", k)
		}
		if p == "" {
			return "", nil
		}
		if seal.IsSealed(p) {
			return "", newReason(ErrBadRequest, "`%s`: %s", k, sealedWholeReason)
		}
		u, err := url.Parse(p)
		if err != nil || u.Host == "" {
			return "", newReason(ErrBadRequest, "`%s` has an invalid url", k)
		}
		if couch.HidesUserinfo(p) {
			return "", newReason(ErrBadRequest, "`%s` has an invalid url: escape '@', '/', '?' and '#' in the user name and password (%%40, %%2F, %%3F, %%23)", k)
		}
		switch u.Scheme {
		case "http", "https", "socks5":
		default:
			return "", newReason(ErrBadRequest, "Unsupported proxy protocol in `%s`: use http, https or socks5", k)
		}
		return p, nil
	}
	proxy, err := get("proxy")
	if err != nil {
		return err
	}
	sp, err := get("source_proxy")
	if err != nil {
		return err
	}
	tp, err := get("target_proxy")
	if err != nil {
		return err
	}
	if proxy != "" && sp != "" {
		return newReason(ErrBadRequest, "`proxy` is mutually exclusive with `source_proxy`")
	}
	if proxy != "" && tp != "" {
		return newReason(ErrBadRequest, "`proxy` is mutually exclusive with `target_proxy`")
	}
	if proxy != "" {
		sp, tp = proxy, proxy
	}
	s.Source.Proxy, s.Target.Proxy = sp, tp
	return nil
}

// RedactURL replaces the password of a URL with *****; unparseable input
// gives "".
func RedactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			return couch.RedactURL(u, u.User.Username())
		}
	}
	return u.String()
}
