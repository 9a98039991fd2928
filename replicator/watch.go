package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// WatchType is the fdbjobs type of the watch jobs: one per watch group of
// parked jobs (see doc.go, "Parking"), which one replication node holds
// and follows, fenced by its job lock like any job.
const WatchType = "rep_watch"

// How a watch follows its source server (WatchData.Mode).
const (
	// WatchDBUpdates: the server's _db_updates feed, from WatchData.Since.
	WatchDBUpdates = "db_updates"
	// WatchPoll: each parked job's exact check in turn, at a bounded rate,
	// where _db_updates is refused or missing (WatchData.Reason says why).
	WatchPoll = "poll"
)

// WatchData is a watch job's data.
type WatchData struct {
	// Group is the watch group it follows (WatchGroupOf).
	Group string `json:"group"`
	// Mode is how it follows the group's server (WatchDBUpdates or
	// WatchPoll; "" before its first run), and Reason why it polls.
	Mode   string `json:"mode,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Cause is why it polls, in a word: "refused" (401, 403: the
	// credentials are not a server admin's) or "missing" (no feed: on
	// CouchDB 3.x, no _global_changes).
	Cause string `json:"cause,omitempty"`
	// Since is the _db_updates sequence it has followed up to: a watch
	// that another node takes over goes on from there and misses nothing
	// the feed kept.
	Since string `json:"since,omitempty"`
	// FeedTried is when a polling watch last asked for _db_updates (Unix
	// ms): it asks again some minutes later.
	FeedTried int64 `json:"feed_tried,omitempty"`
	// Unanswered is since when its server has not answered (Unix ms; 0
	// while it answers): the node logs the first failure and the
	// recovery, not each retry.
	Unanswered int64 `json:"unanswered,omitempty"`
	// Node is the node that follows it, and Updated when it last wrote
	// (Unix ms).
	Node    string `json:"node,omitempty"`
	Updated int64  `json:"updated,omitempty"`
}

// Encode encodes the watch's data.
func (w *WatchData) Encode() json.RawMessage {
	b, _ := json.Marshal(w)
	return b
}

// Kind is WatchType: watch jobs are the arguments of a job layer Runtime's
// worker (NewWatchRuntime).
func (WatchData) Kind() string { return WatchType }

// DecodeWatchData decodes a watch job's data: the Runtime's envelope of
// its WatchData, or the WatchData alone (as ensureWatch adds it).
func DecodeWatchData(raw json.RawMessage) (*WatchData, error) {
	w := &WatchData{}
	if err := fdbjobs.UnmarshalArgs(raw, w); err != nil {
		return nil, fmt.Errorf("replicator: watch data: %w", err)
	}
	return w, nil
}

// NewWatchRuntime returns a job layer Runtime that works the watch jobs
// with worker (see fdbjobs.Runtime): the one runner of held watch jobs.
func (s *Store) NewWatchRuntime(worker fdbjobs.Worker[WatchData], opts fdbjobs.WorkerOptions, ropts fdbjobs.RuntimeOptions) (*fdbjobs.Runtime, error) {
	return newRuntime(s, worker, opts, ropts)
}

// NewJobRuntime returns a job layer Runtime that works the replication
// jobs with worker (see fdbjobs.Runtime): the one runner of held
// replication jobs. The worker holds and ends them itself, through the
// Lifecycle (opts.Manual).
//
// Its sweeper removes the finished transient jobs opts.RetainFinished
// after their last update (the view index marks them), with the Store's
// own keys beside them, then calls opts.OnRemove (nil: none) in the same
// transaction.
func (s *Store) NewJobRuntime(worker fdbjobs.Worker[JobRun], opts fdbjobs.WorkerOptions, ropts fdbjobs.RuntimeOptions) (*fdbjobs.Runtime, error) {
	then := opts.OnRemove
	opts.FinishedAt = finishedAt
	opts.OnRemove = func(ctx context.Context, tr kv.Transaction, jobs []fdbjobs.RemovedJob) error {
		if err := s.onRemove(ctx, tr, jobs); err != nil || then == nil {
			return err
		}
		return then(ctx, tr, jobs)
	}
	return newRuntime(s, worker, opts, ropts)
}

func newRuntime[T fdbjobs.JobArgs](s *Store, worker fdbjobs.Worker[T], opts fdbjobs.WorkerOptions, ropts fdbjobs.RuntimeOptions) (*fdbjobs.Runtime, error) {
	ws := fdbjobs.NewWorkers()
	if err := fdbjobs.AddWorker(ws, worker, opts); err != nil {
		return nil, err
	}
	return fdbjobs.NewRuntime(s.jobs, ws, ropts)
}

// JobRun is the argument type of the replication worker on the job
// layer's Runtime (NewJobRuntime). It decodes nothing: the worker reads
// the job's data from Work.Job and decodes it itself (DecodeJobData), so
// that data that does not decode fails the job as the replicator says
// (bad_job_data), through its Lifecycle.
type JobRun struct{}

// Kind is JobType.
func (JobRun) Kind() string { return JobType }

// UnmarshalJSON keeps nothing (see JobRun).
func (*JobRun) UnmarshalJSON([]byte) error { return nil }

// ensureWatch makes sure group has a watch, in tr (the park of one of its
// jobs): a watch that is pending or running already follows it, and sees
// the job at its next look; one that is gone or finished is added,
// pending at once. It reads the watch's row, so that a watch that ends
// because its group is empty (EndWatch) and a park into the group
// conflict: one of them sees the other.
func (s *Store) ensureWatch(ctx context.Context, tr kv.Transaction, group string) error {
	id := WatchJobID(group)
	st, _, err := s.jobs.Job(ctx, tr, WatchType, id)
	switch {
	case errors.Is(err, fdbjobs.ErrNotFound):
	case err != nil:
		return err
	case st == fdbjobs.Pending || st == fdbjobs.Running:
		return nil
	}
	return s.jobs.Add(ctx, tr, WatchType, id, (&WatchData{Group: group}).Encode(), 0)
}

// EndWatch finishes the watch of group, in tr, when the group has no
// parked job any more (complete: the watch's Work.CompleteTx), and reports
// whether it did; with parked jobs it changes nothing. A park into the
// group meanwhile conflicts with it (ensureWatch).
func (s *Store) EndWatch(tr kv.Transaction, group string, complete func(kv.Transaction) error) (bool, error) {
	any, err := s.AnyParked(tr, group)
	if err != nil || any {
		return false, err
	}
	return true, complete(tr)
}

// setupWatches registers the watch type with jobTimeout and a few shards
// (watch jobs are few: one per source server and user).
func (s *Store) setupWatches(ctx context.Context, jobTimeout time.Duration) error {
	return s.setupType(ctx, WatchType, jobTimeout, watchShards)
}

// setupType registers typ with jobTimeout and shards queue shards, unless
// it has that timeout already.
func (s *Store) setupType(ctx context.Context, typ string, jobTimeout time.Duration, shards int) error {
	if cur, err := s.jobs.TypeTimeout(ctx, nil, typ); err == nil && cur == jobTimeout {
		return nil
	} else if err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
		return err
	}
	if err := s.jobs.SetTypeTimeout(ctx, nil, typ, jobTimeout); err != nil {
		return err
	}
	return s.jobs.SetTypeShards(ctx, nil, typ, shards)
}

// watchShards is the watch type's queue shards.
const watchShards = 4

// Unwatched returns the watch groups that have parked jobs and no watch
// pending or running: none, as long as every park adds its group's watch
// and a watch ends only with its group empty (see doc.go, "Parking"). It
// reads the watch index a group per transaction, each group and its
// watch in one snapshot, for checks (the model test).
func (s *Store) Unwatched(ctx context.Context) ([]string, error) {
	type look struct {
		group     string
		next      kv.Key
		unwatched bool
	}
	var out []string
	var after kv.Key
	for {
		l, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (look, error) {
			rng := subspaceRange(s.k.parked)
			if after != nil {
				rng.Begin = after
			}
			kvs, err := tr.GetRange(rng, kv.RangeOptions{Limit: 1}).GetSliceWithError()
			if err != nil || len(kvs) == 0 {
				return look{}, err
			}
			t, err := s.k.parked.Unpack(kvs[0].Key)
			g, ok := "", false
			if err == nil && len(t) > 0 {
				g, ok = t[0].(string)
			}
			if !ok {
				return look{}, fmt.Errorf("replicator: bad watch index key %x", kvs[0].Key)
			}
			next, err := kv.Strinc(s.k.parked.Pack(tuple.Tuple{g}))
			if err != nil {
				return look{}, err
			}
			st, _, err := s.jobs.Job(ctx, tr, WatchType, WatchJobID(g))
			switch {
			case errors.Is(err, fdbjobs.ErrNotFound):
				return look{g, next, true}, nil
			case err != nil:
				return look{}, err
			}
			return look{g, next, st != fdbjobs.Pending && st != fdbjobs.Running}, nil
		})
		if err != nil || l.group == "" {
			return out, err
		}
		if l.unwatched {
			out = append(out, l.group)
		}
		after = l.next
	}
}
