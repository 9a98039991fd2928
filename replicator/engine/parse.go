package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// ParseReplication parses a replication specification — a _replicator
// document or a POST /_replicate body — with CouchDB's field rules and error
// messages, and validates it. Unknown fields (including the _replicator
// bookkeeping fields and "cancel") are ignored. Errors wrap ErrInvalidSpec
// and never contain passwords.
func ParseReplication(body []byte) (Replication, error) {
	var rep Replication
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, args...)...)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil || doc == nil {
		return rep, bad("replication specification must be a JSON object")
	}
	present := func(k string) bool {
		v, ok := doc[k]
		return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
	}
	for _, side := range []struct {
		key string
		ep  *couch.Endpoint
	}{{"source", &rep.Source}, {"target", &rep.Target}} {
		if !present(side.key) {
			return rep, bad("Missing replicator database")
		}
		ep, err := couch.ParseEndpoint(doc[side.key])
		if err != nil {
			return rep, bad("%s: %v", side.key, err)
		}
		*side.ep = ep
	}
	boolField := func(k string, dst *bool) error {
		if !present(k) {
			return nil
		}
		if err := json.Unmarshal(doc[k], dst); err != nil {
			return bad("parameter `%s` must be a boolean", k)
		}
		return nil
	}
	for _, f := range []struct {
		k   string
		dst *bool
	}{{"continuous", &rep.Continuous}, {"create_target", &rep.CreateTarget}, {"winning_revs_only", &rep.WinningRevsOnly}} {
		if err := boolField(f.k, f.dst); err != nil {
			return rep, err
		}
	}
	var useBulkGet = true
	if err := boolField("use_bulk_get", &useBulkGet); err != nil {
		return rep, err
	}
	rep.DisableBulkGet = !useBulkGet
	// use_checkpoints is not validated by CouchDB: only a literal false
	// disables checkpoints.
	rep.DisableCheckpoints = present("use_checkpoints") && string(bytes.TrimSpace(doc["use_checkpoints"])) == "false"

	objectField := func(k string, dst *json.RawMessage) error {
		if !present(k) {
			return nil
		}
		if !isJSONObject(doc[k]) {
			return bad("parameter `%s` must be a JSON object", k)
		}
		*dst = compactBytes(doc[k])
		return nil
	}
	if err := objectField("create_target_params", &rep.CreateTargetParams); err != nil {
		return rep, err
	}
	if err := objectField("selector", &rep.Selector); err != nil {
		return rep, err
	}
	if present("query_params") {
		if !isJSONObject(doc["query_params"]) {
			return rep, bad("parameter `query_params` must be an object")
		}
		rep.QueryParams = compactBytes(doc["query_params"])
	}
	if present("doc_ids") {
		if err := json.Unmarshal(doc["doc_ids"], &rep.DocIDs); err != nil || rep.DocIDs == nil {
			return rep, bad("parameter `doc_ids` must be an array")
		}
	}
	if present("filter") {
		if err := json.Unmarshal(doc["filter"], &rep.Filter); err != nil {
			return rep, bad("Invalid filter. Must match `ddocname/filtername`.")
		}
	}
	if present("since_seq") {
		rep.SinceSeq = compactBytes(doc["since_seq"])
	}
	proxy := func(k string) (*url.URL, error) {
		if !present(k) {
			return nil, nil
		}
		var raw string
		if err := json.Unmarshal(doc[k], &raw); err != nil {
			return nil, bad("Invalid proxy url")
		}
		if raw == "" {
			return nil, nil
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5") || u.Host == "" {
			return nil, bad("proxy has an invalid url")
		}
		return u, nil
	}
	both, err := proxy("proxy")
	if err != nil {
		return rep, err
	}
	if rep.SourceProxy, err = proxy("source_proxy"); err != nil {
		return rep, err
	}
	if rep.TargetProxy, err = proxy("target_proxy"); err != nil {
		return rep, err
	}
	if both != nil {
		if rep.SourceProxy != nil {
			return rep, bad("`proxy` is mutually exclusive with `source_proxy`")
		}
		if rep.TargetProxy != nil {
			return rep, bad("`proxy` is mutually exclusive with `target_proxy`")
		}
		rep.SourceProxy, rep.TargetProxy = both, both
	}
	if present("user_ctx") {
		if err := json.Unmarshal(doc["user_ctx"], &rep.UserCtx); err != nil {
			return rep, bad("parameter `user_ctx` must be an object with a string `name` and a list of `roles`")
		}
	}
	intField := func(k string) (int64, bool, error) {
		if !present(k) {
			return 0, false, nil
		}
		raw := bytes.TrimSpace(doc[k])
		var s string
		if json.Unmarshal(raw, &s) == nil {
			raw = []byte(strings.TrimSpace(s))
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return 0, false, bad("parameter `%s` must be an integer", k)
		}
		return n, true, nil
	}
	for _, f := range []struct {
		k   string
		set func(int64)
	}{
		{"worker_processes", func(n int64) { rep.WorkerProcesses = int(n) }},
		{"worker_batch_size", func(n int64) { rep.WorkerBatchSize = int(n) }},
		{"http_connections", func(n int64) { rep.HTTPConnections = int(n) }},
		{"retries_per_request", func(n int64) {
			rep.RetriesPerRequest = int(n)
			if n == 0 {
				rep.RetriesPerRequest = -1
			}
		}},
		{"connection_timeout", func(n int64) { rep.ConnectionTimeout = time.Duration(n) * time.Millisecond }},
		{"checkpoint_interval", func(n int64) { rep.CheckpointInterval = time.Duration(n) * time.Millisecond }},
	} {
		n, ok, err := intField(f.k)
		if err != nil {
			return rep, err
		}
		if !ok {
			continue
		}
		if n < 0 || (n == 0 && f.k != "retries_per_request") || n > 1<<31 {
			return rep, bad("parameter `%s` must be a positive integer", f.k)
		}
		f.set(n)
	}
	if err := rep.Validate(); err != nil {
		return rep, err
	}
	return rep.withDefaults(), nil
}
