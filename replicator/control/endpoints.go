package control

import (
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/replicator"
)

// Warnings about a replication just added, which is stored and runs all
// the same: its plaintext endpoints, when [replicator]
// valid_endpoint_protocols_log is on, and the fields of CouchDB's that
// fdbrep ignores.

// warnAdded logs the warnings of spec (nil: none), added as the caller
// names it (the document, or the user of a POST /_replicate), and counts
// it in MetricJobsInsecure when it has an http:// endpoint and the log
// is on.
func (p *Plane) warnAdded(spec *replicator.Spec, ignored []string, name func(*zerolog.Event) *zerolog.Event) {
	for _, f := range ignored {
		name(p.cfg.Logger.Warn()).Str("field", f).Str("reason", replicator.IgnoredFieldReason(f)).
			Msg("replication field not implemented by fdbrep; ignored")
	}
	if spec == nil || !p.conf().Protocols.LogInsecure {
		return
	}
	insecure := replicator.Insecure(spec)
	for _, side := range insecure {
		ep := spec.Source
		if side == "target" {
			ep = spec.Target
		}
		name(p.cfg.Logger.Warn()).Str("endpoint", side).Str("url", ep.Redacted()).
			Msg("security warning: replication has an insecure (http) endpoint ([replicator] valid_endpoint_protocols_log)")
	}
	if len(insecure) > 0 {
		p.m.Inc(replicator.MetricJobsInsecure)
	}
}
