package fdbkv

import "time"

// TransactionTimeoutDefault is the timeout every transaction of a
// FoundationDB backend starts with, unless Options says otherwise: an
// operation still waiting after it fails with transaction_timed_out
// (1031), which is not retryable, instead of hanging while the cluster is
// unreachable. Transactions may change it with SetTimeout (0 disables it);
// Reset brings it back. As on FoundationDB, the timeout counts from the
// transaction's creation or Reset, across OnError retries, and also ends
// the watches the transaction set: a watch still waiting after it fails
// with transaction_timed_out, and its owner sets it again.
const TransactionTimeoutDefault = time.Minute

// Options configure OpenWithOptions.
type Options struct {
	// TransactionTimeout is the timeout transactions start with
	// (TransactionTimeoutDefault if 0; negative: none).
	TransactionTimeout time.Duration
	// Tenant, when not empty, names the FoundationDB tenant every
	// transaction runs in: a key space of its own, whose keys the tenant's
	// prefix separates from every other tenant's and which reads as a
	// whole database ("" to "\xff"). The cluster must allow tenants
	// (fdbcli: configure tenant_mode=optional_experimental) and the tenant
	// must exist (CreateTenant); a transaction in a missing one fails with
	// tenant_not_found (2131).
	Tenant string
	// TLS is the client's mutual TLS, for clusters whose cluster file
	// lists :tls addresses; empty files come from FDB_TLS_* variables.
	TLS TLS
}

// timeoutMillis returns the timeout to set on new transactions, 0 for none.
func (o Options) timeoutMillis() int64 {
	switch {
	case o.TransactionTimeout < 0:
		return 0
	case o.TransactionTimeout == 0:
		return TransactionTimeoutDefault.Milliseconds()
	}
	return max(1, o.TransactionTimeout.Milliseconds())
}

// TLSRefreshDefault is how often libfdb_c looks at its certificate, key
// and CA files for a change (TLS.Refresh when 0): a certificate renewed
// on disk is used for new connections within this time, without a
// restart. FoundationDB's own default (the tls_cert_refresh_delay_seconds
// knob) is 12 hours.
const TLSRefreshDefault = 5 * time.Minute

// TLS is the client side of FoundationDB's mutual TLS, used for the
// coordinators and processes a cluster file lists with a :tls suffix.
// FoundationDB's network options are the process's: the first Open sets
// them and every later Open must ask for the same (ErrTLSChanged).
//
// An empty file is taken from libfdb_c's own environment variables
// (FDB_TLS_CERTIFICATE_FILE, FDB_TLS_KEY_FILE, FDB_TLS_CA_FILE,
// FDB_TLS_VERIFY_PEERS), which it reads by itself, so that a node set up
// as FoundationDB's tools are runs unchanged.
type TLS struct {
	// CertificateFile is this client's certificate (PEM), which the
	// cluster's processes verify against their CA (--tls-ca-file).
	CertificateFile string
	// KeyFile is the certificate's private key (PEM, unencrypted).
	KeyFile string
	// CAFile holds the CA certificates (PEM) the cluster's certificates
	// must chain to.
	CAFile string
	// VerifyPeers is FoundationDB's peer verification rules for the
	// cluster's certificates (--tls-verify-peers); empty: its default,
	// Check.Valid=1 (a valid chain to CAFile).
	VerifyPeers string
	// Refresh is how often libfdb_c rereads the files
	// (TLSRefreshDefault if 0).
	Refresh time.Duration
}
