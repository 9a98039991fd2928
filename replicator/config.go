package replicator

import (
	"cmp"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// JobType is the fdbjobs type of replication jobs.
const JobType = "rep_jobs"

// Defaults of Config. Durations are CouchDB 4.x's unless noted.
const (
	// JobTimeoutDefault is the rep_jobs activity timeout: a running job
	// whose node sends no heartbeat for this long is re-enqueued by the
	// fdbjobs activity monitor.
	JobTimeoutDefault = 61 * time.Second
	// JobShardsDefault is the number of shards of the rep_jobs queue
	// (fdbjobs.SetTypeShards): set it to at least the acceptors of all
	// replication nodes (the scheduler's MaxAcceptors each, 2 by default).
	// A replication node's Runtime raises it to the replication nodes
	// when there are more, at its start (fdbjobs.Runtime.Start).
	JobShardsDefault = fdbjobs.ShardsDefault
	// MaxHistoryDefault is the number of history events kept per job.
	MaxHistoryDefault = 10
	// StartupJitterDefault bounds the random wait of a node's acceptor that
	// found no runnable job (it also wakes as soon as a job is enqueued);
	// enqueue times keep this margin (see EnqueueTime).
	StartupJitterDefault = 5 * time.Second
	// SharesDefault is a _replicator database's fair-share weight when not
	// configured; SharesMin and SharesMax bound configured values. They
	// are [replicator.shares]' (package config, which checks the section).
	SharesDefault = config.SharesDefault
	SharesMin     = config.SharesMin
	SharesMax     = config.SharesMax
	// UsageCoeffDefault is the fair-share usage decay per interval (K1 of
	// the paper, CouchDB's usage_coeff and its default): an idle
	// database's usage halves every interval.
	UsageCoeffDefault = 0.5
	// PriorityCoeffDefault is the fair-share priority decay per interval
	// (K2, CouchDB's priority_coeff and its default): jobs that waited
	// move towards the front of the queue.
	PriorityCoeffDefault = 0.98
	// FairShareWindowDefault is how far ahead fair share orders the
	// pending jobs (see EnqueueTime): a priority that takes longer than
	// this to decay to 1 counts as that. With PriorityCoeffDefault and a
	// 15 s interval a day covers priorities up to e^116, i.e. all.
	FairShareWindowDefault = 24 * time.Hour
	// ReplicateNoNodeTimeoutDefault is how long POST /_replicate waits
	// for its outcome with no replication node alive before it answers
	// 500 timeout (the job stays pending): long enough for a node that
	// restarts, or starts with the frontend, to join.
	ReplicateNoNodeTimeoutDefault = 10 * time.Second
	// MaxUserConnectionTimeoutDefault is the largest connection_timeout a
	// replication written by a user who is not a server admin may ask (see
	// doc.go, "Per-user limits"): four times CouchDB's default of 30 s,
	// room for a slow peer, while a request to a peer that never answers
	// holds its slot no longer than that (the engine's own maximum, an
	// hour, stays for server admins).
	MaxUserConnectionTimeoutDefault = 2 * time.Minute
	// MaxReplicationsPerUserDefault is how many unfinished replications
	// (documents in every _replicator database and POST /_replicate) a
	// user who is not a server admin may have: generous, far above what a
	// person writes by hand, and it bounds what one user's account (or a
	// script gone wrong) puts in the cluster's queue.
	MaxReplicationsPerUserDefault = 10_000
)

// SubspaceDefault holds the replicator's own keys when NewStore is given
// no subspace.
var SubspaceDefault = subspace.Sub("fdbrep_replicator")

// Defaults of Protocols ([replicator] valid_endpoint_protocols and
// valid_proxy_protocols): CouchDB's, every scheme fdbrep supports.
var (
	EndpointProtocolsDefault = []string{"http", "https"}
	ProxyProtocolsDefault    = []string{"http", "https", "socks5"}
)

// Config holds the cluster-wide settings: every api_frontend and
// replication node of a cluster must use the same values, since they
// decide what is stored and how jobs are ordered. The zero value gives the
// defaults. Node settings are scheduler.Config.
type Config struct {
	JobTimeout time.Duration
	// JobShards is the number of shards of the rep_jobs queue, in [1,
	// fdbjobs.ShardsMax]; changing it loses no job.
	JobShards     int
	MaxHistory    int
	StartupJitter time.Duration

	// Shares maps _replicator database names to fair-share weights in
	// [SharesMin, SharesMax]; missing databases get SharesDefault.
	Shares map[string]int
	// UsageCoeff is the per-interval decay of fair-share usage, in [0, 1].
	// Zero means UsageCoeffDefault; use a tiny positive value for "forget
	// at once".
	UsageCoeff float64
	// PriorityCoeff is the per-interval decay of fair-share priorities, in
	// [0, 1]. Zero means PriorityCoeffDefault; a tiny positive value
	// forgets priorities at once (then jobs run in the order they were
	// enqueued), 1 never forgets them.
	PriorityCoeff float64
	// FairShareWindow: see FairShareWindowDefault. Negative disables fair
	// share (every job is enqueued at the current time).
	FairShareWindow time.Duration

	// ReplicateNoNodeTimeout: POST /_replicate answers ErrTimeout once
	// it has waited this long for a change of its job and no replication
	// node is alive (see ReplicateNoNodeTimeoutDefault). Only the control
	// plane reads it (with a membership, control.Plane.SetMembership), so
	// nodes may differ.
	ReplicateNoNodeTimeout time.Duration

	// Protocols are the URL schemes replications may use, which the
	// control plane checks when a document is written or a POST
	// /_replicate made, and a node when it starts a job.
	Protocols Protocols
	// MaxUserConnectionTimeout and MaxReplicationsPerUser are the limits
	// the control plane holds the replications of users who are not
	// server admins to as they are written (see doc.go, "Per-user
	// limits"; their defaults). Only the control plane reads them.
	MaxUserConnectionTimeout time.Duration
	MaxReplicationsPerUser   int

	// Sealer seals endpoint credentials before a document or a POST
	// /_replicate stores them (the operator's public key, [replicator]
	// seal_public_key_file; see "Credentials at rest" in doc.go). Nil
	// stores them as written. The control plane uses it.
	Sealer *seal.Sealer
	// Opener opens sealed credentials at the start of each run (the
	// operator's private keys, [replicator] seal_private_key_files). Nil:
	// a job whose credentials are sealed crashes saying that this node
	// holds no key, and waits for a node that does. Replication nodes use
	// it.
	Opener *seal.Opener

	// Addresses are the addresses endpoints may not reach ([replicator]
	// denied_endpoint_networks and the rest): the control plane refuses
	// documents and POST /_replicate bodies whose endpoints are there
	// (see control.Plane.ParseDoc). Nil: every address. A process shares
	// one with its replication node's engine (engine.ClientSettings).
	Addresses *couch.AddressPolicy

	// Metrics receives the counters; nil makes a private set. Pass the
	// same Metrics to the control plane and a node in one process to
	// serve one set.
	Metrics *Metrics
	// Clock is the time source (tests pass a fake clock). Defaults to the
	// real clock.
	Clock clockwork.Clock
	// Logger receives log lines; defaults to discarding them.
	Logger *zerolog.Logger
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.JobTimeout = cmp.Or(c.JobTimeout, JobTimeoutDefault)
	c.JobShards = cmp.Or(c.JobShards, JobShardsDefault)
	c.MaxHistory = cmp.Or(c.MaxHistory, MaxHistoryDefault)
	c.StartupJitter = cmp.Or(c.StartupJitter, StartupJitterDefault)
	c.FairShareWindow = cmp.Or(c.FairShareWindow, FairShareWindowDefault)
	c.UsageCoeff = cmp.Or(c.UsageCoeff, UsageCoeffDefault)
	c.PriorityCoeff = cmp.Or(c.PriorityCoeff, PriorityCoeffDefault)
	c.ReplicateNoNodeTimeout = cmp.Or(c.ReplicateNoNodeTimeout, ReplicateNoNodeTimeoutDefault)
	c.MaxUserConnectionTimeout = cmp.Or(c.MaxUserConnectionTimeout, MaxUserConnectionTimeoutDefault)
	c.MaxReplicationsPerUser = cmp.Or(c.MaxReplicationsPerUser, MaxReplicationsPerUserDefault)
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		l := zerolog.Nop()
		c.Logger = &l
	}
	return c
}

