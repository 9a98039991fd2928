package config

import (
	"math"
	"strings"
	"time"
)

// Kind is the type of a config value.
type Kind int

// Kinds of config values.
const (
	KindString Kind = iota
	KindInt
	KindBool
	KindFloat
	KindList // comma-separated strings
)

func (k Kind) String() string {
	return [...]string{"string", "integer", "boolean", "float", "list"}[k]
}

// Key describes one known config key: its type, default, range and meaning.
// Registry lists them all; docs/CONFIG.md is checked against it.
type Key struct {
	Section string
	Name    string
	Kind    Kind
	Default string
	// Min and Max bound KindInt and KindFloat values (inclusive) when
	// HasRange is set.
	Min, Max float64
	HasRange bool
	// Unit is what a KindInt value counts ("milliseconds", "seconds",
	// "bytes"; "" for a plain count), named by range errors. Keys named
	// …_msec and …_sec have theirs without saying.
	Unit string
	// OneOf restricts KindString and KindList values to these words.
	OneOf []string
	// Secret values never appear in errors, logs or the _config API.
	Secret bool
	// Apply tells whether a change through the _config API takes effect
	// at run time, and on which nodes; ApplyRestart keys are refused there.
	Apply Apply
	Doc   string
}

// Apply tells when a change to a key takes effect, and on which nodes a
// change made at run time (the _config API) is applied.
type Apply int

// When changes apply.
const (
	// ApplyRestart: read at start-up only; the _config API refuses it.
	ApplyRestart Apply = iota
	// ApplyAll: applied at run time by every node.
	ApplyAll
	// ApplyReplication: applied at run time by replication nodes.
	ApplyReplication
	// ApplyFrontend: applied at run time by api_frontend nodes.
	ApplyFrontend
)

func (a Apply) String() string {
	return [...]string{"restart", "live: all nodes", "live: replication nodes", "live: api_frontend nodes"}[a]
}

// Roles returns the node roles a change applies to (nil for ApplyRestart).
func (a Apply) Roles() []string {
	switch a {
	case ApplyAll:
		return []string{RoleAPIFrontend, RoleReplication}
	case ApplyReplication:
		return []string{RoleReplication}
	case ApplyFrontend:
		return []string{RoleAPIFrontend}
	}
	return nil
}

// Sections whose keys are free-form: every key is a name (an admin, a user,
// a replicator database) rather than a fixed setting.
const (
	SectionAdmins    = "admins"
	SectionUsers     = "users"
	SectionUserRoles = "user_roles"
	SectionShares    = "replicator.shares"
)

// Bounds and default of [replicator.shares] values, as in CouchDB.
const (
	SharesDefault = 100
	SharesMin     = 1
	SharesMax     = 1000
)

// Node roles.
const (
	RoleAPIFrontend = "api_frontend"
	RoleReplication = "replication"
)

func intKey(section, name, def string, min, max float64, doc string) Key {
	return Key{Section: section, Name: name, Kind: KindInt, Default: def, Min: min, Max: max, HasRange: true, Doc: doc}
}

func floatKey(section, name, def string, min, max float64, doc string) Key {
	return Key{Section: section, Name: name, Kind: KindFloat, Default: def, Min: min, Max: max, HasRange: true, Doc: doc}
}

func boolKey(section, name, def, doc string) Key {
	return Key{Section: section, Name: name, Kind: KindBool, Default: def, Doc: doc}
}

func strKey(section, name, def, doc string, oneOf ...string) Key {
	return Key{Section: section, Name: name, Kind: KindString, Default: def, OneOf: oneOf, Doc: doc}
}

const maxInt = 1 << 53

// MaxBackoffSecMax is the largest [replicator] max_backoff_penalty_sec (30
// days), the replication node's own limit.
const MaxBackoffSecMax = 30 * 24 * 3600

// in gives a key the unit its name does not say.
func in(unit string, k Key) Key {
	k.Unit = unit
	return k
}

// max is k's upper bound: Max, and for a key of seconds or milliseconds
// at most what a time.Duration holds (about 292 years), so that no value
// the check lets through wraps around when a node turns it into one.
func (k *Key) max() float64 {
	switch k.unit() {
	case "seconds":
		return min(k.Max, float64(math.MaxInt64/int64(time.Second)))
	case "milliseconds":
		return min(k.Max, float64(math.MaxInt64/int64(time.Millisecond)))
	}
	return k.Max
}

