package config

import (
	"fmt"
	"strings"

	"github.com/agnivade/levenshtein"
)

// A CouchDB local.ini can be given to fdbrep as it is: settings of CouchDB
// that fdbrep has no use for are ignored, and each ignored section or key
// is named in a warning. Anything that is neither fdbrep's nor CouchDB's is
// most likely a typo, so Load refuses it with ErrUnknownKey and suggests
// the closest known key.

// couchDBSections are CouchDB's sections (3.x, and a few of 2.x that
// migrated files still carry) that fdbrep does not read.
var couchDBSections = setOf(
	"attachments", "bt_engine_cache", "chttpd_auth_cache", "cluster", "compaction_daemon",
	"compactions", "config", "cors", "couch_auto_purge_plugin", "couch_httpd_auth", "couch_httpd_oauth",
	"couch_passwords_cache", "couch_peruser", "couch_quickjs_scanner_plugin", "couch_scanner",
	"couch_scanner_plugin_conflict_finder", "couch_scanner_plugin_ddoc_features", "couch_scanner_plugin_find",
	"couch_scanner_plugin_find.regexes", "couch_scanner_plugins", "couchdb_engines", "csp", "custodian",
	"daemons", "ddoc_cache", "disk_monitor", "dreyfus", "fabric", "feature_flags", "global_changes", "hibernate_after",
	"httpd", "httpd_db_handlers", "httpd_design_handlers", "httpd_global_handlers", "indexers", "ioq", "ioq.bypass",
	"mango", "mem3", "native_query_servers", "nouveau", "nouveau_index_upgrader",
	"os_daemons", "process_priority", "prometheus", "purge", "query_server_config", "query_servers", "quickjs",
	"reshard", "rexi", "smoosh", "smoosh.ratio_dbs", "smoosh.ratio_views", "smoosh.slack_dbs", "smoosh.slack_views",
	"stats", "uuids", "vendor", "vhosts", "view_updater", "view_upgrade", "x_frame_options",
)

// couchDBKeys are CouchDB 3.x's keys, in the sections fdbrep shares with
// CouchDB, that fdbrep does not read.
var couchDBKeys = map[string]map[string]bool{
	// fdbrep reads [couchdb] uuid only (the replication ids' server UUID).
	"couchdb": setOf("attachment_stream_buffer_size", "attachment_writer_timeout", "btree_chunk_size", "cfile_skip_ioq",
		"changes_doc_ids_optimization_threshold", "compaction_log_level", "database_dir", "default_engine",
		"default_security", "delayed_commits", "enable_database_recovery", "file_compression", "fsync_options",
		"js_engine", "maintenance_mode", "max_attachment_size", "max_dbs_open", "max_document_id_length",
		"max_document_size", "max_partition_size", "os_process_timeout", "plugin_dir", "single_node",
		"stem_interactive_updates", "update_lru_on_read", "uri_file", "use_cfile", "users_db_security_editable",
		"util_driver_dir", "view_index_dir", "write_xxhash_checksums"),
	"chttpd": setOf("allow_jsonp", "buffer_response", "bulk_get_use_batches",
		"changes_timeout", "config_whitelist", "decode_plus_to_space", "disconnect_check_jitter_msec",
		"disconnect_check_msec", "enable_cors", "enable_xframe_options", "max_db_number_for_dbs_info_req",
		"max_uri_length", "peer_header", "prefer_minimal", "require_valid_user_except_for_up", "rewrite_limit",
		"scrub_json_request", "secure_rewrites", "server_header_versions", "server_options", "socket_options",
		"x_forwarded_host", "x_forwarded_proto", "x_forwarded_ssl", "backlog", "nodelay"),
	"chttpd_auth": setOf("authentication_db", "authentication_redirect", "cookie_domain", "hash_algorithms",
		"max_iterations", "min_iterations", "password_regexp", "password_scheme",
		"public_fields", "same_site", "upgrade_hash_on_auth", "users_db_public", "require_valid_user"),
	// CouchDB 3.5's [replicator] keys fdbrep does not implement are in
	// notImplemented, with their reasons.
	"replicator": setOf("connect_to", "db_created_warning"),
	// An encrypted key (password) is refused when it is loaded: its
	// error says to give an unencrypted one.
	"ssl": setOf("password", "verify_fun", "ssl_certificate_max_depth", "secure_renegotiate"),
	"log": setOf("file", "filter_fields", "max_message_size", "strip_last_msg", "syslog_appid",
		"syslog_facility", "syslog_host", "syslog_port", "write_buffer", "write_delay", "writer"),
}

// NotImplemented is a CouchDB setting fdbrep knows and deliberately does
// not implement: set, it is ignored with a warning that names it and
// gives Reason. docs/CONFIG.md lists them beside the keys fdbrep reads.
type NotImplemented struct {
	Section, Name string
	// CouchDB is what the setting does in CouchDB (its default, and the
	// releases that read it when not all of 3.x's).
	CouchDB string
	// Reason is why fdbrep does not implement it, for the warning and
	// the docs.
	Reason string
}

