package replicator

import (
	"context"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Fair share (seed 001: the fair-share RFC, after Kay and Lauder's Fair
// Share Scheduler). Shares are per share key: the _replicator database of
// a job, or "" for transient jobs. The three parts of the algorithm:
//
//  1. Usage. Nodes charge the run time of their jobs per share key into
//     atomic counters (Shares.Charge); once per interval one node folds the
//     charges into the decayed usage, usage = usage × UsageCoeff + charges
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
// Lower priorities run first. Usage is stored in milliseconds; priorities
// are computed in microseconds of usage, CouchDB's unit, so that
// priority_coeff has CouchDB's meaning (a priority under 1 counts as 0).
//
// Scope: fair share is cluster-wide. CouchDB 3.x runs it on each node over
// that node's jobs; with FoundationDB one queue serves every node and a job
// runs on any of them, so usage, the job counts and the queue order are
// shared through the store, and each node adjusts the priorities of the
// jobs it runs and stops its least deserving ones.
//
// The pending queue is fdbjobs' scheduled-time index, so a priority
// becomes a time, as the RFC's note on absolute deadlines suggests: a
// pending job's priority P decays as P × K2^(t/interval), so the order of
// pending jobs by priority is the order of the moment τ = now + interval
// × ln(P) / ln(1/K2) at which each priority decays to 1. The job is
// enqueued at τ − FairShareWindow − margin (Config.EnqueueTime), always in
// the past, so it is runnable at once and the scheduler stays work
// conserving; acceptors take the oldest scheduled time first, i.e. the
// lowest priority. Priorities further than FairShareWindow ahead are
// capped there (the least deserving jobs, in the order they were enqueued).
// Crash backoff uses times in the future, not runnable until they pass.
//
// jobs(Db) is read from the view index's counters (kept in the
// transactions that change jobs); a key with no job counted counts as one.

// Usage is the decayed usage (ms) per share key.
type Usage map[string]float64

// ShareTable is what fair share knows of the cluster: decayed usage (ms)
// and jobs waiting or running per share key, and the interval of the last
// roll-up (the unit of both decays; 0 before the first).
type ShareTable struct {
	Usage    Usage
	Jobs     map[string]int64
	Interval time.Duration
}

// Increment is the priority a running job of share key gains per
// interval: usage(key) in µs × jobs(key) / shares(key)².
func (c Config) Increment(key string, t ShareTable) float64 {
	s := float64(c.SharesOf(key))
	return t.Usage[key] * 1000 * float64(max(1, t.Jobs[key])) / (s * s)
}

// Decay returns priority p after elapsed time: p × PriorityCoeff^(elapsed
// / interval). A result under 1 is 0 (CouchDB truncates priorities).
func (c Config) Decay(p float64, elapsed, interval time.Duration) float64 {
	if p <= 0 || elapsed <= 0 || interval <= 0 {
		return max(0, p)
	}
	p *= math.Pow(c.PriorityCoeff, float64(elapsed)/float64(interval))
	if p < 1 {
		return 0
	}
	return p
}

// Adjust returns a running job's priority p after elapsed time, of which
// the job ran for ran: decayed, plus the increment for the part of an
// interval it ran.
func (c Config) Adjust(p float64, key string, t ShareTable, ran, elapsed, interval time.Duration) float64 {
	p = c.Decay(p, elapsed, interval)
	if ran > 0 && interval > 0 {
		p += c.Increment(key, t) * float64(ran) / float64(interval)
	}
	return p
}

// EnqueueTime is the scheduled time (Unix ms) of a job enqueued now with
// priority p, priorities decaying by PriorityCoeff per interval.
func (c Config) EnqueueTime(now time.Time, p float64, interval time.Duration) int64 {
	// The margin keeps every such time at or before the maximum of an
	// Accept that started waiting up to StartupJitter ago.
	t := Millis(now) - (c.StartupJitter + time.Second).Milliseconds()
	if c.FairShareWindow < 0 {
		return t
	}
	w := c.FairShareWindow.Milliseconds()
	off := int64(0)
	if p > 1 && interval > 0 {
		// ln(1/K2) is +Inf for K2 = 0 (no memory: off 0) and 0 for K2 = 1
		// (no decay: every priority is beyond the window).
		ahead := float64(interval.Milliseconds()) * math.Log(p) / math.Log(1/c.PriorityCoeff)
		off = int64(min(float64(w), ahead))
	}
	return t - w + off
}

// Shares is the cluster's fair-share usage (keys 5–8): the nodes' charges
// of run time per share key, and the decayed usage they are rolled up
// into once per interval. Its table's job counts come from the Store's
// view index.
type Shares struct {
	s                      *Store
	usage, charges, tokens subspace.Subspace // (5), (6), (8)
	period                 kv.Key            // (7)
}

func (sh *Shares) usageKey(key string) kv.Key   { return sh.usage.Pack(tuple.Tuple{key}) }
func (sh *Shares) chargesKey(key string) kv.Key { return sh.charges.Pack(tuple.Tuple{key}) }
func (sh *Shares) tokenKey(token string) kv.Key { return sh.tokens.Pack(tuple.Tuple{token}) }

// Table reads the fair-share table with snapshot reads (no
// conflicts). jobs(Db) comes from the view index's counters, read for the
// share keys that have usage (the others' increments are 0): a database's
// documents pending, running or crashing, and for transient jobs ("") the
// unfinished jobs that are not documents of registered databases.
func (sh *Shares) Table(tr kv.ReadTransaction) (ShareTable, error) {
	snap := tr.Snapshot()
	uf := snap.GetRange(subspaceRange(sh.usage), kv.RangeOptions{})
	pf := snap.Get(sh.period)
	t := ShareTable{Usage: Usage{}, Jobs: map[string]int64{}}
	if err := readShareValues(uf, sh.usage, func(key string, f float64) { t.Usage[key] = f }); err != nil {
		return t, err
	}
	pv, err := pf.Get()
	if err != nil {
		return t, err
	}
	_, t.Interval = decodePeriod(pv)
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

// readShareValues calls set for each entry of a (ShareKey) -> (V) range
// whose value is one V; others are skipped.
func readShareValues[V any](f kv.RangeResult, sub subspace.Subspace, set func(key string, v V)) error {
	kvs, err := f.GetSliceWithError()
	if err != nil {
		return err
	}
	for _, e := range kvs {
		if key, ok := shareKeyOf(sub.Unpack(e.Key)); ok {
			if t, err := tuple.Unpack(e.Value); err == nil && len(t) == 1 {
				if v, ok := t[0].(V); ok {
					set(key, v)
				}
			}
		}
	}
	return nil
}

func shareKeyOf(t tuple.Tuple, err error) (string, bool) {
	if err != nil || len(t) != 1 {
		return "", false
	}
	key, ok := t[0].(string)
	return key, ok
}

// decodePeriod reads the period key: the last period rolled up (-1 when
// none) and the interval it was rolled up with (0 when not recorded).
func decodePeriod(v []byte) (int64, time.Duration) {
	if v == nil {
		return -1, 0
	}
	t, err := tuple.Unpack(v)
	if err != nil || len(t) < 1 {
		return -1, 0
	}
	last, ok := t[0].(int64)
	if !ok {
		return -1, 0
	}
	var interval time.Duration
	if len(t) > 1 {
		if ms, ok := t[1].(int64); ok {
			interval = time.Duration(ms) * time.Millisecond
		}
	}
	return last, interval
}

// Charge adds run time (ms) per share key to the cluster's charges.
// The atomic adds are not idempotent, so the transaction also writes a
// token chosen outside the retry loop: a retry that finds the token (its
// earlier attempt committed despite commit_unknown_result) adds nothing.
// A second transaction clears the token afterwards.
func (sh *Shares) Charge(ctx context.Context, charges map[string]int64) error {
	if len(charges) == 0 {
		return nil
	}
	token := sh.tokenKey(uuid.NewString())
	_, err := sh.s.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		v, err := tr.Get(token).Get()
		if err != nil || v != nil {
			return nil, err
		}
		for key, v := range charges {
			if v > 0 {
				tr.Add(sh.chargesKey(key), kv.Int64(v))
			}
		}
		tr.Set(token, nil)
		return nil, nil
	})
	if err != nil {
		return err
	}
	_, _ = sh.s.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.Clear(token)
		return nil, nil
	})
	return nil
}

