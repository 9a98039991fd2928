package replicator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// The [replicator] keys of the cluster-wide settings (Config), each
// declared once: its default is this package's constant.
var (
	keyJobTimeout = config.RegisterDuration("replicator", "job_timeout_sec", time.Second, JobTimeoutDefault, 3*time.Second, time.Hour,
		"A running job whose node sends no heartbeat for this long is given to another node (the rep_jobs activity timeout); every node must use the same value.")
	keyJobShards = config.RegisterInt("replicator", "job_shards", JobShardsDefault, 1, fdbjobs.ShardsMax,
		"Shards of the replication job queue: the nodes' acceptors take from different shards, so use at least as many as the acceptors of all replication nodes (max_acceptors each); a replication node raises it to the number of replication nodes when there are more, at its start. Changing it loses no job. Every node must use the same value.")
	keyMaxHistory = config.RegisterInt("replicator", "max_history", MaxHistoryDefault, 1, 1000,
		"Events kept in a job's history.", config.Live(config.ApplyAll))
	keyStartupJitter = config.RegisterDuration("replicator", "startup_jitter", time.Millisecond, StartupJitterDefault, time.Millisecond, config.Forever,
		"Milliseconds an acceptor that finds no runnable job waits at most (a random part of it, and at most the interval) before it looks again; a job enqueued meanwhile wakes it at once.",
		config.Live(config.ApplyAll))
	keyUsageCoeff = config.RegisterFloat("replicator", "usage_coeff", UsageCoeffDefault, 0.000001, 1,
		"Fair share: decay of a replicator database's usage (its jobs' run time) per interval, as CouchDB's (K1 of the fair-share RFC). Lower values forget usage faster.",
		config.Live(config.ApplyAll))
	keyPriorityCoeff = config.RegisterFloat("replicator", "priority_coeff", PriorityCoeffDefault, 0.000001, 1,
		"Fair share: decay of every job's priority per interval, as CouchDB's (K2 of the fair-share RFC): jobs that waited move towards the front of the queue. Lower values forget faster; 1 never forgets.",
		config.Live(config.ApplyAll))
	keyFairShareWindow = config.RegisterDuration("replicator", "fair_share_window_sec", time.Second, FairShareWindowDefault, 0, config.Forever,
		"Fair share: how far ahead pending jobs are ordered by priority; a priority that would take longer than this to decay to 1 counts as that. 0 disables fair share (jobs run in the order they were enqueued).",
		config.Live(config.ApplyAll))
	keyReplicateNoNodeTimeout = config.RegisterDuration("replicator", "replicate_no_node_timeout_msec", time.Millisecond, ReplicateNoNodeTimeoutDefault, time.Millisecond, config.Forever,
		"A POST /_replicate that has waited this long without a change of its job, and finds then no replication node alive in the cluster, answers 500 timeout naming the cause; the job stays pending and starts when a node joins. While a replication node is alive it waits for its replication to run (continuous) or end (one-shot) however long that takes, as CouchDB does.",
		config.Live(config.ApplyFrontend))
	keyEndpointProtocols = config.RegisterList("replicator", "valid_endpoint_protocols", EndpointProtocolsDefault,
		"URL schemes a replication's source and target may use, as CouchDB 3.3's: https alone forbids plaintext endpoints. A _replicator document with another scheme is refused (403 forbidden, \"endpoint has an invalid url\"), so is a POST /_replicate (400 invalid_replication), and a job stored before the change fails when a node starts it, as in CouchDB.",
		EndpointProtocolsDefault, config.Live(config.ApplyAll))
	keyProxyProtocols = config.RegisterList("replicator", "valid_proxy_protocols", ProxyProtocolsDefault,
		"URL schemes a replication's proxy, source_proxy and target_proxy may use, as CouchDB 3.3's (https since 3.5); another is refused as valid_endpoint_protocols refuses an endpoint, with \"proxy has an invalid url\".",
		ProxyProtocolsDefault, config.Live(config.ApplyAll))
	keyEndpointProtocolsLog = config.RegisterBool("replicator", "valid_endpoint_protocols_log", false,
		"Log (at warn, \"security warning\") each replication added with an http:// source or target, naming its document or user and the endpoint, and count it in couch_replicator.jobs.insecure, as CouchDB 3.4 logs them: the api_frontend node that takes the document write or POST /_replicate does.",
		config.Live(config.ApplyFrontend))
	keyMaxUserConnectionTimeout = config.RegisterDuration("replicator", "max_user_connection_timeout", time.Millisecond, MaxUserConnectionTimeoutDefault, time.Millisecond, engine.ConnectionTimeoutMax,
		"Largest connection_timeout, in milliseconds, a replication may ask when a user who is not a server admin writes it (its _replicator document, 403 forbidden, or its POST /_replicate, 400 bad_request, naming this key); server admins may ask up to an hour. A request to a peer that never answers holds its replication's slot this long at most before the run retries or crashes (docs/COMPAT.md, \"Per-user limits\").",
		config.Live(config.ApplyFrontend))
	keyMaxReplicationsPerUser = config.RegisterInt("replicator", "max_replications_per_user", MaxReplicationsPerUserDefault, 1, config.Unbounded,
		"Most unfinished replications (pending, running, crashing or parked: documents in every _replicator database, and POST /_replicate) a user who is not a server admin may have; a write that would add one more is refused, 403 forbidden naming this key. A server admin's write is never refused (its replications count in their owner's number all the same).",
		config.Live(config.ApplyFrontend))
)

