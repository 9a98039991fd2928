//go:build fdb

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/fdbkv"
)

// fdbBuild reports whether the binary has the FoundationDB backend.
const fdbBuild = true

// fdbWaitRetry is the pause between two probes of a cluster that does not
// answer yet.
const fdbWaitRetry = 5 * time.Second

// openFDB opens the FoundationDB cluster of cfg's [fdb] cluster_file, in
// its tenant unless it is empty, with its TLS settings (every transaction
// starts with
// fdbkv.TransactionTimeoutDefault), and probes it: opening contacts
// nobody, so a wrong cluster file or a cluster that is down would
// otherwise show only as requests that hang. A configuration that cannot
// work (the cluster file missing, unreadable or malformed; the tenant
// missing, or tenants not allowed) stops the node at once with a line
// that says what to check. A cluster that does not answer (down,
// unreachable, its database not created yet) is waited for: a warning
// that says what to check after each probe, until it answers or ctx ends,
// so that a node started before its cluster, or during an outage, comes
// up with it.
func openFDB(ctx context.Context, cfg *config.Config, log *zerolog.Logger) (kv.Database, error) {
	db, err := fdbkv.OpenWithOptions(cfg.String("fdb", "cluster_file"), fdbkv.Options{
		Tenant: cfg.String("fdb", "tenant"),
		TLS: fdbkv.TLS{
			CertificateFile: cfg.String("fdb", "tls_certificate_file"),
			KeyFile:         cfg.String("fdb", "tls_key_file"),
			CAFile:          cfg.String("fdb", "tls_ca_file"),
			VerifyPeers:     cfg.String("fdb", "tls_verify_peers"),
			Refresh:         time.Duration(cfg.Int("fdb", "tls_refresh_sec")) * time.Second,
		},
	})
	if err != nil {
		return nil, err
	}
	for waited := 0; ; waited++ {
		err := kv.Probe(ctx, db, kv.ProbeTimeoutDefault)
		if err == nil {
			if waited > 0 {
				log.Info().Int("probes_failed", waited).Msg("FoundationDB answers: starting")
			}
			return db, nil
		}
		if ctx.Err() != nil {
			_ = db.Close()
			return nil, fmt.Errorf("interrupted while waiting for FoundationDB (%w)", ctx.Err())
		}
		if !fdbTransient(err) {
			_ = db.Close()
			return nil, err
		}
		log.Warn().Err(err).Msg("waiting for FoundationDB")
		select {
		case <-ctx.Done():
		case <-time.After(fdbWaitRetry):
		}
	}
}

// fdbTransient reports whether a failed probe may succeed later without a
// change of configuration: the cluster did not answer in time.
func fdbTransient(err error) bool {
	return kv.HasCode(err, kv.CodeTransactionTimedOut) || kv.HasCode(err, kv.CodeTimedOut) || kv.IsRetryable(err)
}
