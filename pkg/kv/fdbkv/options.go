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
