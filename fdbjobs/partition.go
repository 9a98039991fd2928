package fdbjobs

// Partitions (see doc.go, "Partitions"): a job's partition key
// (InsertOptions.Partition: a tenant, a host) and a kind's limit of the
// jobs of one partition that run at once across every node
// (SetPartitionLimit), kept in the store as the partition's running set
// and its waiting set.

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

const (
	// PartitionMaxBytes bounds InsertOptions.Partition.
	PartitionMaxBytes = 128
	// partitionScanExtra is how many running entries beyond its limit a
	// claim reads (entries left by jobs that ended unseen, or by a limit
	// lowered since): a partition with more than that many entries beyond
	// its limit counts as full until its jobs end or the claims that look
	// clear them.
	partitionScanExtra = 32
	// partitionWakeScan is how many waiting entries a job that ends looks
	// at for one to wake (the others' jobs gone, or running already).
	partitionWakeScan = 8
	// partitionReleaseTimeout bounds the transaction that gives back the
	// place of a job taken from its Runtime (releasePartition).
	partitionReleaseTimeout = 5 * time.Second
	// PartitionRecheckMax bounds how long a job waiting for a place goes
	// back for: the kind's Timeout, doubling with each look that found its
	// partition full (the ends of its partition's jobs wake it before).
	PartitionRecheckMax = 10 * time.Minute
	// partitionWakePage is how many waiting jobs a transaction of
	// wakeWaiting moves.
	partitionWakePage = 200
)

// checkPartition validates an InsertOptions.Partition.
func checkPartition(p string) error {
	switch {
	case len(p) > PartitionMaxBytes:
		return fmt.Errorf("%w: partition of %d bytes: at most %d", ErrInvalidArgument, len(p), PartitionMaxBytes)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w: partition %q: not valid UTF-8", ErrInvalidArgument, p)
	}
	return nil
}

func (k keys) partLimitKey(kind string) kv.Key { return k.root.Pack(tuple.Tuple{keyPartLimit, kind}) }

func (k keys) partRunningKey(kind, part, id string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartRunning, kind, part, id})
}

// partHintKey is the hint that jobs of part may wait: added to by each
// claim that makes one wait, cleared by an end that finds none waiting.
func (k keys) partHintKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartHint, kind, part})
}

// partCountKey is the count of part's running entries, kept by the
// claims and ends that write and clear them; absent, or at 0 or below,
// means unknown (a claim counts the entries then).
func (k keys) partCountKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartCount, kind, part})
}

// partClaimKey is where the claims of part conflict with each other: each
// adds a read and a write conflict on it, none writes it.
func (k keys) partClaimKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartClaim, kind, part})
}

var minusOne = kv.Int64(-1)

func (k keys) partWaitingKey(kind, part, id string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartWaiting, kind, part, id})
}

// SetPartitionLimit makes n (1 to LimitMax) the most jobs of kind with the
// same partition (InsertOptions.Partition) that the Runtimes run at once,
// across every node; jobs without a partition are not limited. Changeable
// at run time; in force for the jobs the Runtimes start once their
// Clients have read it (see SetLimit). Jobs running then are not counted
// until they end, and a lowered limit stops none. A raised limit wakes the
// jobs waiting for a place (wakeWaiting: after the change committed, a
// page of 200 per transaction; with tx a caller's Transaction they look
// again at their own time instead). Jobs taken with the lower-level Accept
// neither follow it nor count toward it. tx may be nil, a Database or a
// caller's Transaction.
func (c *Client) SetPartitionLimit(ctx context.Context, tx kv.Transactor, kind string, n int) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if n < 1 || n > LimitMax {
		return fmt.Errorf("%w: partition limit %d outside [1, %d]", ErrInvalidArgument, n, LimitMax)
	}
	raised := false
	err := c.changeTypes(ctx, tx, func(tr kv.Transaction) error {
		old, err := c.readPartLimit(tr, kind)
		// Over the attempts: a retry after commit_unknown_result reads
		// the limit its earlier attempt wrote.
		raised = raised || old != 0 && n > old
		tr.Set(c.k.partLimitKey(kind), tuple.Tuple{int64(n)}.Pack())
		return err
	})
	if err != nil || !raised {
		return err
	}
	return c.wakeWaiting(ctx, tx, kind)
}

// ClearPartitionLimit removes kind's partition limit and wakes the jobs
// waiting for a place (as a raised limit does).
func (c *Client) ClearPartitionLimit(ctx context.Context, tx kv.Transactor, kind string) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if err := c.changeTypes(ctx, tx, func(tr kv.Transaction) error { tr.Clear(c.k.partLimitKey(kind)); return nil }); err != nil {
		return err
	}
	return c.wakeWaiting(ctx, tx, kind)
}