// unit is what k's value counts: its Unit, or the one its name ends with.
func (k *Key) unit() string {
	switch {
	case k.Unit != "":
		return k.Unit
	case strings.HasSuffix(k.Name, "_msec"):
		return "milliseconds"
	case strings.HasSuffix(k.Name, "_sec"):
		return "seconds"
	}
	return ""
}

// live marks a key as changeable at run time, applied by the nodes a names.
func live(a Apply, k Key) Key {
	k.Apply = a
	return k
}

// Registry is every fixed key fdbrep reads, in documentation order.
var Registry = []Key{
	// [chttpd]
	strKey("chttpd", "bind_address", "127.0.0.1", "Address the HTTP API listens on (api_frontend nodes). Use 0.0.0.0 to listen on every interface."),
	intKey("chttpd", "port", "5984", 0, 65535, "Port of the HTTP API; 0 picks a free port."),
	in("bytes", intKey("chttpd", "max_http_request_size", "1048576", 1024, 64<<20, "Largest request body accepted, in bytes; larger bodies get 413 too_large.")),
	in("bytes", intKey("chttpd", "max_document_size", "65536", 256, 90000, "Largest replication document accepted, in bytes of JSON (documents are stored in one FoundationDB value).")),
	intKey("chttpd", "max_json_depth", "32", 2, 1000, "Deepest nesting of JSON objects and arrays accepted in a request body."),
	boolKey("chttpd", "admin_only_all_dbs", "true", "Only server admins may list databases with GET /_all_dbs."),
	boolKey("chttpd", "require_valid_user", "false", "Refuse every unauthenticated request except GET /_up and /_session."),
	intKey("chttpd", "max_connections", "10000", 1, 1_000_000, "Open connections at most on a listener (lowered to the process's file limit less 256). At the cap a new connection closes the one idle, still sending its request or waiting in a longpoll the longest."),
	intKey("chttpd", "header_timeout_msec", "10000", 1, 3_600_000, "Milliseconds a client has to send its request line and headers."),
	intKey("chttpd", "body_timeout_msec", "30000", 1, 3_600_000, "Milliseconds a client has to send a request body once its headers arrived; a slower body gets 408."),
	intKey("chttpd", "idle_timeout_msec", "120000", 1, 3_600_000, "Milliseconds a keep-alive connection may stay idle."),
	intKey("chttpd", "max_client_requests", "100", 0, 1_000_000, "Requests one client (a user, or an anonymous client's address) may have in flight; more get 429. Server admins and GET /_up are not counted. 0 disables the cap."),
	in("bytes", intKey("chttpd", "max_header_bytes", "65536", 4096, 16<<20, "Largest request headers accepted, in bytes.")),
	strKey("chttpd", "utils_dir", "", "Directory of Fauxton's prebuilt files (the dist/release directory of the npm package fauxton), served at /_utils/. Empty: scripts/fauxton/node_modules/fauxton/dist/release under the working directory when it exists (`make fauxton` installs it; `make run` starts there); otherwise /_utils answers 404 with how to install it. A directory given here must hold index.html or the node does not start. A container image sets it (FDBREP_CHTTPD__UTILS_DIR)."),
	// [chttpd_auth]
	{Section: "chttpd_auth", Name: "secret", Kind: KindString, Default: "", Secret: true, Doc: "Key that signs AuthSession cookies. Empty: a random key per process, so cookies are only valid on the node that issued them; set the same secret on every api_frontend node."},
	in("seconds", intKey("chttpd_auth", "timeout", "600", 1, maxInt, "Seconds an AuthSession cookie stays valid; it is refreshed when less than 10% of this remains.")),
	boolKey("chttpd_auth", "allow_persistent_cookies", "true", "Give AuthSession cookies a Max-Age (otherwise they are session cookies)."),
	strKey("chttpd_auth", "pbkdf2_prf", "sha256", "Pseudo-random function used to hash plaintext passwords found in [admins] and [users].", "sha", "sha256", "sha512"),
	intKey("chttpd_auth", "iterations", "600000", 1, 100_000_000, "PBKDF2 iterations used to hash plaintext passwords found in [admins] and [users]."),
	intKey("chttpd_auth", "auth_cache_size", "1000", 0, 1_000_000, "Verified credentials remembered, so that Basic auth does not rerun PBKDF2 on every request; 0 disables the cache."),
	// [fdb]
	strKey("fdb", "backend", "embedded", "Storage backend: the embedded store, or a FoundationDB cluster (binary built with -tags fdb).", "embedded", "fdb"),
	strKey("fdb", "cluster_file", "", "FoundationDB cluster file (backend fdb); empty uses FoundationDB's default lookup."),
	strKey("fdb", "tenant", "", "FoundationDB tenant the node's keys live in (backend fdb): a key space of its own on a shared cluster, which must allow tenants and hold it (fdbcli: configure tenant_mode=optional_experimental, then tenant create NAME); empty uses the whole database."),
	strKey("fdb", "data_dir", "./data", "Directory of the embedded store (backend embedded)."),
	boolKey("fdb", "in_memory", "false", "Keep the embedded store in memory only: nothing survives a restart."),
	// [log]
	live(ApplyAll, strKey("log", "level", "info", "Least severity logged.", "debug", "info", "warn", "error")),
	strKey("log", "format", "console", "Log format: human-readable console lines or JSON objects.", "console", "json"),
	boolKey("log", "requests", "true", "Log one line per HTTP request (method, path, status, user, remote, bytes, duration_ms; never credentials)."),
	// [node]
	strKey("node", "name", "", "Name of this node in _scheduler, _active_tasks and _membership output and in /_node/{name} paths; empty means fdbrep@<hostname>. Must be unique in a cluster, must not start with _ nor contain /."),
	{Section: "node", Name: "roles", Kind: KindList, Default: "api_frontend,replication", OneOf: []string{RoleAPIFrontend, RoleReplication}, Doc: "Roles this node runs: api_frontend serves the HTTP API, replication runs replication jobs. A replication-only node opens no listener except health_address."},
	strKey("node", "health_address", "", "Optional loopback address (host:port) serving GET /_up, /_node/_local/_stats and /_node/_local/_prometheus; meant for replication-only nodes. Must be a loopback address."),
	// [replicator] — job server
	live(ApplyReplication, intKey("replicator", "max_jobs", "500", 1, maxInt, "Most replication jobs running on one replication node.")),
	live(ApplyReplication, intKey("replicator", "max_churn", "100", 1, maxInt, "Most jobs one node stops per scheduling interval to give their slots to waiting jobs (rotation, when more continuous jobs are runnable than the nodes may run), or moves to nodes that run fewer; jobs stopped because max_jobs was lowered count against it but all stop. It does not bound starts: a node's acceptors take pending jobs into all the room it has under max_jobs (under its share of the jobs while the nodes balance).")),
	live(ApplyReplication, intKey("replicator", "max_acceptors", "2", 1, 1000, "Idle acceptors waiting for pending jobs on one node.")),
	live(ApplyReplication, intKey("replicator", "interval_sec", "15", 1, maxInt, "Seconds between scheduling cycles.")),
	live(ApplyReplication, in("milliseconds", intKey("replicator", "interval", "15000", 1000, maxInt, "CouchDB 3.x's name for the scheduling interval, in milliseconds; set interval_sec or interval, not both."))),
	live(ApplyReplication, intKey("replicator", "min_run_time_sec", "60", 1, maxInt, "A continuous job runs at least this long before the scheduler may stop it for another.")),
	live(ApplyReplication, intKey("replicator", "transient_job_max_age_sec", "86400", 1, maxInt, "Finished /_replicate jobs are forgotten this long after their last update.")),
	live(ApplyAll, in("milliseconds", intKey("replicator", "startup_jitter", "5000", 1, maxInt, "Milliseconds an acceptor that finds no runnable job waits at most (a random part of it, and at most the interval) before it looks again; a job enqueued meanwhile wakes it at once."))),
	live(ApplyReplication, intKey("replicator", "min_backoff_penalty_sec", "32", 1, maxInt, "Delay before a crashed job is retried after its first consecutive crash, doubled at each further one; each delay is shortened by up to a quarter at random.")),
	live(ApplyReplication, intKey("replicator", "max_backoff_penalty_sec", "172800", 1, MaxBackoffSecMax, "Greatest delay before a crashed job is retried (before its random shortening by up to a quarter); at least min_backoff_penalty_sec.")),
	live(ApplyReplication, intKey("replicator", "health_threshold_sec", "120", 1, maxInt, "A job that has run this long since its last start is healed: its count of consecutive crashes, which doubles its backoff at each crash, starts again (at its next stats update while it runs; a crash later than this counts as the first). A crash sooner adds to the count.")),
	live(ApplyReplication, in("seconds", intKey("replicator", "health_threshold", "120", 1, maxInt, "CouchDB 3.x's name for health_threshold_sec, in seconds too; set health_threshold_sec or health_threshold, not both."))),
	live(ApplyAll, intKey("replicator", "max_history", "10", 1, 1000, "Events kept in a job's history.")),
	live(ApplyReplication, intKey("replicator", "progress_interval_msec", "1000", 100, 60_000, "Milliseconds between a replication node's writes of the live counters of its running jobs that changed (documents read and written, sequences), which _active_tasks and the _scheduler views show between heartbeats: one transaction per node per interval, about 400 bytes per job whose counters moved.")),
	live(ApplyReplication, intKey("replicator", "stats_update_interval_sec", "10", 1, maxInt, "Seconds between writes of a running job's stats to its job data (its heartbeat; at most interval_sec and a third of job_timeout_sec); checkpoints write them too.")),
	intKey("replicator", "job_timeout_sec", "61", 3, 3600, "A running job whose node sends no heartbeat for this long is given to another node (the rep_jobs activity timeout); every node must use the same value."),
	intKey("replicator", "job_shards", "16", 1, 4096, "Shards of the replication job queue: the nodes' acceptors take from different shards, so use at least as many as the acceptors of all replication nodes (max_acceptors each); changing it loses no job. Every node must use the same value."),
	live(ApplyAll, floatKey("replicator", "usage_coeff", "0.5", 0.000001, 1, "Fair share: decay of a replicator database's usage (its jobs' run time) per interval, as CouchDB's (K1 of the fair-share RFC). Lower values forget usage faster.")),
	live(ApplyAll, floatKey("replicator", "priority_coeff", "0.98", 0.000001, 1, "Fair share: decay of every job's priority per interval, as CouchDB's (K2 of the fair-share RFC): jobs that waited move towards the front of the queue. Lower values forget faster; 1 never forgets.")),
	live(ApplyAll, intKey("replicator", "fair_share_window_sec", "86400", 0, maxInt, "Fair share: how far ahead pending jobs are ordered by priority; a priority that would take longer than this to decay to 1 counts as that. 0 disables fair share (jobs run in the order they were enqueued).")),
	// [replicator] — defaults of the replications' own settings
	live(ApplyReplication, intKey("replicator", "worker_processes", "4", 1, 64, "Default worker_processes of a replication that does not set it: concurrent workers per replication.")),
	live(ApplyReplication, intKey("replicator", "worker_batch_size", "500", 1, 10000, "Default worker_batch_size: changes each worker replicates at a time (worker_processes × worker_batch_size is at most 100000).")),
	live(ApplyReplication, intKey("replicator", "http_connections", "20", 1, 1000, "Default http_connections: connections per endpoint and replication.")),
	live(ApplyReplication, in("milliseconds", intKey("replicator", "connection_timeout", "30000", 1, 3_600_000, "Default connection_timeout, in milliseconds: a request whose peer stays silent this long, or sends less than 1 KiB in that time (a trickle), fails at once, and the replication crashes with the reason (only a first stall on a reused connection is retried)."))),
	live(ApplyReplication, intKey("replicator", "retries_per_request", "5", 0, 100, "Default retries_per_request: retries of a failed request before the replication crashes.")),
	live(ApplyReplication, in("milliseconds", intKey("replicator", "checkpoint_interval", "30000", 1, 3_600_000, "Default checkpoint_interval, in milliseconds, between checkpoints of a replication."))),
	live(ApplyReplication, boolKey("replicator", "use_checkpoints", "true", "Default use_checkpoints: write checkpoint documents on the endpoints.")),
	live(ApplyReplication, boolKey("replicator", "use_bulk_get", "true", "Default use_bulk_get: fetch documents with _bulk_get when the source supports it.")),
	live(ApplyReplication, strKey("replicator", "socket_options", "[{keepalive, true}, {nodelay, true}]", "Default socket_options, in CouchDB's syntax: TCP options of the replications' connections. fdbrep applies keepalive, nodelay, sndbuf, recbuf (bytes, at most 64 MiB) and priority (0 to 6, Linux); any other option stops the node with its name. A replication's own socket_options replace these. CouchDB's default turns nodelay off; fdbrep keeps it on (see COMPAT.md).")),
	// [replicator] — endpoints: TLS and authentication
	boolKey("replicator", "verify_ssl_certificates", "true", "Verify the certificates of https endpoints (chain to a trusted root, host name, ssl_certificate_max_depth). CouchDB's default is false; fdbrep's is true because the endpoints' passwords travel over these connections (see COMPAT.md)."),
	strKey("replicator", "ssl_trusted_certificates_file", "", "PEM file of the CA certificates trusted for https endpoints; empty trusts the system's roots. Read at start-up: a missing or unreadable file stops the node."),
	intKey("replicator", "ssl_certificate_max_depth", "3", 0, 100, "Intermediate certificates allowed between an endpoint's certificate and a trusted root (0: the root signs it directly)."),
	strKey("replicator", "cert_file", "", "PEM file of the client certificate (with its intermediates) presented to https endpoints that ask for one; set with key_file."),
	strKey("replicator", "key_file", "", "PEM file of the client certificate's private key (PKCS #1, PKCS #8 or SEC 1; encrypted with password)."),
	{Section: "replicator", Name: "password", Kind: KindString, Default: "", Secret: true, Doc: "Passphrase of an encrypted key_file (encrypted PKCS #8, or legacy encrypted PEM). Never logged."},
	{Section: "replicator", Name: "auth_plugins", Kind: KindList, Default: "couch_replicator_auth_session,couch_replicator_auth_noop",
		OneOf: []string{"couch_replicator_auth_session", "couch_replicator_auth_noop"},
		Doc:   "How the replicator authenticates to endpoints with credentials: with couch_replicator_auth_session it logs in once through POST /_session and sends the cookie (Basic where the endpoint has no usable _session); couch_replicator_auth_noop alone sends Basic on every request."},
	in("milliseconds", intKey("replicator", "connection_close_interval", "90000", 1000, 86_400_000, "Milliseconds an idle pooled connection to an endpoint is kept open before it is closed, as CouchDB 3.x's.")),
	intKey("replicator", "session_refresh_interval_sec", "550", 1, maxInt, "Seconds after which a session cookie without Max-Age is renewed (a cookie with Max-Age is renewed at 90% of it)."),
	// [couch_jobs]
	intKey("couch_jobs", "activity_monitor_max_jitter_msec", "10000", 1, maxInt, "Cap of the random delay added to each activity monitor period."),
	intKey("couch_jobs", "type_monitor_holdoff_msec", "50", 1, maxInt, "Least time between two rounds of a job notifier."),
	intKey("couch_jobs", "type_check_period_msec", "15000", 1, maxInt, "How often the list of job types is re-read as a fallback."),
	intKey("couch_jobs", "batch_size", "1000", 1, 100000, "Jobs the activity monitor and notifier handle per transaction, initially."),
	boolKey("couch_jobs", "migrate", "false", "At start, rewrite a store whose jobs an earlier fdbrep wrote (job key layout 1, before 2026-11) into this version's layout, in place; without it such a store is refused. Stop every node of the earlier version first: it cannot read the new layout."),
}