// The server UUID: CouchDB's [couchdb] uuid, which an operator brings
// from the CouchDB whose replications move in (their ids, and so their
// checkpoints, depend on it), and fdbrep's switch to change it.
var (
	keyServerUUIDConfig = config.RegisterString("couchdb", "uuid", "",
		"The server UUID, the first input of every replication id, as CouchDB's: 32 hex digits. Empty: the one the store holds, made at its first start. "+
			"To move replications in from a CouchDB with their checkpoints, set that server's (curl http://old:5984/_node/_local/_config/couchdb/uuid) "+
			"before they move in (README, Migrating from CouchDB). A store that holds another refuses to start, saying so, unless replace_uuid is set.", nil)
	keyReplaceServerUUID = config.RegisterBool("couchdb", "replace_uuid", false,
		"fdbrep: at start, make [couchdb] uuid the server UUID of a store that holds another (flag -replace-uuid). Every replication id changes: "+
			"replications start again without their checkpoints, unless they find some under the new id (those the CouchDB of that UUID wrote). "+
			"Stop every node first, and unset it afterwards.")
)

// ServerUUIDFromConfig returns the server UUID c's [couchdb] uuid sets
// ("" when none: the store's) and whether replace_uuid is set (see
// Store.EnsureServerUUID).
func ServerUUIDFromConfig(c *config.Config) (uuid string, replace bool) {
	return keyServerUUIDConfig.Get(c), keyReplaceServerUUID.Get(c)
}