// wakeWaiting moves every job of kind waiting for a place to now, a page
// per transaction (each claims again: a place for those that fit, a wait
// for the others), unless tx is a caller's Transaction, which has not
// committed yet.
func (c *Client) wakeWaiting(ctx context.Context, tx kv.Transactor, kind string) error {
	if _, joined := tx.(kv.Transaction); joined {
		return nil
	}
	token, err := newToken()
	if err != nil {
		return err
	}
	rg := prefixRange(c.k.root, tuple.Tuple{keyPartWaiting, kind})
	for {
		more, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (bool, error) {
			kvs, err := tr.GetRange(rg, kv.RangeOptions{Limit: partitionWakePage}).GetSliceWithError()
			if err != nil {
				return false, err
			}
			woke := false
			for _, e := range kvs {
				tr.Clear(e.Key)
				t, err := c.k.root.Unpack(e.Key)
				if err != nil || len(t) != 4 {
					continue
				}
				id, _ := t[3].(string)
				r, err := c.k.readRow(tr, kind, id)
				if err != nil {
					return false, err
				}
				if r != nil && r.state == Pending && c.resubmitRow(tr, kind, id, r, min(r.stime, c.cfg.now()), 0, nil, token) {
					woke = true
				}
			}
			if woke {
				c.k.bumpPending(tr, kind)
			}
			return len(kvs) == partitionWakePage, nil
		})
		if err != nil || !more {
			return err
		}
	}
}

// GetPartitionLimit returns kind's partition limit, 0 when it has none.
func (c *Client) GetPartitionLimit(ctx context.Context, tx kv.ReadTransactor, kind string) (int, error) {
	if err := checkName("kind", kind); err != nil {
		return 0, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (int, error) {
		return c.readPartLimit(tr, kind)
	})
}

func (c *Client) readPartLimit(tr kv.ReadTransaction, kind string) (int, error) {
	v, err := tr.Get(c.k.partLimitKey(kind)).Get()
	if err != nil || v == nil {
		return 0, err
	}
	return decodePartLimit(v)
}

func decodePartLimit(v []byte) (int, error) {
	t, err := tuple.Unpack(v)
	if err == nil && len(t) == 1 {
		if n, ok := intElem(t[0]); ok && n >= 1 && n <= LimitMax {
			return int(n), nil
		}
	}
	return 0, fmt.Errorf("fdbjobs: bad partition limit %x", v)
}

// partLimited reports whether a job of kind in partition part may have to
// claim a place: it has a partition, and the Client's copy of the types
// gives kind a partition limit or is not there to say.
func (c *Client) partLimited(kind, part string) bool {
	if part == "" {
		return false
	}
	m := c.infos.Load()
	if m == nil {
		return true
	}
	ti, ok := (*m)[kind]
	return !ok || ti.partLimit > 0
}

// claim is one job of a claimPartitions batch: the job, its partition,
// and what the claim found.
type claim struct {
	job     *Job
	part    string
	granted bool
	err     error
}

// partClaims is what one attempt of a claimPartitions transaction knows of
// one partition: its PARTITION_COUNT as read (a snapshot read: the ends
// that lower it do not conflict with claims), and, once the count did not
// do (absent, or at the limit), the entries of its running set (by job
// id: true for those written by this attempt), whether those of other
// jobs were checked, and how many of them run.
type partClaims struct {
	countFut kv.FutureByteSlice
	// count is the places taken, while tracked: from a count read above
	// 0, or set exactly from the running set read whole; grants add to
	// it, and add to the stored count only while tracked.
	count   int64
	known   bool // count read (or the set read instead)
	tracked bool
	fenced  bool // the claims' conflict key added
	ranged  bool // the running set read (entries, live, overflow)
	entries map[string]bool
	checked bool
	live    int
	// overflow: as many entries as read, maybe more.
	overflow bool
}