var registryIndex = func() map[string]*Key {
	m := make(map[string]*Key, len(Registry))
	for i := range Registry {
		k := &Registry[i]
		m[k.Section+"/"+k.Name] = k
	}
	return m
}()

func lookup(section, name string) *Key {
	return registryIndex[section+"/"+name]
}

// knownSections is every section fdbrep reads, fixed and free-form.
var knownSections = func() map[string]bool {
	m := map[string]bool{SectionAdmins: true, SectionUsers: true, SectionUserRoles: true, SectionShares: true}
	for _, k := range Registry {
		m[k.Section] = true
	}
	return m
}()

func freeForm(section string) bool {
	switch section {
	case SectionAdmins, SectionUsers, SectionUserRoles, SectionShares:
		return true
	}
	return false
}

// EnvPrefix starts every environment override.
const EnvPrefix = "FDBREP_"

// EnvName is the environment variable that overrides section/key:
// FDBREP_<SECTION>__<KEY>, upper case, with the dots of section names
// turned into single underscores (FDBREP_REPLICATOR__MAX_JOBS,
// FDBREP_REPLICATOR_SHARES___REPLICATOR, FDBREP_ADMINS__ADMIN).
func EnvName(section, key string) string {
	return EnvPrefix + envSection(section) + "__" + strings.ToUpper(key)
}

func envSection(section string) string {
	return strings.ToUpper(strings.ReplaceAll(section, ".", "_"))
}
