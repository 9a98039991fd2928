package config

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// couchDBReplicatorKeys are the [replicator] keys of CouchDB 3.x: those
// its documentation lists (src/docs/src/config/replicator.rst) and those
// its code reads (couch_replicator), with values of its default.ini's
// examples. All are 3.5's but cluster_quiet_period (3.3's) and
// connect_to (after 3.5).
var couchDBReplicatorKeys = map[string]string{
	"auth_plugins": "couch_replicator_auth_session,couch_replicator_auth_noop", "cacert_reload_interval_hours": "24",
	"cert_file": "", "checkpoint_interval": "30000", "cluster_quiet_period": "60", "cluster_start_period": "5",
	"connect_to": "", "connection_close_interval": "90000", "connection_timeout": "30000", "health_threshold": "120",
	"http_connections": "20", "ibrowse_options": "[]", "interval": "60000", "key_file": "", "max_churn": "20",
	"max_document_id_length": "infinity", "max_history": "20", "max_jobs": "500", "missing_doc_retry_msec": "2000",
	"password": "", "priority_coeff": "0.98", "request_timeout": "infinity", "retries_per_request": "5",
	"session_min_update_interval": "5", "session_refresh_interval_sec": "550",
	"socket_options": "[{keepalive, true}, {nodelay, false}]", "ssl_certificate_max_depth": "3",
	"ssl_trusted_certificates_file": "", "startup_jitter": "5000", "update_docs": "false", "usage_coeff": "0.5",
	"use_bulk_get": "true", "use_checkpoints": "true", "valid_endpoint_protocols": "http,https",
	"valid_endpoint_protocols_log": "false", "valid_ibrowse_options": "", "valid_proxy_protocols": "http,https,socks5",
	"valid_socket_options": "buffer,keepalive,nodelay,priority,recbuf,sndbuf", "verify_ssl_certificates": "false",
	"verify_ssl_certificates_log": "false", "worker_batch_size": "500", "worker_processes": "4",
}

// Every [replicator] key of CouchDB 3.x is used or ignored with a warning
// that names it and, for CouchDB 3.5's (and 3.3's cluster_quiet_period),
// why fdbrep does not implement it; none stops the node. CouchDB's
// "infinity" reads as no limit.
func TestCouchDBReplicatorKeys(t *testing.T) {
	var ini strings.Builder
	ini.WriteString("[replicator]\n")
	for k, v := range couchDBReplicatorKeys {
		ini.WriteString(k + " = " + v + "\n")
	}
	c, err := Load([]string{writeFile(t, ini.String())}, nil)
	require.NoError(t, err)
	w := strings.Join(c.Warnings(), "\n")
	for k := range couchDBReplicatorKeys {
		switch n := notImplementedKey("replicator", k); {
		case lookup("replicator", k) != nil:
			require.NotContains(t, w, "[replicator] "+k+" ", "%s is used, not ignored", k)
		case n != nil:
			require.Contains(t, w, "[replicator] "+k+" is a CouchDB setting fdbrep does not implement: "+n.Reason+"; ignored (", k)
		case k == "connect_to": // after 3.5
			require.Contains(t, w, "[replicator] "+k+" is a CouchDB setting fdbrep does not use; ignored", k)
		default:
			require.Failf(t, "CouchDB 3.5's key neither registered nor in notImplemented", "[replicator] %s", k)
		}
	}
	require.Zero(t, c.Int("replicator", "request_timeout"))
	require.Zero(t, c.Duration("replicator", "request_timeout"))
	require.Zero(t, c.Int("replicator", "max_document_id_length"))
	require.Equal(t, time.Minute, c.Duration("replicator", "interval_sec"))
	require.Equal(t, 2*time.Minute, c.Duration("replicator", "health_threshold_sec"))
	require.EqualValues(t, 20, c.Int("replicator", "max_history"))
	require.EqualValues(t, 90000, c.Int("replicator", "connection_close_interval"))
}

func TestHealthThresholdNames(t *testing.T) {
	for _, tc := range []struct {
		ini  string
		want time.Duration
		err  string
	}{
		{"", 2 * time.Minute, ""},
		{"[replicator]\nhealth_threshold = 30\n", 30 * time.Second, ""},
		{"[replicator]\nhealth_threshold_sec = 45\n", 45 * time.Second, ""},
		{"[replicator]\nhealth_threshold = 30\nhealth_threshold_sec = 45\n", 0, "health_threshold (" /* file */},
	} {
		c, err := Load([]string{writeFile(t, tc.ini)}, nil)
		if tc.err != "" {
			require.ErrorIs(t, err, ErrInvalidValue)
			require.ErrorContains(t, err, tc.err)
			require.ErrorContains(t, err, "both set")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, c.Duration("replicator", "health_threshold_sec"))
	}
	// At run time one layer must not set both either.
	_, err := Default().With(Layer{Source: "_config", Values: map[string]map[string]string{
		"replicator": {"health_threshold": "30", "health_threshold_sec": "45"}}})
	require.ErrorContains(t, err, "both set")
}