// claimPartitions takes places for claims' jobs (each of the partition of
// its claim) among their partitions' running jobs before their workers
// are called, in one transaction fenced by each job's lock, and sets each
// claim's granted (and err: ErrHalt for a job no longer this node's). A
// job may run with a place (its entry in the running set, written here;
// an entry of its own found there, as after a retry or a hand-back,
// counts), or when its kind has no partition limit. A partition's count
// of entries (PARTITION_COUNT) below the limit grants a place with point
// reads alone; an absent count (none kept yet, or back to 0), or one at
// the limit, makes the claim read the running set instead, count it
// exactly, and, when the entries read reach the limit, read the rows of
// their jobs: entries of jobs no longer running (ended unseen, handed back
// by the activity monitor) are cleared. A partition still full makes the
// job wait: in the same transaction it enters the waiting set and goes
// back to the queue until wait(looks) (not an attempt; looks counts the
// claims that found the partition full since it was last woken), and the
// first job of the partition that ends moves it to now. The jobs are of
// one kind. Claims of one partition conflict with each other through
// PARTITION_CLAIM, which no transaction writes: the ends that free places
// conflict with no claim that grants one.
func (c *Client) claimPartitions(ctx context.Context, claims []*claim, wait func(looks int64) int64) error {
	if len(claims) == 0 {
		return nil
	}
	kind := claims[0].job.Type
	items := make([]Completion, len(claims))
	byJob := make(map[*Job]*claim, len(claims))
	for i, cl := range claims {
		items[i], byJob[cl.job] = Completion{Job: cl.job}, cl
	}
	// The running entries a claim reads of a partition whose count does
	// not do: the limit as this Client last read it, and
	// partitionScanExtra more. A partition with that many counts as full
	// (conservative while the copy lags a raised limit, whose wake brings
	// its waiters back).
	scan := partitionScanExtra + 1
	if m := c.infos.Load(); m != nil {
		scan += (*m)[kind].partLimit
	}
	var limitFut kv.FutureByteSlice
	var parts map[string]*partClaims
	limit, limitRead := 0, false
	before := func(tr kv.Transaction) {
		limitRead = false
		limitFut = tr.Get(c.k.partLimitKey(kind))
		parts = map[string]*partClaims{}
		for _, cl := range claims {
			cl.granted, cl.err = false, nil
			if parts[cl.part] == nil {
				parts[cl.part] = &partClaims{countFut: tr.Snapshot().Get(c.k.partCountKey(kind, cl.part))}
			}
		}
	}
	apply := func(tr kv.Transaction, j *Job, r *row, _ []byte, seen *tuple.Versionstamp) (*row, bool, error) {
		cl := byJob[j]
		if r == nil || !r.lock.equal(j.lock) {
			return c.finishRow(tr, j, r, nil, seen) // ErrHalt, or an earlier attempt of this call sent it back
		}
		if !limitRead {
			v, err := limitFut.Get()
			if err != nil {
				return nil, false, err
			}
			limit = 0
			if v != nil {
				if limit, err = decodePartLimit(v); err != nil {
					return nil, false, err
				}
			}
			limitRead = true
		}
		if limit == 0 {
			cl.granted = true
			return r, false, nil
		}
		pc := parts[cl.part]
		if !pc.fenced {
			// Claims of the partition conflict with each other.
			ck := c.k.partClaimKey(kind, cl.part)
			if err := tr.AddReadConflictKey(ck); err != nil {
				return nil, false, err
			}
			if err := tr.AddWriteConflictKey(ck); err != nil {
				return nil, false, err
			}
			pc.fenced = true
		}
		if !pc.known {
			v, err := pc.countFut.Get()
			if err != nil {
				return nil, false, err
			}
			if n := kv.DecodeInt64(v); len(v) == 8 && n >= 0 {
				pc.count, pc.tracked = n, true
			}
			pc.known = true
		}
		if !pc.tracked || pc.count >= int64(limit) {
			if err := c.countPartClaims(tr, kind, cl.part, pc, scan, limit); err != nil {
				return nil, false, err
			}
		}
		if pc.ranged {
			if _, ok := pc.entries[j.ID]; ok {
				cl.granted = true // its place, taken before (and counted)
				return r, false, nil
			}
		}
		if (!pc.ranged && pc.count < int64(limit)) || (pc.ranged && pc.live < limit && !pc.overflow) {
			tr.Set(c.k.partRunningKey(kind, cl.part, j.ID), nil)
			tr.Clear(c.k.partWaitingKey(kind, cl.part, j.ID))
			if pc.tracked {
				tr.Add(c.k.partCountKey(kind, cl.part), one)
				pc.count++
			}
			if pc.ranged {
				pc.entries[j.ID] = true
				pc.live++
			}
			cl.granted = true
			return r, false, nil
		}
		// The looks that found the partition full since the job was last
		// woken: each doubles its wait.
		wk := c.k.partWaitingKey(kind, cl.part, j.ID)
		wv, err := tr.Get(wk).Get()
		if err != nil {
			return nil, false, err
		}
		looks := int64(0)
		if t, err := tuple.Unpack(wv); err == nil && len(t) == 1 {
			looks, _ = intElem(t[0])
		}
		tr.Set(wk, tuple.Tuple{looks + 1}.Pack())
		tr.Add(c.k.partHintKey(kind, cl.part), one)
		r.resubmit, r.stime = true, wait(looks)
		return c.finishRow(tr, j, r, nil, seen)
	}
	errs, err := c.batchWith(ctx, nil, items, before, apply, nil)
	if err != nil {
		return err
	}
	for i, cl := range claims {
		if errs[i] != nil {
			cl.granted, cl.err = false, errs[i]
		}
	}
	return nil
}