// isServerUUID reports 32 hex digits, the form of CouchDB's UUIDs.
func isServerUUID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return true
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// The [replicator] defaults of the replications' own settings
// (JobDefaults): the engine's defaults and bounds.
var (
	keyWorkerProcesses = config.RegisterInt("replicator", "worker_processes", engine.WorkerProcessesDefault, 1, engine.WorkerProcessesMax,
		"Default worker_processes of a replication that does not set it: concurrent workers per replication.", config.Live(config.ApplyReplication))
	keyWorkerBatchSize = config.RegisterInt("replicator", "worker_batch_size", engine.WorkerBatchSizeDefault, 1, engine.WorkerBatchSizeMax,
		fmt.Sprintf("Default worker_batch_size: changes each worker replicates at a time (worker_processes × worker_batch_size is at most %d).", engine.WorkerRowsMax),
		config.Live(config.ApplyReplication))
	keyHTTPConnections = config.RegisterInt("replicator", "http_connections", engine.HTTPConnectionsDefault, 1, engine.HTTPConnectionsMax,
		"Default http_connections: connections per endpoint and replication.", config.Live(config.ApplyReplication))
	keyConnectionTimeout = config.RegisterDuration("replicator", "connection_timeout", time.Millisecond, engine.ConnectionTimeoutDefault, time.Millisecond, engine.ConnectionTimeoutMax,
		"Default connection_timeout, in milliseconds: a request whose peer stays silent this long, or sends less than 1 KiB in that time (a trickle), fails at once, and the replication crashes with the reason (only a first stall on a reused connection is retried).",
		config.Live(config.ApplyReplication))
	keyRetriesPerRequest = config.RegisterInt("replicator", "retries_per_request", engine.RetriesPerRequestDefault, 0, engine.RetriesPerRequestMax,
		"Default retries_per_request: retries of a failed request before the replication crashes.", config.Live(config.ApplyReplication))
	keyCheckpointInterval = config.RegisterDuration("replicator", "checkpoint_interval", time.Millisecond, engine.CheckpointIntervalDefault, time.Millisecond, engine.CheckpointIntervalMax,
		"Default checkpoint_interval, in milliseconds, between checkpoints of a replication.", config.Live(config.ApplyReplication))
	keyUseCheckpoints = config.RegisterBool("replicator", "use_checkpoints", true,
		"Default use_checkpoints: write checkpoint documents on the endpoints.", config.Live(config.ApplyReplication))
	keyUseBulkGet = config.RegisterBool("replicator", "use_bulk_get", true,
		"Default use_bulk_get: fetch documents with _bulk_get when the source supports it.", config.Live(config.ApplyReplication))
	keyRequestTimeout = config.RegisterDuration("replicator", "request_timeout", time.Millisecond, couch.RequestTimeoutDefault, time.Millisecond, config.Forever,
		"Milliseconds a replication's request may take in all (connecting, sending, the whole answer) before it fails as a timeout, as a silent peer's does (connection_timeout); changes feeds are exempt, as in CouchDB. infinity: no limit but connection_timeout's. Applies to the runs started from then on.",
		config.Live(config.ApplyReplication), config.OrInfinity())
	keyMissingDocRetry = config.RegisterDuration("replicator", "missing_doc_retry_msec", time.Millisecond, engine.MissingDocRetryDefault, time.Millisecond, time.Hour,
		"Milliseconds a replication waits before it asks again for revisions its source's changes feed listed but open_revs answered missing (a cluster's copies not yet in step); missing again, they fail the run. Applies to the runs started from then on.",
		config.Live(config.ApplyReplication))
	keyMaxDocIDLength = config.RegisterInt("replicator", "max_document_id_length", engine.MaxDocIDLengthDefault, 0, config.Unbounded,
		"Longest document id a replication copies: a document whose id is longer is skipped, logged at error and counted in the replication's doc_write_failures, as CouchDB does. 0 or infinity: no limit. Applies to the runs started from then on.",
		config.Live(config.ApplyReplication), config.InUnit("bytes"), config.OrInfinity())
	keySocketOptions = config.RegisterString("replicator", "socket_options", couch.SocketOptionsDefault,
		"Default socket_options, in CouchDB's syntax: TCP options of the replications' connections. fdbrep applies keepalive, nodelay, sndbuf, recbuf (bytes, at most 64 MiB) and priority (0 to 6, Linux); any other option stops the node with its name. A replication's own socket_options replace these. CouchDB's default turns nodelay off; fdbrep keeps it on (see COMPAT.md).",
		nil, config.Live(config.ApplyReplication))
)

