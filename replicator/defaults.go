package replicator

import (
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// JobDefaults are a node's defaults for the tunables a replication leaves
// unset: CouchDB's [replicator] worker_processes, worker_batch_size,
// http_connections, connection_timeout, retries_per_request,
// checkpoint_interval, use_checkpoints, use_bulk_get and socket_options.
// Zero fields keep the engine's defaults (engine.WorkerProcessesDefault and
// so on).
type JobDefaults struct {
	WorkerProcesses    int
	WorkerBatchSize    int
	HTTPConnections    int
	ConnectionTimeout  time.Duration
	RetriesPerRequest  int // 0: the engine's default; engine's -1: none
	CheckpointInterval time.Duration
	// NoCheckpoints and NoBulkGet make use_checkpoints and use_bulk_get
	// false by default.
	NoCheckpoints bool
	NoBulkGet     bool
	// SocketOptions are the TCP options of a replication that sets none
	// (nil: Go's defaults); a replication's own replace them as a whole.
	SocketOptions *couch.SocketOptions
	// RequestTimeout, MissingDocRetry and MaxDocIDLength are the node's
	// request_timeout, missing_doc_retry_msec and max_document_id_length,
	// which a replication cannot set (see engine.Replication).
	RequestTimeout  time.Duration
	MissingDocRetry time.Duration
	MaxDocIDLength  int
}

// Apply fills rep's unset tunables (rep comes from s) with d.
func (d JobDefaults) Apply(rep engine.Replication, s *Spec) engine.Replication {
	orZero := func(v, def int) int {
		if v == 0 {
			return def
		}
		return v
	}
	rep.WorkerProcesses = orZero(rep.WorkerProcesses, d.WorkerProcesses)
	rep.WorkerBatchSize = orZero(rep.WorkerBatchSize, d.WorkerBatchSize)
	rep.HTTPConnections = orZero(rep.HTTPConnections, d.HTTPConnections)
	rep.RetriesPerRequest = orZero(rep.RetriesPerRequest, d.RetriesPerRequest)
	if rep.ConnectionTimeout == 0 {
		rep.ConnectionTimeout = d.ConnectionTimeout
	}
	if rep.CheckpointInterval == 0 {
		rep.CheckpointInterval = d.CheckpointInterval
	}
	if s.UseCheckpoints == nil {
		rep.DisableCheckpoints = d.NoCheckpoints
	}
	if s.UseBulkGet == nil {
		rep.DisableBulkGet = d.NoBulkGet
	}
	if rep.SocketOptions == nil {
		rep.SocketOptions = d.SocketOptions
	}
	rep.RequestTimeout, rep.MissingDocRetry, rep.MaxDocIDLength = d.RequestTimeout, d.MissingDocRetry, d.MaxDocIDLength
	return rep
}

// Validate checks the defaults against the engine's bounds (errors wrap
// ErrInvalidConfig and name the key).
func (d JobDefaults) Validate() error {
	probe := engine.Replication{
		WorkerProcesses: d.WorkerProcesses, WorkerBatchSize: d.WorkerBatchSize, HTTPConnections: d.HTTPConnections,
		ConnectionTimeout: d.ConnectionTimeout, RetriesPerRequest: d.RetriesPerRequest, CheckpointInterval: d.CheckpointInterval,
	}
	if d.SocketOptions != nil {
		if err := d.SocketOptions.Validate(); err != nil {
			return InvalidConfig("[replicator] %s", strings.TrimPrefix(err.Error(), couch.ErrInvalidOptions.Error()+": "))
		}
	}
	if err := probe.ValidateTunables(); err != nil {
		return InvalidConfig("[replicator] %s", engineReason(err))
	}
	return nil
}