// countPartClaims reads pc's running set, once per attempt (a read that
// conflicts with the ends that clear entries: a job made to wait is woken
// by an end that commits after its claim, or its claim fails), checks the
// entries when they reach the limit, and, when it read them all, sets the
// partition's count to the entries found (this attempt's grants counted
// on from there).
func (c *Client) countPartClaims(tr kv.Transaction, kind, part string, pc *partClaims, scan, limit int) error {
	if pc.ranged {
		return nil
	}
	if err := c.readPartClaims(tr, kind, part, pc, scan, limit); err != nil {
		return err
	}
	whole := !pc.overflow // (a check that clears entries may reset overflow)
	if (pc.live >= limit || pc.overflow) && !pc.checked {
		if err := c.checkPartClaims(tr, kind, part, pc); err != nil {
			return err
		}
	}
	if whole {
		tr.Set(c.k.partCountKey(kind, part), kv.Int64(int64(pc.live)))
		pc.count, pc.tracked = int64(pc.live), true
	}
	return nil
}

// readPartClaims reads pc's running set: the limit and partitionScanExtra
// entries, or scan when more (the Client's copy of the limit before a
// lowering). Until checked, every entry counts as a running job.
func (c *Client) readPartClaims(tr kv.Transaction, kind, part string, pc *partClaims, scan, limit int) error {
	begin, end := c.k.root.Sub(keyPartRunning, kind, part).FDBRangeKeys()
	scan = max(scan, limit+partitionScanExtra+1)
	kvs, err := tr.GetRange(kv.KeyRange{Begin: begin, End: end}, kv.RangeOptions{Limit: scan}).GetSliceWithError()
	if err != nil {
		return err
	}
	pc.ranged, pc.entries = true, map[string]bool{}
	for _, e := range kvs {
		t, err := c.k.root.Unpack(e.Key)
		if err != nil || len(t) != 4 || t[2] != any(part) {
			continue
		}
		id, _ := t[3].(string)
		pc.entries[id] = false
	}
	pc.live, pc.overflow = len(pc.entries), len(kvs) >= scan
	return nil
}

// checkPartClaims reads the rows of the jobs of pc's entries that this
// attempt did not write, clears the entries of those no longer running,
// and counts the running ones. A set read only in part stays full unless
// clearing brought it under the entries read.
func (c *Client) checkPartClaims(tr kv.Transaction, kind, part string, pc *partClaims) error {
	pc.checked = true
	type entry struct {
		id  string
		fut kv.FutureByteSlice
	}
	var others []entry
	live := 0
	for id, mine := range pc.entries {
		if mine {
			live++
			continue
		}
		others = append(others, entry{id, tr.Get(c.k.dataKey(kind, id))})
	}
	cleared := 0
	for _, e := range others {
		v, err := e.fut.Get()
		if err != nil {
			return err
		}
		var o *row
		if v != nil {
			if o, err = decodeRow(v); err != nil {
				return err
			}
		}
		if o == nil || o.state != Running {
			tr.Clear(c.k.partRunningKey(kind, part, e.id))
			delete(pc.entries, e.id)
			cleared++
			continue
		}
		live++
	}
	pc.live = live
	if cleared > 0 {
		pc.overflow = false // a place among those read: the next claim reads the rest
	}
	return nil
}

