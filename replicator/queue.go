package replicator

import (
	"context"
	"encoding/json"

	"github.com/fdbrep/fdbrep/fdbjobs"
)

// The rep_jobs queue as the replication nodes take from it and the
// control plane follows it: each method is its fdbjobs.Client namesake
// for JobType, in a transaction of its own. The nodes take and count jobs
// through these, never through fdbjobs directly, so that every change of
// a rep_jobs job goes through the Store.

// AcceptBatch takes up to n pending jobs and makes them running
// (fdbjobs.Client.AcceptBatch): fdbjobs.ErrNotFound when none came before
// opts.Timeout.
func (s *Store) AcceptBatch(ctx context.Context, n int, opts fdbjobs.AcceptOptions) ([]*fdbjobs.Job, error) {
	return s.jobs.AcceptBatch(ctx, JobType, n, opts)
}

// DueTime returns the latest scheduled time of the n pending jobs due
// earliest at or before maxSTime (Unix ms), and how many there are
// (fdbjobs.Client.DueTime), in a snapshot read.
func (s *Store) DueTime(ctx context.Context, maxSTime int64, n int) (int64, int, error) {
	return s.jobs.DueTime(ctx, nil, JobType, maxSTime, n)
}

// PendingCount counts the pending jobs scheduled at or before maxSTime
// (Unix ms), up to limit (fdbjobs.Client.PendingCount), in a snapshot
// read.
func (s *Store) PendingCount(ctx context.Context, maxSTime int64, limit int) (int, error) {
	return s.jobs.PendingCount(ctx, nil, JobType, maxSTime, limit)
}

// Reenqueue makes running job jobID pending again at once and reports
// whether it was running (fdbjobs.Client.Reenqueue); the re-enqueue hook
// keeps its data and index entries true.
func (s *Store) Reenqueue(ctx context.Context, jobID string) (bool, error) {
	return s.jobs.Reenqueue(ctx, nil, JobType, jobID)
}

// SubscribeJob follows job jobID's state from this process
// (fdbjobs.Client.Subscribe): its current state and data, and a nil
// Subscription when it is finished; fdbjobs.ErrNotFound when it is
// missing.
func (s *Store) SubscribeJob(ctx context.Context, jobID string) (*fdbjobs.Subscription, fdbjobs.State, json.RawMessage, error) {
	return s.jobs.Subscribe(ctx, nil, JobType, jobID)
}
