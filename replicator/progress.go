package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Progress is a running job's live counters as its node last wrote them
// (key 23, see replicator/scheduler's doc.go, "Live progress"): the views
// show them in place of the counters of the job's data when they belong
// to the job's current run and are newer.
type Progress struct {
	// Node and Start name the run: JobData.Node and JobData.LastStart as
	// the run's node wrote them when it started the run.
	Node  string `json:"node"`
	Start int64  `json:"start"`
	// At is when the node read the counters (Unix ms, its clock).
	At    int64        `json:"at"`
	Stats engine.Stats `json:"stats"`
	// Sync is the run's engine.Sync at At (nil from older versions).
	Sync *engine.Sync `json:"sync,omitempty"`
	// Ended marks the final counters of a run that stopped because its
	// job was removed (its replication deleted or cancelled): what the
	// target took, every write of the run answered (RunEnd).
	Ended bool `json:"ended,omitempty"`
}

// ProgressWrite is one change of WriteProgress: the progress of the run
// (Node, Start) of job JobID set to Progress (whose Node and Start name
// the run then), or removed when Progress is nil.
type ProgressWrite struct {
	JobID    string
	Node     string
	Start    int64
	Progress *Progress
}

// progressPageMax is the most writes WriteProgress makes in one
// transaction: a progress value is about 400 bytes, so a page writes
// about 100 kB.
const progressPageMax = 250

// progressKey is the key of the progress of one run of a job: a run's
// end removes its own value, never that of a run of the job started
// since, on this node or another.
func (s *Store) progressKey(jobID, node string, start int64) kv.Key {
	return s.root.Pack(tuple.Tuple{keyProgress, jobID, node, start})
}

// clearProgress removes the progress of every run of a job, in tr.
func (s *Store) clearProgress(tr kv.Transaction, jobID string) {
	tr.ClearRange(prefixRange(s.root, tuple.Tuple{keyProgress, jobID}))
}

// WriteProgress applies writes in transactions of blind writes (at most
// progressPageMax each): they read nothing, so they conflict with
// nothing, and one run again after commit_unknown_result writes the same
// values. Each run has a key of its own, so removing the progress of a
// run that ended never removes that of a run of the same job started
// since. On an error, the pages before it were written.
func (s *Store) WriteProgress(ctx context.Context, writes []ProgressWrite) error {
	ordered := make([]ProgressWrite, 0, len(writes))
	vals := make([][]byte, 0, len(writes))
	for _, w := range writes {
		if w.Progress == nil {
			ordered, vals = append(ordered, w), append(vals, nil)
		}
	}
	for _, w := range writes {
		if w.Progress != nil {
			v, err := json.Marshal(w.Progress)
			if err != nil {
				return err
			}
			ordered, vals = append(ordered, w), append(vals, v)
		}
	}
	for len(ordered) > 0 {
		n := min(len(ordered), progressPageMax)
		page, pvals := ordered[:n], vals[:n]
		if _, err := kv.Transact(ctx, s.db, func(tr kv.Transaction) (any, error) {
			for i, w := range page {
				if pvals[i] == nil {
					tr.Clear(s.progressKey(w.JobID, w.Node, w.Start))
				} else {
					tr.Set(s.progressKey(w.JobID, w.Progress.Node, w.Progress.Start), pvals[i])
				}
			}
			return nil, nil
		}); err != nil {
			return err
		}
		ordered, vals = ordered[n:], vals[n:]
	}
	return nil
}

// RunEndWaitDefault bounds how long RunEnd waits for the final counters of
// a removed job's run: the run's node hears of the removal within the
// store's watch latency and lets its writes in flight finish (at most
// 5 s, the scheduler's halt grace) before it stores them.
const RunEndWaitDefault = 10 * time.Second

