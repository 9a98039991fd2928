package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// The [replicator] defaults of the replications' own settings are the
// engine's, and each key reaches the node.
func TestJobDefaultsFromConfig(t *testing.T) {
	got, err := replicator.JobDefaultsFromConfig(config.Default())
	require.NoError(t, err)
	socket, err := couch.ParseSocketOptions("[{keepalive, true}, {nodelay, true}]")
	require.NoError(t, err)
	require.Equal(t, replicator.JobDefaults{
		WorkerProcesses: engine.WorkerProcessesDefault, WorkerBatchSize: engine.WorkerBatchSizeDefault,
		HTTPConnections: engine.HTTPConnectionsDefault, ConnectionTimeout: engine.ConnectionTimeoutDefault,
		RetriesPerRequest: engine.RetriesPerRequestDefault, CheckpointInterval: engine.CheckpointIntervalDefault,
		SocketOptions: &socket, MissingDocRetry: engine.MissingDocRetryDefault,
		RequestTimeout: couch.RequestTimeoutDefault, MaxDocIDLength: engine.MaxDocIDLengthDefault,
	}, got)

	cfg, err := config.FromMap(map[string]map[string]string{"replicator": {
		"checkpoint_interval": "1000", "retries_per_request": "0", "use_bulk_get": "false", "worker_processes": "8",
		"socket_options": "[{nodelay, false}, {sndbuf, 65536}]", "request_timeout": "60000",
		"missing_doc_retry_msec": "500", "max_document_id_length": "200",
	}})
	require.NoError(t, err)
	got, err = replicator.JobDefaultsFromConfig(cfg)
	require.NoError(t, err)
	require.Equal(t, time.Second, got.CheckpointInterval)
	require.Equal(t, -1, got.RetriesPerRequest, "0 in the file: no retries")
	require.True(t, got.NoBulkGet)
	require.Equal(t, 8, got.WorkerProcesses)
	require.Equal(t, "[{nodelay, false}, {sndbuf, 65536}]", got.SocketOptions.String())
	require.Equal(t, time.Minute, got.RequestTimeout)
	require.Equal(t, 500*time.Millisecond, got.MissingDocRetry)
	require.Equal(t, 200, got.MaxDocIDLength)
	require.Empty(t, cfg.Warnings(), "checkpoint_interval and socket_options are known keys now")

	for opts, want := range map[string]string{
		"[{buffer, 1024}]":   "[replicator] socket_options: buffer (the Erlang runtime's own receive buffer) has no equivalent",
		"[{linger, {true}}]": "socket_options: linger is not supported",
		"{nodelay, true}":    "expected a list",
	} {
		cfg, err := config.FromMap(map[string]map[string]string{"replicator": {"socket_options": opts}})
		require.NoError(t, err)
		_, err = replicator.JobDefaultsFromConfig(cfg)
		require.ErrorIs(t, err, config.ErrInvalidValue)
		require.ErrorContains(t, err, want)
	}
}

// The TLS and authentication keys: secure defaults, files read (and
// refused) at start-up, the key passphrase never in an error.
func TestClientSettingsFromConfig(t *testing.T) {
	got, err := replicator.ClientSettingsFromConfig(config.Default())
	require.NoError(t, err)
	require.Equal(t, couch.AuthSession, got.Auth)
	require.Equal(t, couch.SessionRefreshIntervalDefault, got.SessionRefreshInterval)
	// Verified by VerifyConnection, against the system's roots of the
	// moment (cacert_reload_interval_hours).
	require.Equal(t, couch.VerifyCertificatesDefault, got.TLS.VerifyConnection != nil)
	require.Nil(t, got.TLS.RootCAs, "the system's roots")
	require.Equal(t, "24", keyDefault(t, "cacert_reload_interval_hours"))
	require.Equal(t, "3", keyDefault(t, "ssl_certificate_max_depth"))
	require.EqualValues(t, couch.CertificateMaxDepthDefault, 3)

	ca := couchtest.NewCA(t, "root")
	certFile, keyFile := couchtest.WriteKeyPair(t, ca.Client(t, "replicator"))
	tests := []struct {
		name string
		keys map[string]string
		want string // "" for success
	}{
		{"basic only", map[string]string{"auth_plugins": "couch_replicator_auth_noop"}, ""},
		{"CA and client certificate", map[string]string{"ssl_trusted_certificates_file": ca.WriteCert(t), "cert_file": certFile, "key_file": keyFile,
			"ssl_certificate_max_depth": "0", "session_refresh_interval_sec": "60"}, ""},
		{"verification off", map[string]string{"verify_ssl_certificates": "false"}, ""},
		{"missing CA file", map[string]string{"ssl_trusted_certificates_file": "/nonexistent/ca.pem"},
			"[replicator] ssl_trusted_certificates_file: open /nonexistent/ca.pem: no such file or directory"},
		{"key without certificate", map[string]string{"key_file": keyFile, "password": "pass-phrase-77"}, "key_file is set but cert_file is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.FromMap(map[string]map[string]string{"replicator": tt.keys})
			require.NoError(t, err)
			got, err := replicator.ClientSettingsFromConfig(cfg)
			if tt.want != "" {
				require.ErrorIs(t, err, config.ErrInvalidValue)
				require.ErrorContains(t, err, tt.want)
				require.NotContains(t, err.Error(), "pass-phrase-77")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.keys["auth_plugins"] == "couch_replicator_auth_noop", got.Auth == couch.AuthBasic)
			require.Equal(t, tt.keys["verify_ssl_certificates"] != "false", got.TLS.VerifyConnection != nil)
			require.Equal(t, tt.keys["cert_file"] != "", len(got.TLS.Certificates) == 1)
			if tt.keys["session_refresh_interval_sec"] == "60" {
				require.Equal(t, time.Minute, got.SessionRefreshInterval)
			}
		})
	}
	_, err = config.FromMap(map[string]map[string]string{"replicator": {"auth_plugins": "couch_replicator_auth_oauth"}})
	require.ErrorContains(t, err, "is not one of couch_replicator_auth_session, couch_replicator_auth_noop")
	_, err = config.FromMap(map[string]map[string]string{"replicator": {"auth_plugins": " , "}})
	require.ErrorContains(t, err, "[replicator] auth_plugins: name couch_replicator_auth_session")
}

// keyDefault is the registry's default of a [replicator] key.
func keyDefault(t *testing.T, name string) string {
	t.Helper()
	for _, k := range config.Keys() {
		if k.Section == "replicator" && k.Name == name {
			return k.Default
		}
	}
	t.Fatalf("no key [replicator] %s", name)
	return ""
}