// The [replicator] keys of the endpoints' TLS and authentication
// (engine.ClientSettings), whose defaults are package couch's.
var (
	keyVerifyCertificates = config.RegisterBool("replicator", "verify_ssl_certificates", couch.VerifyCertificatesDefault,
		"Verify the certificates of https endpoints (chain to a trusted root, host name, ssl_certificate_max_depth). CouchDB's default is false; fdbrep's is true because the endpoints' passwords travel over these connections (see COMPAT.md).")
	keyTrustedCertificates = config.RegisterString("replicator", "ssl_trusted_certificates_file", "",
		"PEM file of the CA certificates trusted for https endpoints; empty trusts the system's roots. Read at start-up: a missing or unreadable file stops the node.", nil)
	keyCertificateMaxDepth = config.RegisterInt("replicator", "ssl_certificate_max_depth", couch.CertificateMaxDepthDefault, 0, couch.CertificateMaxDepthMax,
		"Intermediate certificates allowed between an endpoint's certificate and a trusted root (0: the root signs it directly).")
	keyCertFile = config.RegisterString("replicator", "cert_file", "",
		"PEM file of the client certificate (with its intermediates) presented to https endpoints that ask for one; set with key_file.", nil)
	keyKeyFile = config.RegisterString("replicator", "key_file", "",
		"PEM file of the client certificate's private key (PKCS #1, PKCS #8 or SEC 1; encrypted with password).", nil)
	keyKeyPassword = config.RegisterString("replicator", "password", "",
		"Passphrase of an encrypted key_file (encrypted PKCS #8, or legacy encrypted PEM). Never logged.", nil, config.Secret())
	keyAuthPlugins = config.RegisterList("replicator", "auth_plugins", []string{authSession, authNoop},
		"How the replicator authenticates to endpoints with credentials: with couch_replicator_auth_session it logs in once through POST /_session and sends the cookie (Basic where the endpoint has no usable _session); couch_replicator_auth_noop alone sends Basic on every request.",
		[]string{authSession, authNoop})
	keyConnectionCloseInterval = config.RegisterDuration("replicator", "connection_close_interval", time.Millisecond, couch.IdleConnTimeoutDefault, time.Second, 24*time.Hour,
		"Milliseconds an idle pooled connection to an endpoint is kept open before it is closed, as CouchDB 3.x's.")
	keySessionRefreshInterval = config.RegisterDuration("replicator", "session_refresh_interval_sec", time.Second, couch.SessionRefreshIntervalDefault, time.Second, config.Forever,
		"Seconds after which a session cookie without Max-Age is renewed (a cookie with Max-Age is renewed at 90% of it).")
	keyLoginFailureBudget = config.RegisterInt("replicator", "login_failure_budget", couch.LoginFailureBudgetDefault, 0, 1000,
		"Logins of one user at one endpoint server that the server may refuse, whatever the passwords, within 5 minutes of the first, before this node stops trying passwords that have not worked: a replication with such a password then crashes with login_budget, naming the account and when it may try again, while a password that logged in keeps working. Under CouchDB's [chttpd_auth_lockout] threshold (5), which refuses the account's right password too from this node's address once reached. 0: no budget.")
	keyCACertReload = config.RegisterInt("replicator", "cacert_reload_interval_hours", int64(couch.CACertReloadIntervalDefault/time.Hour), 1, CACertReloadHoursMax,
		"Hours after which the system's CA certificates, which verify https endpoints when ssl_trusted_certificates_file is empty, are read again, as CouchDB 3.5.1 does: certificates added to or removed from the system's store count for new connections within this time, without a restart. On Linux; elsewhere Go asks the system at each verification.",
		config.InUnit("hours"))
)

// CACertReloadHoursMax bounds [replicator] cacert_reload_interval_hours
// (ten years).
const CACertReloadHoursMax = 10 * 365 * 24

// LoginsFromConfig is a replication node's memory of the logins endpoints
// refused (couch.Logins), with [replicator] login_failure_budget.
func LoginsFromConfig(cfg *config.Config) *couch.Logins {
	l := couch.NewLogins(0, nil)
	l.SetBudget(int(keyLoginFailureBudget.Get(cfg)))
	return l
}