// RollUp returns usage decayed by coeff^steps plus the charges (ms): the
// usage part of fair share, one step per interval. Entries under 1 ms are
// dropped (an idle database is forgotten).
func (u Usage) RollUp(charges map[string]int64, coeff float64, steps int64) Usage {
	decay := math.Pow(coeff, float64(steps))
	next := Usage{}
	for key, v := range u {
		next[key] = v * decay
	}
	for key, c := range charges {
		next[key] += float64(c)
	}
	for key, v := range next {
		if v < 1 {
			delete(next, key)
		}
	}
	return next
}

// RollUp folds the charges into the usage once per period (the period
// number is Unix ms / interval); concurrent nodes conflict on the period
// key and only one applies it. It returns the share table.
func (sh *Shares) RollUp(ctx context.Context, now time.Time, interval time.Duration, coeff float64) (ShareTable, error) {
	period := Millis(now) / max(1, interval.Milliseconds())
	return kv.Transact(ctx, sh.s.db, func(tr kv.Transaction) (ShareTable, error) {
		pv, err := tr.Get(sh.period).Get()
		if err != nil {
			return ShareTable{}, err
		}
		last, _ := decodePeriod(pv)
		table, err := sh.Table(tr)
		if err != nil {
			return ShareTable{}, err
		}
		if last >= period {
			return table, nil
		}
		steps := period - last
		if last < 0 || steps > 64 {
			steps = 64
		}
		kvs, err := tr.Snapshot().GetRange(subspaceRange(sh.charges), kv.RangeOptions{}).GetSliceWithError()
		if err != nil {
			return ShareTable{}, err
		}
		charges := map[string]int64{}
		for _, e := range kvs {
			if key, ok := shareKeyOf(sh.charges.Unpack(e.Key)); ok {
				charges[key] = kv.DecodeInt64(e.Value)
			}
		}
		next := table.Usage.RollUp(charges, coeff, steps)
		for key, c := range charges {
			if c != 0 {
				// Subtract what was folded: charges added meanwhile stay.
				tr.Add(sh.chargesKey(key), kv.Int64(-c))
			}
		}
		for key := range table.Usage {
			if _, ok := next[key]; !ok {
				tr.Clear(sh.usageKey(key))
			}
		}
		for key, u := range next {
			tr.Set(sh.usageKey(key), tuple.Tuple{u}.Pack())
		}
		tr.Set(sh.period, tuple.Tuple{period, interval.Milliseconds()}.Pack())
		table.Usage, table.Interval = next, interval
		return table, nil
	})
}
