package replicator

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Fair share (seed 001: the fair-share RFC, after Kay and Lauder's Fair
// Share Scheduler) is the job layer's shares of run time (fdbjobs'
// usage.go), configured here: JobType's partitions are the share keys (the
// _replicator database of a job, or "" for transient jobs), their weights
// the databases' shares (Config.Shares), the coefficients CouchDB's. The
// three parts of the algorithm:
//
//  1. Usage. Nodes charge the run time of their jobs per share key
//     (Shares.Charge); once per interval one node folds the charges into
//     the decayed usage, usage = usage × UsageCoeff + charges
//     (Shares.RollUp; K1 of the paper, CouchDB's usage_coeff).
//  2. Decay. Every priority decays by PriorityCoeff per interval (K2,
//     CouchDB's priority_coeff), so that jobs that waited move to the
//     front: see Config.Decay.
//  3. Adjustment. Once per interval every running job's priority grows by
//     usage(Db) × jobs(Db) / shares(Db)² (Config.Increment), where
//     jobs(Db) is the number of the database's jobs waiting or running:
//     the RFC's pending(Db), counted as CouchDB's num_jobs counts it (a
//     database with more jobs does not get more run time for them). A new
//     job starts with one such increment, as if it had run one interval
//     (CouchDB's job_added).
//
// Lower priorities run first (fdbjobs.RunTimeShares has the units).
//
// Scope: fair share is cluster-wide. CouchDB 3.x runs it on each node over
// that node's jobs; with FoundationDB one queue serves every node and a job
// runs on any of them, so usage, the job counts and the queue order are
// shared through the store, and each node adjusts the priorities of the
// jobs it runs and stops its least deserving ones.
//
// A priority becomes a scheduled time (Config.EnqueueTime,
// fdbjobs.RunTimeShares.ScheduledTime): always in the past, so the job is
// runnable at once and the scheduler stays work conserving, in the order
// of the priorities; acceptors take the oldest scheduled time first, the
// lowest priority. Crash backoff uses times in the future, not runnable
// until they pass.
//
// jobs(Db) is read from the view index's counters (kept in the
// transactions that change jobs); a key with no job counted counts as one.

// Usage is the decayed usage (ms) per share key: the job layer's usage of
// JobType's partitions.
type Usage = fdbjobs.Usage

// ShareTable is what fair share knows of the cluster: decayed usage (ms)
// and jobs waiting or running per share key, and the interval of the last
// roll-up (the unit of both decays; 0 before the first).
type ShareTable struct {
	Usage    Usage
	Jobs     map[string]int64
	Interval time.Duration
}

// RunTimeShares is the job layer's rule of shares of run time configured
// as the replicator runs it: CouchDB's coefficients, FairShareWindow, and
// a margin of StartupJitter and a second, which keeps every enqueue time
// at or before the maximum of an Accept that started waiting up to
// StartupJitter ago.
func (c Config) RunTimeShares() fdbjobs.RunTimeShares {
	return fdbjobs.RunTimeShares{UsageCoeff: c.UsageCoeff, PriorityCoeff: c.PriorityCoeff,
		Window: c.FairShareWindow, Margin: c.StartupJitter + time.Second}
}

// Increment is the priority a running job of share key gains per
// interval: usage(key) in µs × jobs(key) / shares(key)².
func (c Config) Increment(key string, t ShareTable) float64 {
	return c.RunTimeShares().Increment(t.Usage[key], t.Jobs[key], c.SharesOf(key))
}

// Decay returns priority p after elapsed time: p × PriorityCoeff^(elapsed
// / interval). A result under 1 is 0 (CouchDB truncates priorities).
func (c Config) Decay(p float64, elapsed, interval time.Duration) float64 {
	return c.RunTimeShares().Decay(p, elapsed, interval)
}

// Adjust returns a running job's priority p after elapsed time, of which
// the job ran for ran: decayed, plus the increment for the part of an
// interval it ran.
func (c Config) Adjust(p float64, key string, t ShareTable, ran, elapsed, interval time.Duration) float64 {
	return c.RunTimeShares().Adjust(p, c.Increment(key, t), ran, elapsed, interval)
}

// EnqueueTime is the scheduled time (Unix ms) of a job enqueued now with
// priority p, priorities decaying by PriorityCoeff per interval.
func (c Config) EnqueueTime(now time.Time, p float64, interval time.Duration) int64 {
	return Millis(c.RunTimeShares().ScheduledTime(now, p, interval))
}

// Shares is the cluster's fair-share usage: the job layer's shares of run
// time of JobType (fdbjobs.Client.ChargeRunTime, RollUpUsage), one
// partition per share key. Its table's job counts come from the Store's
// view index.
type Shares struct {
	s *Store
}

// Table reads the fair-share table with snapshot reads (no
// conflicts). jobs(Db) comes from the view index's counters, read for the
// share keys that have usage (the others' increments are 0): a database's
// documents pending, running or crashing, and for transient jobs ("") the
// unfinished jobs that are not documents of registered databases.
func (sh *Shares) Table(tr kv.ReadTransaction) (ShareTable, error) {
	snap := tr.Snapshot()
	u, err := sh.s.jobs.GetUsage(context.Background(), snap, JobType)
	if err != nil {
		return ShareTable{}, err
	}
	return sh.table(snap, u)
}

// table adds the job counts to usage u.
func (sh *Shares) table(snap kv.ReadTransaction, u fdbjobs.KindUsage) (ShareTable, error) {
	t := ShareTable{Usage: u.Usage, Jobs: map[string]int64{}, Interval: u.Interval}
	keys := make([]string, 0, len(t.Usage))
	uuids := make([]kv.FutureByteSlice, 0, len(t.Usage))
	for key := range t.Usage {
		if key != "" {
			keys = append(keys, key)
			uuids = append(uuids, snap.Get(sh.s.k.dbKey(key)))
		}
	}
	unfinished := []string{StatePending, StateRunning, StateCrashing}
	var counters []kv.Key
	var owners []string
	for i, f := range uuids {
		u, err := f.Get()
		if err != nil {
			return t, err
		}
		if u == nil {
			continue // deleted: its jobs are going
		}
		for _, st := range unfinished {
			counters = append(counters, sh.s.k.dbCountKey(string(u), st))
			owners = append(owners, keys[i])
		}
	}
	_, transient := t.Usage[""]
	if transient {
		counters = append(counters, sh.s.k.jobCountKey())
		owners = append(owners, "")
		// Parked documents are unfinished jobs too (16); parked transient
		// jobs stay counted in the transient bucket (no counter tells them).
		for _, st := range append(unfinished, StateParked) {
			counters = append(counters, sh.s.k.docCountKey(st))
			owners = append(owners, "-")
		}
	}
	ns, err := readCounters(snap, counters)
	if err != nil {
		return t, err
	}
	for i, n := range ns {
		switch owners[i] {
		case "-": // documents of registered databases
			t.Jobs[""] -= n
		default:
			t.Jobs[owners[i]] += n
		}
	}
	if t.Jobs[""] < 0 {
		t.Jobs[""] = 0
	}
	return t, nil
}

// Charge adds run time (ms) per share key to the cluster's charges, once
// whatever the retries (fdbjobs.Client.ChargeRunTime).
func (sh *Shares) Charge(ctx context.Context, charges map[string]int64) error {
	return sh.s.jobs.ChargeRunTime(ctx, JobType, charges, nil)
}

// RollUp folds the charges into the usage once per period (the period
// number is Unix ms / interval; fdbjobs.Client.RollUpUsage): concurrent
// nodes conflict on the period key and only one applies it. It returns
// the share table.
func (sh *Shares) RollUp(ctx context.Context, now time.Time, interval time.Duration, coeff float64) (ShareTable, error) {
	u, err := sh.s.jobs.RollUpUsage(ctx, JobType, now, interval, coeff)
	if err != nil {
		return ShareTable{}, err
	}
	return kv.ReadTransact(ctx, sh.s.db, func(tr kv.ReadTransaction) (ShareTable, error) {
		return sh.table(tr.Snapshot(), u)
	})
}
