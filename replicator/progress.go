package replicator

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Progress is the running jobs' live counters (key 23, see
// replicator/scheduler's doc.go, "Live progress"): a RunProgress per run,
// which the nodes write and the views show in place of the counters of a
// job's data while they belong to the job's current run and are newer.
// The job's removal removes them (Store).
type Progress struct {
	s   *Store
	sub subspace.Subspace // (23)
}

// RunProgress is a running job's live counters as its node last wrote
// them (Progress).
type RunProgress struct {
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
	// target took, every write of the run answered (Progress.RunEnd).
	Ended bool `json:"ended,omitempty"`
}

// ProgressWrite is one change of Progress.Write: the progress of the run
// (Node, Start) of job JobID set to Progress (whose Node and Start name
// the run then), or removed when Progress is nil.
type ProgressWrite struct {
	JobID    string
	Node     string
	Start    int64
	Progress *RunProgress
}

// progressPageMax is the most writes Progress.Write makes in one
// transaction: a progress value is about 400 bytes, so a page writes
// about 100 kB.
const progressPageMax = 250

// progressKey is the key of the progress of one run of a job: a run's
// end removes its own value, never that of a run of the job started
// since, on this node or another.
func (p *Progress) key(jobID, node string, start int64) kv.Key {
	return p.sub.Pack(tuple.Tuple{jobID, node, start})
}

// clear removes the progress of every run of a job, in tr.
func (p *Progress) clear(tr kv.Transaction, jobID string) {
	tr.ClearRange(prefixRange(p.sub, tuple.Tuple{jobID}))
}

// Write applies writes in transactions of blind writes (at most
// progressPageMax each): they read nothing, so they conflict with
// nothing, and one run again after commit_unknown_result writes the same
// values. Each run has a key of its own, so removing the progress of a
// run that ended never removes that of a run of the same job started
// since. On an error, the pages before it were written.
func (p *Progress) Write(ctx context.Context, writes []ProgressWrite) error {
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
		if _, err := kv.Transact(ctx, p.s.db, func(tr kv.Transaction) (any, error) {
			for i, w := range page {
				if pvals[i] == nil {
					tr.Clear(p.key(w.JobID, w.Node, w.Start))
				} else {
					tr.Set(p.key(w.JobID, w.Progress.Node, w.Progress.Start), pvals[i])
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
// node that ran it stores them once the run has stopped (RunProgress.Ended).
// It takes them (removes the value) and returns them; nil when ctx ended
// first (the node dead or cut off from the store: its run stops when its
// hold lapses, and nothing is stored).
func (p *Progress) RunEnd(ctx context.Context, jobID, node string, start int64) (*engine.Stats, error) {
	key := p.key(jobID, node, start)
	// found survives the retry loop: an attempt that read the record and
	// cleared it may commit although its commit reported
	// commit_unknown_result; the retry then finds the key empty and gives
	// the counters the first attempt read.
	var found *RunProgress
	var b kv.Backoff
	for {
		type got struct {
			p     *RunProgress
			watch kv.FutureNil
		}
		g, err := kv.Transact(ctx, p.s.db, func(tr kv.Transaction) (got, error) {
			v, err := tr.Get(key).Get()
			if err != nil {
				return got{}, err
			}
			var rp RunProgress
			switch {
			case v != nil && json.Unmarshal(v, &rp) == nil && rp.Ended:
				found = &rp
				tr.Clear(key)
				return got{p: &rp}, nil
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
			// A watch may fail (future_version, too many watches, a
			// transient error): the record is read again, and watched anew.
			if b.WaitAny(ctx, err) != nil {
				return nil, nil
			}
		}
	}
}

// overlay reads, in tr, the progress of the running jobs among jobs and
// puts into each job's data the counters of its current run when they
// are not older than the data's.
func (p *Progress) overlay(tr kv.ReadTransaction, jobs []PageJob) error {
	futs := make([]kv.FutureByteSlice, len(jobs))
	for i, j := range jobs {
		if j.State == fdbjobs.Running && j.Data != nil && j.Data.State == StateRunning {
			futs[i] = tr.Get(p.key(j.ID, j.Data.Node, j.Data.LastStart))
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
		var rp RunProgress
		if json.Unmarshal(v, &rp) != nil {
			continue // a value this version cannot read: the data's counters
		}
		d := jobs[i].Data
		// Counters read in the millisecond the data was written are as
		// new as the data's (a run's first progress write often is):
		// a run's counters only grow, so they win a tie.
		if rp.Node == d.Node && rp.Start == d.LastStart && rp.At >= d.LastUpdated {
			d.Stats = rp.Stats
			if rp.Sync != nil {
				d.Sync = rp.Sync
			}
		}
	}
	return nil
}