// The [replicator] keys of the addresses endpoints may not reach
// (couch.AddressPolicy, AddressPolicyFromConfig), whose defaults are
// package couch's. Every node applies them: api_frontend nodes when a
// document or a POST /_replicate is written, replication nodes at each
// connect.
var (
	keyDeniedNetworks = config.RegisterList("replicator", "denied_endpoint_networks", strings.Split(couch.DeniedNetworksDefault, ","),
		"Networks (CIDR, or single addresses) that no replication endpoint or proxy may be at, checked when a document or a POST /_replicate is written (its literal addresses, and the addresses its host names resolve to then) and at each connect, after DNS resolution. A document naming one is refused (403 forbidden); a name that resolves to one only later makes the job crash forbidden_address, and no connection is made. The default: link-local (cloud metadata services, 169.254.169.254), 0.0.0.0/8 and :: (which reach the local host), multicast, and the metadata addresses of AWS over IPv6 and of Alibaba Cloud. The node's own health port is refused on every local address whatever this says.",
		nil, config.Live(config.ApplyAll))
	keyDenyLoopback = config.RegisterBool("replicator", "deny_loopback_endpoints", couch.DenyLoopbackDefault,
		"Refuse endpoints and proxies on loopback addresses (127.0.0.0/8, ::1), as denied_endpoint_networks does. Off by default: laptops and tests replicate between 127.0.0.1 peers. Turn it on where replication nodes share hosts with other services.",
		config.Live(config.ApplyAll))
	keyDenyPrivate = config.RegisterBool("replicator", "deny_private_endpoints", couch.DenyPrivateDefault,
		"Refuse endpoints and proxies on private addresses (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fc00::/7), as denied_endpoint_networks does. Off by default: many deployments replicate inside private networks. Turn it on where replication nodes sit next to internal services, with the peers' networks in allowed_endpoint_networks.",
		config.Live(config.ApplyAll))
	keyAllowedNetworks = config.RegisterList("replicator", "allowed_endpoint_networks", nil,
		"Networks (CIDR, or single addresses) allowed although denied_endpoint_networks, deny_loopback_endpoints or deny_private_endpoints refuse them: the replication peers inside a denied range. Never the node's own health port. Webhook receivers follow the same rules with loopback always denied: a receiver on 127.0.0.1 needs it here.",
		nil, config.Live(config.ApplyAll))
)

// AddressRulesFromConfig returns the rules of c's [replicator] address
// keys; a list that does not parse is an error wrapping
// config.ErrInvalidValue (which Load and the _config API give first).
func AddressRulesFromConfig(c *config.Config) (couch.AddressRules, error) {
	denied, err := couch.ParseNetworks(keyDeniedNetworks.Get(c))
	if err != nil {
		return couch.AddressRules{}, addressKeyError("denied_endpoint_networks", err)
	}
	allowed, err := couch.ParseNetworks(keyAllowedNetworks.Get(c))
	if err != nil {
		return couch.AddressRules{}, addressKeyError("allowed_endpoint_networks", err)
	}
	return couch.AddressRules{Denied: denied, Allowed: allowed, DenyLoopback: keyDenyLoopback.Get(c), DenyPrivate: keyDenyPrivate.Get(c)}, nil
}

func addressKeyError(key string, err error) error {
	return fmt.Errorf("%w: [replicator] %s: %s", config.ErrInvalidValue, key,
		strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": "))
}

// AddressPolicyFromConfig is a policy with the rules of c (see
// AddressRulesFromConfig).
func AddressPolicyFromConfig(c *config.Config) (*couch.AddressPolicy, error) {
	rules, err := AddressRulesFromConfig(c)
	if err != nil {
		return nil, err
	}
	return couch.NewAddressPolicy(rules), nil
}

// The [replicator] keys of the credentials sealed at rest (Config.Sealer,
// Config.Opener; see SealingFromConfig).
var (
	keySealPublicKey = config.RegisterString("replicator", "seal_public_key_file", "",
		"PEM file of the X25519 public key api_frontend nodes seal endpoint credentials with (passwords, header values, proxy passwords) before a _replicator document or a POST /_replicate stores them; reads show them as *****. Empty: on the embedded store with a data directory, the key pair fdbrep keeps there (seal.key, made at the first start of a node with both roles; with either key set it is not used); elsewhere they are stored as written (the node warns at start, unless its store is in memory). Make the key pair with: openssl genpkey -algorithm X25519 -out seal.key; openssl pkey -in seal.key -pubout -out seal.pub.", nil)
	keySealPrivateKeys = config.RegisterList("replicator", "seal_private_key_files", nil,
		"PEM files of the X25519 private keys replication nodes open sealed credentials with, the current key (seal_public_key_file's) first, then older keys still in use after a rotation: the nodes move every credential stored to the first (the reseal pass, docs/DEPLOY.md), after which an older key can go. Empty: on the embedded store, the data directory's seal.key when there is one (see seal_public_key_file); elsewhere this node runs no replication whose credentials are sealed (each crashes saying so, and waits for a node that holds the key).", nil)
)