// CouchDB 3.5.0's own default.ini, as its release ships it, with a
// local.ini beside it, loads: what fdbrep does not use is named in
// warnings. The release is ../shared/couchdb's (the test is skipped where
// it is absent, and fails under CI, which has it).
func TestCouchDB35DefaultIni(t *testing.T) {
	matches, _ := filepath.Glob(filepath.Join("..", "..", "..", "shared", "couchdb", "couchdb-3.5.0-*.tar.gz"))
	if len(matches) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CouchDB 3.5.0's release is not at ../shared/couchdb: CI must run this test")
		}
		t.Skip("CouchDB 3.5.0's release is not at ../shared/couchdb beside the repository")
	}
	def := filepath.Join(t.TempDir(), "default.ini")
	require.NoError(t, extract(matches[0], "couchdb/etc/default.ini", def))
	local := writeFile(t, "[admins]\nadmin = pass\n\n[chttpd]\nport = 15984\n\n[replicator]\nmax_jobs = 200\nconnection_close_interval = 60000\nhealth_threshold = 300\nupdate_docs = false\n")
	c, err := Load([]string{def, local}, nil)
	require.NoError(t, err)
	require.EqualValues(t, 200, c.Int("replicator", "max_jobs"))
	require.EqualValues(t, 15984, c.Int("chttpd", "port"))
	require.Equal(t, 5*time.Minute, c.Duration("replicator", "health_threshold_sec"))
	w := strings.Join(c.Warnings(), "\n")
	require.Contains(t, w, "[replicator] update_docs is a CouchDB setting fdbrep does not implement: fdbrep writes only the terminal states")
	require.Contains(t, w, "[couchdb] database_dir is a CouchDB setting fdbrep does not use")
	require.NotContains(t, w, "[couchdb] uuid")
}

// extract copies the file name of the gzipped tar archive to dst.
func extract(archive, name, dst string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	r := tar.NewReader(z)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return errors.New(name + " is not in " + archive)
		}
		if err != nil {
			return err
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			out, err := os.Create(dst)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, r); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		}
	}
}

// Keys that take CouchDB's "infinity" read it as 0, no limit, as they do
// 0 where their range has it; any other word is refused, naming both
// forms. valid_endpoint_protocols and valid_proxy_protocols take
// CouchDB's schemes, at least one.
func TestCouchDBReplicatorValues(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		want       int64
		err        string
	}{
		{"request_timeout", "infinity", 0, ""},
		{"request_timeout", "2500", 2500, ""},
		{"request_timeout", "0", 0, "want an integer of at least 1 (milliseconds), or infinity"},
		{"request_timeout", "Infinity", 0, "or infinity"},
		{"max_document_id_length", "infinity", 0, ""},
		{"max_document_id_length", "0", 0, ""},
		{"max_document_id_length", "100", 100, ""},
		{"max_document_id_length", "-1", 0, "want an integer of at least 0 (bytes), or infinity"},
		{"missing_doc_retry_msec", "infinity", 0, "want an integer from 1 to 3600000 (milliseconds)"},
		{"valid_endpoint_protocols", "https", 0, ""},
		{"valid_endpoint_protocols", "http, https", 0, ""},
		{"valid_endpoint_protocols", "https,ftp", 0, `"ftp" is not one of http, https`},
		{"valid_endpoint_protocols", "", 0, "valid_endpoint_protocols (" /* file */},
		{"valid_proxy_protocols", "socks5", 0, ""},
		{"valid_proxy_protocols", " ", 0, "allows no scheme"},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			c, err := Load([]string{writeFile(t, "[replicator]\n"+tc.key+" = "+tc.value+"\n")}, nil)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrInvalidValue)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			if lookup("replicator", tc.key).Kind == KindInt {
				require.Equal(t, tc.want, c.Int("replicator", tc.key))
			}
		})
	}
	require.Equal(t, InfinityWord, lookup("replicator", "request_timeout").Default)
	require.Equal(t, InfinityWord, lookup("replicator", "max_document_id_length").Default)
}

// The _config API refuses a key fdbrep does not implement, saying why.
func TestNotImplementedAtRunTime(t *testing.T) {
	for _, n := range NotImplementedKeys() {
		_, err := CheckRuntimeKey(n.Section, n.Name)
		require.ErrorIs(t, err, ErrNotUsed)
		require.ErrorContains(t, err, "does not implement: "+n.Reason)
		require.Nil(t, lookup(n.Section, n.Name), "[%s] %s is registered", n.Section, n.Name)
	}
}