// claimPartitions claims, in one transaction (Client.claimPartitions),
// places for the tasks of partitioned jobs of k that a fetch took, when k
// may have a partition limit, and returns the tasks that may run: the
// others went back to wait, were no longer this node's, or were handed
// back after the transaction failed (none of those an attempt). A job that
// waits goes back until k's Timeout from now, doubling with each look that
// found its partition full, up to PartitionRecheckMax (a place freed by a
// node that died, or by a job the Runtime did not end, is seen then; the
// ends of its partition's jobs wake it before). The transaction is
// bounded by the earliest hold of the jobs.
func (r *Runtime) claimPartitions(ctx, hardCtx context.Context, k *kindWorker, tasks []task) []task {
	var claims []*claim
	var of []int
	for i, t := range tasks {
		if t.e != nil && r.c.partLimited(k.kind, t.e.Partition) {
			claims, of = append(claims, &claim{job: t.job, part: t.e.Partition}), append(of, i)
		}
	}
	if len(claims) == 0 {
		return tasks
	}
	first := claims[0].job
	for _, cl := range claims {
		if d, ok := cl.job.HoldDeadline(); ok {
			if fd, fok := first.HoldDeadline(); !fok || d.Before(fd) {
				first = cl.job
			}
		}
	}
	hctx, cancel := first.HoldContext(ctx)
	defer cancel()
	now := r.c.cfg.Clock.Now()
	wait := func(looks int64) int64 {
		d := k.opts.Timeout
		for range min(looks, 16) {
			d = min(2*d, PartitionRecheckMax)
		}
		return r.c.cfg.stime(now.Add(d))
	}
	k.claims.Lock()
	err := r.c.claimPartitions(hctx, claims, wait)
	k.claims.Unlock()
	drop := map[int]bool{}
	waits := 0
	for i, cl := range claims {
		t := tasks[of[i]]
		switch {
		case err != nil:
			if ctx.Err() == nil {
				r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Str("job", t.job.ID).
					Msg("fdbjobs: runtime: claiming a place in the job's partition; handed back")
				r.end(hardCtx, k, t.job, t.e, err, true)
			}
		case cl.granted:
			continue
		case cl.err == nil:
			waits++
		}
		drop[of[i]] = true
	}
	if waits > 0 {
		r.c.metrics.Load().count(metricPartitionWaits, k.kind, waits)
	}
	if len(drop) == 0 {
		return tasks
	}
	kept := tasks[:0:0]
	for i, t := range tasks {
		if !drop[i] {
			kept = append(kept, t)
		}
	}
	k.stats.running.Add(-int64(len(drop)))
	k.slots.give(len(drop))
	return kept
}

// releasePartition gives back the place of job id of kind (of partition
// part), which left its Runtime without an end the Runtime wrote
// (cancelled, removed, its hold lapsed): unless the job runs again (on
// another node, whose claim holds the place), leavePartition in a
// transaction of its own.
func (c *Client) releasePartition(ctx context.Context, kind, part, id string) error {
	token, err := newToken()
	if err != nil {
		return err
	}
	_, err = kv.Transact(ctx, c.db, func(tr kv.Transaction) (struct{}, error) {
		r, err := c.k.readRow(tr, kind, id)
		if err != nil || r != nil && r.state == Running {
			return struct{}{}, err
		}
		return struct{}{}, c.leavePartition(tr, kind, part, id, token)
	})
	return err
}

// leavePartition, in a transaction that ended job (of partition part) or
// handed it back, clears its place (its entry, and one from the
// partition's count: a count back at 0 is cleared) and moves the first
// waiting job of the partition that is pending to now, so that it claims
// the place. The waiting entries it passes whose jobs are gone or finished
// are cleared; those of running jobs (woken already, claiming) are left to
// their claim.
func (c *Client) leavePartition(tr kv.Transaction, kind, part, id string, token []byte) error {
	ek := c.k.partRunningKey(kind, part, id)
	ev, err := tr.Get(ek).Get()
	if err != nil {
		return err
	}
	if ev != nil {
		tr.Clear(ek)
		ck := c.k.partCountKey(kind, part)
		tr.Add(ck, minusOne)
	}
	// The hint says whether jobs may wait: a point read, where most ends
	// find none, instead of a range read.
	hk := c.k.partHintKey(kind, part)
	hv, err := tr.Get(hk).Get()
	if err != nil || kv.DecodeInt64(hv) <= 0 {
		return err
	}
	rg := prefixRange(c.k.root, tuple.Tuple{keyPartWaiting, kind, part})
	kvs, err := tr.GetRange(rg, kv.RangeOptions{Limit: partitionWakeScan}).GetSliceWithError()
	if err != nil {
		return err
	}
	if len(kvs) == 0 {
		// None waits: the hint goes (a claim that makes a job wait
		// meanwhile conflicts with this read of the waiting set).
		tr.Clear(hk)
		return nil
	}
	for _, e := range kvs {
		t, err := c.k.root.Unpack(e.Key)
		if err != nil || len(t) != 4 || t[2] != any(part) {
			continue
		}
		wid, _ := t[3].(string)
		r, err := c.k.readRow(tr, kind, wid)
		if err != nil {
			return err
		}
		switch {
		case r == nil || r.state == Finished:
			tr.Clear(e.Key)
		case r.state == Pending:
			tr.Clear(e.Key)
			if c.resubmitRow(tr, kind, wid, r, min(r.stime, c.cfg.now()), 0, nil, token) {
				c.k.bumpPending(tr, kind)
			}
			return nil
		}
	}
	return nil
}