// SealingFromConfig reads the sealing keys c names: the public key
// (seal_public_key_file) for an api_frontend node (frontend), the private
// keys (seal_private_key_files) for a replication node (replication); nil for what is not
// configured. A file that cannot be read or is not such a key is an error
// wrapping config.ErrInvalidValue, at start-up.
func SealingFromConfig(c *config.Config, frontend, replication bool) (*seal.Sealer, *seal.Opener, error) {
	var s *seal.Sealer
	var o *seal.Opener
	var err error
	if path := keySealPublicKey.Get(c); frontend && path != "" {
		if s, err = seal.LoadPublicKey(path); err != nil {
			return nil, nil, fmt.Errorf("%w: [replicator] seal_public_key_file: %w", config.ErrInvalidValue, err)
		}
	}
	if paths := keySealPrivateKeys.Get(c); replication && len(paths) > 0 {
		if o, err = seal.LoadPrivateKeys(paths...); err != nil {
			return nil, nil, fmt.Errorf("%w: [replicator] seal_private_key_files: %w", config.ErrInvalidValue, err)
		}
	}
	return s, o, nil
}

// CouchDB's names of the replicator's ways to authenticate (auth_plugins).
const (
	authSession = "couch_replicator_auth_session"
	authNoop    = "couch_replicator_auth_noop"
)

func init() {
	config.RegisterCheck(func(c *config.Config) error {
		if len(keyAuthPlugins.Get(c)) == 0 {
			return fmt.Errorf("%w: [replicator] auth_plugins: name %s, %s or both", config.ErrInvalidValue, authSession, authNoop)
		}
		for _, k := range []config.ListSetting{keyEndpointProtocols, keyProxyProtocols} {
			if len(k.Get(c)) == 0 {
				return fmt.Errorf("%w: [replicator] %s (%s) allows no scheme: name at least one", config.ErrInvalidValue,
					k.Name(), c.Source("replicator", k.Name()))
			}
		}
		return nil
	})
	config.RegisterCheck(func(c *config.Config) error {
		if _, err := AddressRulesFromConfig(c); err != nil {
			return err
		}
		uuid, replace := ServerUUIDFromConfig(c)
		if uuid != "" && !isServerUUID(uuid) {
			return fmt.Errorf("%w: [couchdb] uuid = %q (%s): want 32 hex digits, a CouchDB server's UUID "+
				"(curl http://old:5984/_node/_local/_config/couchdb/uuid), or nothing for the store's", config.ErrInvalidValue, uuid, c.Source("couchdb", "uuid"))
		}
		if replace && uuid == "" {
			return fmt.Errorf("%w: [couchdb] replace_uuid (%s) needs [couchdb] uuid, the UUID to replace the store's with", config.ErrInvalidValue, c.Source("couchdb", "replace_uuid"))
		}
		return nil
	})
}

