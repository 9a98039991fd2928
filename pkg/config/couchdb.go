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
	"replicator": setOf("cacert_reload_interval_hours", "cluster_start_period",
		"connect_to", "max_document_id_length", "missing_doc_retry_msec",
		"request_timeout", "valid_endpoint_protocols",
		"valid_endpoint_protocols_log", "valid_proxy_protocols", "valid_socket_options",
		"verify_ssl_certificates_log", "cluster_quiet_period", "db_created_warning", "ibrowse_options",
		"valid_ibrowse_options", "session_min_update_interval",
		// fdbrep writes only terminal states (completed, failed) into
		// _replicator documents: CouchDB 3.x's update_docs = false.
		"update_docs"),
	// An encrypted key (password) is refused when it is loaded: its
	// error says to give an unencrypted one.
	"ssl": setOf("password", "verify_fun", "ssl_certificate_max_depth", "secure_renegotiate"),
	"log": setOf("file", "filter_fields", "max_message_size", "strip_last_msg", "syslog_appid",
		"syslog_facility", "syslog_host", "syslog_port", "write_buffer", "write_delay", "writer"),
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