// notImplemented are the keys of CouchDB 3.5's [replicator] section (and
// 3.3's cluster_quiet_period) that fdbrep does not implement: with every
// key fdbrep registers, they are the whole section.
var notImplemented = []NotImplemented{
	{"replicator", "cluster_quiet_period", "CouchDB 3.3 and earlier: seconds of stable cluster membership before replications are rebalanced (60)",
		"replication nodes take jobs from one shared queue and balance them through the store's membership records; no node waits for the membership to settle"},
	{"replicator", "cluster_start_period", "seconds a node waits after start-up before it reads the _replicator databases (5)",
		"a document becomes its job in the transaction that writes it, and a replication node takes pending jobs as soon as it starts; there is nothing to wait for"},
	{"replicator", "ibrowse_options", "options of CouchDB's HTTP client, ibrowse, for every replication ([]); a document may set its own",
		"fdbrep's client is Go's: of ibrowse's options CouchDB accepts (valid_ibrowse_options) only prefer_ipv6 means anything, and Go's dialer already tries IPv6 and IPv4 addresses side by side (RFC 6555)"},
	{"replicator", "session_min_update_interval", "least seconds between two renewals of a _session cookie that an endpoint refused (5)",
		"fdbrep logs in again at once when an endpoint refuses a cookie that worked (at most twice for one request), and sends Basic on every request to an endpoint that refuses a fresh one (COMPAT.md)"},
	{"replicator", "update_docs", "write the transient states (triggered, error) into _replicator documents (false)",
		"fdbrep writes only the terminal states, completed and failed, as CouchDB 3.x does by default; _scheduler/docs shows every state"},
	{"replicator", "valid_ibrowse_options", "ibrowse options a replication may set (prefer_ipv6)",
		"fdbrep reads no ibrowse options (see ibrowse_options)"},
	{"replicator", "valid_socket_options", "socket_options applied; others are dropped without a word (buffer, keepalive, nodelay, priority, recbuf, sndbuf)",
		"fdbrep applies every option it accepts and refuses any other by name"},
	{"replicator", "verify_ssl_certificates_log", "log the https endpoints whose certificates would fail verification (false)",
		"fdbrep verifies certificates by default (verify_ssl_certificates), and a refused certificate fails the replication with a reason naming the setting to change"},
}

// NotImplementedKeys returns the CouchDB settings fdbrep knows and does
// not implement, by section and name.
func NotImplementedKeys() []NotImplemented { return append([]NotImplemented(nil), notImplemented...) }

// notImplementedKey returns the entry of section/key, nil when it is not
// one.
func notImplementedKey(section, key string) *NotImplemented {
	for i := range notImplemented {
		if n := &notImplemented[i]; n.Section == section && n.Name == key {
			return n
		}
	}
	return nil
}

// movedFrom names the fdbrep section that holds the settings CouchDB also
// reads from an older section.
var movedFrom = map[string]string{"httpd": "chttpd", "couch_httpd_auth": "chttpd_auth"}

// checkUnknown sorts a key fdbrep does not read (key "" for a whole
// section): a CouchDB setting gives a warning, anything else an error.
func (c *Config) checkUnknown(section, key string) error {
	src := c.sources[section+"/"+key]
	if key == "" {
		for k := range c.values[section] {
			src = c.sources[section+"/"+k]
			break
		}
	}
	switch {
	case key == "" && couchDBSections[section]:
		msg := fmt.Sprintf("[%s] is a CouchDB section fdbrep does not use; ignored (%s)", section, src)
		if to := movedFrom[section]; to != "" {
			var moved []string
			for _, k := range c.keyNames(section) {
				if lookup(to, k) != nil {
					moved = append(moved, k)
				}
			}
			if len(moved) > 0 {
				msg += fmt.Sprintf("; fdbrep reads %s from [%s]", strings.Join(moved, ", "), to)
			}
		}
		c.warnings = append(c.warnings, msg)
		return nil
	case key == "":
		return fmt.Errorf("%w: section [%s] (%s) is neither fdbrep's nor CouchDB's%s; docs/CONFIG.md lists every key",
			ErrUnknownKey, section, src, suggest(section, ""))
	case notImplementedKey(section, key) != nil:
		c.warnings = append(c.warnings, fmt.Sprintf("[%s] %s is a CouchDB setting fdbrep does not implement: %s; ignored (%s)",
			section, key, notImplementedKey(section, key).Reason, src))
		return nil
	case couchDBKeys[section][key]:
		c.warnings = append(c.warnings, fmt.Sprintf("[%s] %s is a CouchDB setting fdbrep does not use; ignored (%s)", section, key, src))
		return nil
	}
	return fmt.Errorf("%w: [%s] %s (%s) is neither fdbrep's nor CouchDB's%s; docs/CONFIG.md lists every key",
		ErrUnknownKey, section, key, src, suggest(section, key))
}

// suggest returns " (did you mean …?)" naming the known section (key "")
// or key closest to the given one, or "" when none is close.
func suggest(section, key string) string {
	best, bestD := "", 3 // at most two edits away
	try := func(cand string, d int) {
		if d < bestD || d == bestD && cand < best {
			best, bestD = cand, d
		}
	}
	if key == "" {
		for s := range frozen().sections {
			try("["+s+"]", levenshtein.ComputeDistance(section, s))
		}
	} else {
		for _, k := range frozen().ordered {
			d := levenshtein.ComputeDistance(key, k.Name)
			if k.Section != section {
				d++ // a right key in the wrong section is one more edit away
			}
			try("["+k.Section+"] "+k.Name, d)
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + best + "?)"
}

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