// RunEnd waits, until ctx ends, for the final counters of the run
// (node, start) of job jobID, which the caller removed while it ran: the
// node that ran it stores them once the run has stopped (Progress.Ended).
// It takes them (removes the value) and returns them; nil when ctx ended
// first (the node dead or cut off from the store: its run stops when its
// hold lapses, and nothing is stored).
func (s *Store) RunEnd(ctx context.Context, jobID, node string, start int64) (*engine.Stats, error) {
	key := s.progressKey(jobID, node, start)
	// found survives the retry loop: an attempt that read the record and
	// cleared it may commit although its commit reported
	// commit_unknown_result; the retry then finds the key empty and gives
	// the counters the first attempt read.
	var found *Progress
	for {
		type got struct {
			p     *Progress
			watch kv.FutureNil
		}
		g, err := kv.Transact(ctx, s.db, func(tr kv.Transaction) (got, error) {
			v, err := tr.Get(key).Get()
			if err != nil {
				return got{}, err
			}
			var p Progress
			switch {
			case v != nil && json.Unmarshal(v, &p) == nil && p.Ended:
				found = &p
				tr.Clear(key)
				return got{p: &p}, nil
			case v == nil && found != nil:
				return got{p: found}, nil
			}
			return got{watch: tr.Watch(key)}, nil
		})
		switch {
		case ctx.Err() != nil:
			return nil, nil
		case err != nil:
			return nil, err
		case g.p != nil:
			return &g.p.Stats, nil
		}
		if _, err := kv.Await(ctx, g.watch); err != nil && ctx.Err() == nil {
			return nil, err
		}
	}
}

// overlayProgress reads, in tr, the progress of the running jobs among
// jobs and puts into each job's data the counters of its current run
// when they are newer than the data's.
func (s *Store) overlayProgress(tr kv.ReadTransaction, jobs []PageJob) error {
	futs := make([]kv.FutureByteSlice, len(jobs))
	for i, j := range jobs {
		if j.State == fdbjobs.Running && j.Data != nil && j.Data.State == StateRunning {
			futs[i] = tr.Get(s.progressKey(j.ID, j.Data.Node, j.Data.LastStart))
		}
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		v, err := f.Get()
		if err != nil {
			return err
		}
		if v == nil {
			continue
		}
		var p Progress
		if json.Unmarshal(v, &p) != nil {
			continue // a value this version cannot read: the data's counters
		}
		d := jobs[i].Data
		if p.Node == d.Node && p.Start == d.LastStart && p.At > d.LastUpdated {
			d.Stats = p.Stats
			if p.Sync != nil {
				d.Sync = p.Sync
			}
		}
	}
	return nil
}

// ViewJob is Job for the views: the job's data with the live counters of
// its current run (see Progress), its failed documents
// (JobData.FailedDocs) and, for a parked job, its group's watch
// (JobData.Watch), read in one transaction.
func (s *Store) ViewJob(ctx context.Context, jobID string) (*JobData, fdbjobs.State, error) {
	type res struct {
		d  *JobData
		st fdbjobs.State
	}
	r, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (res, error) {
		d, st, err := s.Job(ctx, tr, jobID)
		if err != nil || d == nil {
			return res{}, err
		}
		jobs := []PageJob{{ID: jobID, State: st, Data: d}}
		if err := s.overlayProgress(tr, jobs); err != nil {
			return res{}, err
		}
		failed, err := s.failed.read(tr, jobID)
		if err != nil {
			return res{}, err
		}
		if failed == nil {
			failed = []FailedDoc{}
		}
		d.FailedDocs = &failed
		if d.State == StateParked && d.Parked != nil {
			wst, raw, err := s.jobs.Job(ctx, tr, WatchType, WatchJobID(d.Parked.Group))
			if err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
				return res{}, err
			}
			if err == nil && wst != fdbjobs.Finished {
				d.Watch, _ = DecodeWatchData(raw)
			}
		}
		return res{d: d, st: st}, nil
	})
	return r.d, r.st, err
}