// Validate checks a Config with its defaults filled; errors wrap
// ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.MaxHistory < 1:
		return InvalidConfig("max_history %d is under 1", c.MaxHistory)
	case c.StartupJitter < 0:
		return InvalidConfig("startup_jitter %v is negative", c.StartupJitter)
	case c.ReplicateNoNodeTimeout < 0:
		return InvalidConfig("replicate_no_node_timeout %v is negative", c.ReplicateNoNodeTimeout)
	case c.MaxUserConnectionTimeout < time.Millisecond:
		return InvalidConfig("max_user_connection_timeout %v is under a millisecond", c.MaxUserConnectionTimeout)
	case c.MaxUserConnectionTimeout > engine.ConnectionTimeoutMax:
		return InvalidConfig("max_user_connection_timeout %v is over connection_timeout's maximum %v", c.MaxUserConnectionTimeout, engine.ConnectionTimeoutMax)
	case c.MaxReplicationsPerUser < 1:
		return InvalidConfig("max_replications_per_user %d is under 1", c.MaxReplicationsPerUser)
	case c.JobTimeout < 3*time.Millisecond:
		return InvalidConfig("job timeout %v is under 3ms", c.JobTimeout)
	case c.JobShards < 1 || c.JobShards > fdbjobs.ShardsMax:
		return InvalidConfig("job_shards %d is not in [1, %d]", c.JobShards, fdbjobs.ShardsMax)
	case c.UsageCoeff < 0 || c.UsageCoeff > 1:
		return InvalidConfig("usage_coeff %v is not in [0, 1]", c.UsageCoeff)
	case c.PriorityCoeff < 0 || c.PriorityCoeff > 1:
		return InvalidConfig("priority_coeff %v is not in [0, 1]", c.PriorityCoeff)
	}
	for db, s := range c.Shares {
		if s < SharesMin || s > SharesMax {
			return InvalidConfig("shares of %q: %d is not in [%d, %d]", db, s, SharesMin, SharesMax)
		}
	}
	return nil
}

// InvalidConfig returns an error wrapping ErrInvalidConfig.
func InvalidConfig(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
}

// SharesOf returns a share key's fair-share weight.
func (c Config) SharesOf(key string) int {
	if s, ok := c.Shares[key]; ok {
		return s
	}
	return SharesDefault
}