// FromConfig returns the cluster-wide settings of c's [replicator] and
// [replicator.shares] keys; Metrics, Clock and Logger are the caller's.
func FromConfig(c *config.Config) Config {
	window := keyFairShareWindow.Get(c)
	if window == 0 {
		window = -1 // 0 in the file disables fair share; Config's zero means the default
	}
	return Config{
		JobTimeout:      keyJobTimeout.Get(c),
		JobShards:       int(keyJobShards.Get(c)),
		MaxHistory:      int(keyMaxHistory.Get(c)),
		StartupJitter:   keyStartupJitter.Get(c),
		Shares:          c.AllShares(),
		UsageCoeff:      keyUsageCoeff.Get(c),
		PriorityCoeff:   keyPriorityCoeff.Get(c),
		FairShareWindow: window,

		ReplicateNoNodeTimeout:   keyReplicateNoNodeTimeout.Get(c),
		MaxUserConnectionTimeout: keyMaxUserConnectionTimeout.Get(c),
		MaxReplicationsPerUser:   int(keyMaxReplicationsPerUser.Get(c)),
		Protocols: Protocols{Endpoint: keyEndpointProtocols.Get(c), Proxy: keyProxyProtocols.Get(c),
			LogInsecure: keyEndpointProtocolsLog.Get(c)},
	}
}

// JobDefaultsFromConfig returns the defaults of the replications' own
// settings from c's [replicator] keys; socket_options that fdbrep cannot
// apply is an error wrapping config.ErrInvalidValue.
func JobDefaultsFromConfig(c *config.Config) (JobDefaults, error) {
	retries := int(keyRetriesPerRequest.Get(c))
	if retries == 0 {
		retries = -1 // the engine's "no retries"
	}
	socket, err := couch.ParseSocketOptions(keySocketOptions.Get(c))
	if err != nil {
		return JobDefaults{}, fmt.Errorf("%w: [replicator] %s", config.ErrInvalidValue,
			strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": "))
	}
	return JobDefaults{
		WorkerProcesses:    int(keyWorkerProcesses.Get(c)),
		WorkerBatchSize:    int(keyWorkerBatchSize.Get(c)),
		HTTPConnections:    int(keyHTTPConnections.Get(c)),
		ConnectionTimeout:  keyConnectionTimeout.Get(c),
		RetriesPerRequest:  retries,
		CheckpointInterval: keyCheckpointInterval.Get(c),
		NoCheckpoints:      !keyUseCheckpoints.Get(c),
		NoBulkGet:          !keyUseBulkGet.Get(c),
		SocketOptions:      &socket,
		RequestTimeout:     keyRequestTimeout.Get(c),
		MissingDocRetry:    keyMissingDocRetry.Get(c),
		MaxDocIDLength:     int(keyMaxDocIDLength.Get(c)),
	}, nil
}

// ClientSettingsFromConfig maps [replicator]'s TLS, authentication and
// address keys to the settings of every replication's HTTP clients,
// reading the certificate files: a missing or unreadable file, or a wrong
// key passphrase, is a configuration error here, at start-up. (A node
// replaces Addresses with the policy it shares with its control plane,
// which also knows its own listeners and follows runtime changes.)
func ClientSettingsFromConfig(cfg *config.Config) (engine.ClientSettings, error) {
	depth := int(keyCertificateMaxDepth.Get(cfg))
	if depth == 0 {
		depth = couch.MaxDepthNone
	}
	tlsCfg, err := couch.TLSSettings{
		NoVerify:     !keyVerifyCertificates.Get(cfg),
		CAFile:       keyTrustedCertificates.Get(cfg),
		MaxDepth:     depth,
		CertFile:     keyCertFile.Get(cfg),
		KeyFile:      keyKeyFile.Get(cfg),
		KeyPassword:  keyKeyPassword.Get(cfg),
		CACertReload: time.Duration(keyCACertReload.Get(cfg)) * time.Hour,
	}.Config()
	if err != nil {
		return engine.ClientSettings{}, fmt.Errorf("%w: %s", config.ErrInvalidValue,
			strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": "))
	}
	auth := couch.AuthBasic
	if slices.Contains(keyAuthPlugins.Get(cfg), authSession) {
		auth = couch.AuthSession
	}
	addresses, err := AddressPolicyFromConfig(cfg)
	if err != nil {
		return engine.ClientSettings{}, err
	}
	return engine.ClientSettings{
		TLS:                    tlsCfg,
		Auth:                   auth,
		SessionRefreshInterval: keySessionRefreshInterval.Get(cfg),
		IdleConnTimeout:        keyConnectionCloseInterval.Get(cfg),
		Addresses:              addresses,
	}, nil
}
