package fdbjobs

// Partitions (see doc.go, "Partitions"): a job's partition key
// (InsertOptions.Partition: a tenant, a host) and a kind's limit of the
// jobs of one partition that run at once across every node
// (SetPartitionLimit), kept in the store as the partition's running set
// and its waiting set.

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// partCountKey is the count of part's running entries (or more), kept by
// the claims and ends that write and clear them; absent or below 0 means
// unknown (a claim counts the entries then).
func (k keys) partCountKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartCount, kind, part})
}

// partStartsKey is the theoretical time of part's next start, in µs since
// the epoch, for a limit of starts per second (takeStart).
func (k keys) partStartsKey(kind, part string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartStarts, kind, part})
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

// SetPartitionLimit sets kind's limit per partition: at most l.Running
// jobs of kind with the same partition (InsertOptions.Partition) run at
// once across every node, and at most l.PerSecond of them start per second
// (a token bucket per partition holding a second's worth, at least one
// start: over any window of W seconds a partition starts at most
// PerSecond × W + max(1, PerSecond) jobs, give or take the skew between
// the nodes' clocks); either may be 0 (no such limit), not both. Jobs
// without a partition are not limited. Changeable at run time; in force
// for the jobs the Runtimes start once their Clients have read it (see
// SetLimit). Jobs running then are not counted until they end, and a
// lowered limit stops none. A raised or removed Running wakes the jobs
// waiting for a place (wakeWaiting: after the change committed, a page of
// 200 per transaction; with tx a caller's Transaction they look again at
// their own time instead); jobs waiting for a start look again at the time
// their rate gave them (PartitionRecheckMax at most). Jobs taken with the
// lower-level Accept neither follow it nor count toward it. tx may be nil,
// a Database or a caller's Transaction.
func (c *Client) SetPartitionLimit(ctx context.Context, tx kv.Transactor, kind string, l Limit) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if l.Running == 0 && l.PerSecond == 0 {
		return fmt.Errorf("partition limit: %w: a limit of neither running jobs nor starts per second (ClearPartitionLimit removes one)", ErrInvalidArgument)
	}
	if err := l.check(); err != nil {
		return fmt.Errorf("partition limit: %w", err)
	}
	raised := false
	err := c.changeTypes(ctx, tx, func(tr kv.Transaction) error {
		old, err := c.readPartLimit(tr, kind)
		// Over the attempts: a retry after commit_unknown_result reads
		// the limit its earlier attempt wrote.
		raised = raised || old.Running != 0 && (l.Running == 0 || l.Running > old.Running)
		tr.Set(c.k.partLimitKey(kind), tuple.Tuple{int64(l.Running), l.rateMicro()}.Pack())
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
				part, _ := t[2].(string)
				id, _ := t[3].(string)
				if _, since, queued := decodeWaiting(e.Value); queued {
					tr.Clear(c.k.partQueueKey(kind, part, since, id))
				}
				r, err := c.k.readRow(tr, kind, id)
				if err != nil {
					return false, err
				}
				if r != nil && c.wakeRow(tr, kind, id, r) {
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

// GetPartitionLimit returns kind's limit per partition, the zero Limit
// when it has none.
func (c *Client) GetPartitionLimit(ctx context.Context, tx kv.ReadTransactor, kind string) (Limit, error) {
	if err := checkName("kind", kind); err != nil {
		return Limit{}, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (Limit, error) {
		return c.readPartLimit(tr, kind)
	})
}

func (c *Client) readPartLimit(tr kv.ReadTransaction, kind string) (Limit, error) {
	v, err := tr.Get(c.k.partLimitKey(kind)).Get()
	if err != nil || v == nil {
		return Limit{}, err
	}
	return decodeLimit(v) // (a partition limit of an earlier version is (N): Running)
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
	return !ok || ti.partLimit > 0 || ti.partRate > 0
}

// claimPartitions claims, in one transaction (Client.claimPartitions),
// places and starts for the tasks of partitioned jobs of k that a fetch
// took, when k may have a limit per partition, and returns the tasks that
// may run: the others went back to wait, were no longer this node's, or
// were handed back after the transaction failed (none of those an
// attempt). With early, the tasks that need no claim (a partition without
// a limit, a place the Runtime holds) go to early at once rather than wait
// for the claim, and are not returned. The claims of k's fetches on the
// Runtime go together (claimGroup: those that come while one runs share
// the next transaction). A job that waits for a place goes back until k's
// Timeout from now, doubling with each look that found its partition
// full, up to PartitionRecheckMax (a place freed by a node that died, or
// by a job the Runtime did not end, is seen then; the ends of its
// partition's jobs wake it before); one that waits for a start, until its
// partition's next. The transaction is bounded by the earliest hold of
// its jobs.
func (r *Runtime) claimPartitions(ctx, hardCtx context.Context, k *kindWorker, tasks []task, early func(task)) []task {
	var claims []*claim
	var of []int
	pl := k.capacity.places
	limit := pl.limit()
	if k.opts.Manual {
		// A Manual kind's worker holds and ends its jobs itself (a
		// lapsed lease does not stop it): each job has a place of its own.
		limit = 0
	}
	var now []task                  // the tasks early takes
	var owns func(shard int64) bool // (asked once, for the first claim)
	for i, t := range tasks {
		if t.e == nil || !r.c.partLimited(k.kind, t.e.Partition) {
			now = append(now, t)
			continue
		}
		if pl.take(t.e.Partition, limit) {
			tasks[i].leased = true // a place the Runtime holds: no transaction
			now = append(now, tasks[i])
			continue
		}
		if owns == nil {
			owns = r.c.shardOwner(k.kind)
		}
		cl := &claim{job: t.job, part: t.e.Partition, helping: !owns(t.job.shard)}
		claims, of = append(claims, cl), append(of, i)
	}
	if len(claims) == 0 {
		return tasks
	}
	if early != nil {
		for _, t := range now {
			early(t)
		}
		kept := tasks[:0:0]
		for _, i := range of {
			kept = append(kept, tasks[i])
		}
		tasks = kept
		for i := range of {
			of[i] = i
		}
	}
	if limit == 0 {
		pl = nil // no places to lease: a limit of starts, or none known
	}
	call := &claimCall{claims: claims, leasing: pl != nil}
	k.claimGroup.claim(call, k.opts.FetchBatch, func(claims []*claim) {
		k.claims.Lock()
		defer k.claims.Unlock()
		if pl != nil {
			// A place the Runtime holds may have come free since the
			// fetch (a job of the partition ended): the job takes it as
			// a job whose fetch found it does, without the store.
			limit := pl.limit()
			claims = slices.DeleteFunc(claims, func(cl *claim) bool {
				cl.retaken = pl.take(cl.part, limit)
				return cl.retaken
			})
			if len(claims) == 0 {
				return
			}
			// Its partitions' records swept, should the claim commit unseen.
			pl.track(claims)
		}
		first := earliestHold(len(claims), func(i int) *Job { return claims[i].job })
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
		// A job twice in a group (its hold lapsed while its claim waited,
		// and another fetch took it again) goes in a transaction of its
		// own: a batch takes each job once.
		for len(claims) > 0 {
			var round []*claim
			round, claims = onceEach(claims)
			writes, err := r.c.claimPartitions(hctx, round, wait, pl)
			for part, w := range writes {
				pl.granted(part, w)
			}
			if err != nil {
				if pl != nil {
					pl.failed(round) // its commit may yet land
				}
				for _, cl := range append(round, claims...) {
					cl.failed = err
				}
				return
			}
		}
	})
	if pl != nil && !k.capacity.leased.Load() {
		// The lease lapsed meanwhile: its places may go to others a
		// Timeout on, so the jobs granted them do not start (those that
		// took a place the Runtime held run, as those of the fetch do).
		for _, cl := range claims {
			if cl.granted && cl.leased && !cl.retaken && cl.failed == nil {
				pl.release(cl.part)
				cl.granted, cl.leased, cl.err = false, false, ErrCapacityLapsed
			}
		}
	}
	drop := map[int]bool{}
	waits := 0
	for i, cl := range claims {
		t := tasks[of[i]]
		switch {
		case cl.retaken:
			tasks[of[i]].leased = true // whatever became of the others' claims
			continue
		case cl.failed != nil:
			// Handed back, also when Stop cut the claim short: the job
			// was accepted, and would stay running until the activity
			// monitor took it back.
			if ctx.Err() == nil {
				r.c.cfg.Logger.Warn().Err(cl.failed).Str("kind", k.kind).Str("job", t.job.ID).
					Msg("fdbjobs: runtime: claiming a place in the job's partition; handed back")
			}
			r.end(hardCtx, k, t, t.e, cl.failed, true)
		case cl.granted:
			tasks[of[i]].leased = cl.leased
			continue
		case errors.Is(cl.err, ErrCapacityLapsed):
			r.end(hardCtx, k, t, t.e, cl.err, true) // handed back
		case cl.err == nil:
			waits++
			if pl != nil {
				pl.contend(cl.part)
			}
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
	_, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (struct{}, error) {
		r, err := c.k.readRow(tr, kind, id)
		if err != nil || r != nil && r.state == Running {
			return struct{}{}, err
		}
		return struct{}{}, c.leavePartition(tr, kind, part, id)
	})
	return err
}

// leavePartition, in a transaction that ended job (of partition part) or
// handed it back, clears its place (its entry, and one from the
// partition's count, which stays at 0 rather than go: an absent count
// sends the next claim to the slower read of the running set) and moves
// the first waiting job of the partition that is pending to now, so that
// it claims the place. A job without a place there leaves nothing and
// wakes no one, so that a retry after commit_unknown_result wakes no
// second job. The waiting entries it passes whose jobs are gone or
// finished are cleared; those of running jobs (woken already, claiming)
// are left to their claim.
func (c *Client) leavePartition(tr kv.Transaction, kind, part, id string) error {
	ek := c.k.partRunningKey(kind, part, id)
	ev, err := tr.Get(ek).Get()
	if err != nil {
		return err
	}
	if ev == nil {
		// No place of id's here: it never had one, or this is a retry
		// after commit_unknown_result of a leave that committed (and woke
		// a waiter then). Waking one now would wake two for one place.
		return nil
	}
	tr.Clear(ek)
	tr.Add(c.k.partCountKey(kind, part), minusOne)
	return c.wakeOne(tr, kind, part)
}

// wakeOne, in a transaction that freed a place in part, moves the first
// waiting job of the partition that is pending to now, so that it claims
// the place. The waiting entries it passes whose jobs are gone or
// finished are cleared; those of running jobs (woken already, claiming)
// are left to their claim.
func (c *Client) wakeOne(tr kv.Transaction, kind, part string) error {
	_, err := c.wakeFirst(tr, kind, part)
	return err
}

// wakeFirst is wakeOne, reporting whether it woke a job.
func (c *Client) wakeFirst(tr kv.Transaction, kind, part string) (bool, error) {
	// The hint says whether jobs may wait: a point read, where most ends
	// find none, instead of a range read.
	hk := c.k.partHintKey(kind, part)
	hv, err := tr.Get(hk).Get()
	if err != nil || kv.DecodeInt64(hv) <= 0 {
		return false, err
	}
	// The waiting jobs in the order they came (PARTITION_QUEUE), the
	// longest waiting first.
	qr := prefixRange(c.k.root, tuple.Tuple{keyPartQueue, kind, part})
	qs, err := tr.GetRange(qr, kv.RangeOptions{Limit: partitionWakeScan}).GetSliceWithError()
	if err != nil {
		return false, err
	}
	for _, e := range qs {
		t, err := c.k.root.Unpack(e.Key)
		if err != nil || len(t) != 5 || t[2] != any(part) {
			continue
		}
		wid, _ := t[4].(string)
		woke, err := c.wakeWaiter(tr, kind, part, wid, e.Key)
		if woke || err != nil {
			return woke, err
		}
	}
	// Then the entries an earlier version wrote, with no place in the
	// queue; none left at all clears the hint (a claim that makes a job
	// wait meanwhile conflicts with this read of the waiting set).
	rg := prefixRange(c.k.root, tuple.Tuple{keyPartWaiting, kind, part})
	kvs, err := tr.GetRange(rg, kv.RangeOptions{Limit: partitionWakeScan}).GetSliceWithError()
	if err != nil {
		return false, err
	}
	if len(kvs) == 0 {
		tr.Clear(hk)
		return false, nil
	}
	for _, e := range kvs {
		t, err := c.k.root.Unpack(e.Key)
		if err != nil || len(t) != 4 || t[2] != any(part) {
			continue
		}
		if _, _, queued := decodeWaiting(e.Value); queued {
			continue // passed above, in the queue's order
		}
		wid, _ := t[3].(string)
		woke, err := c.wakeWaiter(tr, kind, part, wid, nil)
		if woke || err != nil {
			return woke, err
		}
	}
	return false, nil
}

// wakeWaiter looks at job wid, waiting in part (qk: the PARTITION_QUEUE
// key it was found by, nil for none): gone or finished, its waiting
// entries are cleared; pending, they are cleared and it is moved to now,
// so that it claims the place freed (woke); running (woken already,
// claiming), it is left to its claim. (A queue key whose waiting entry a
// node of an earlier release cleared goes with it.)
func (c *Client) wakeWaiter(tr kv.Transaction, kind, part, wid string, qk kv.Key) (woke bool, err error) {
	r, err := c.k.readRow(tr, kind, wid)
	if err != nil {
		return false, err
	}
	if qk != nil && (r == nil || r.state != Running) {
		tr.Clear(qk)
	}
	switch {
	case r == nil || r.state == Finished:
		return false, c.leaveWaiting(tr, kind, part, wid)
	case r.state == Pending:
		if err := c.leaveWaiting(tr, kind, part, wid); err != nil {
			return false, err
		}
		if c.wakeRow(tr, kind, wid, r) {
			c.k.bumpPending(tr, kind)
		}
		return true, nil
	}
	return false, nil
}

// wakeRow moves pending job id (row r), waiting for a place, to now when
// it is due later, so that it claims again; it reports whether it moved
// it. Unlike a Resubmit it carries no call's token: a job woken, sent back
// to wait and woken again by the same call (wakeWaiting's pages), or by a
// retry of the same transaction, moves each time.
func (c *Client) wakeRow(tr kv.Transaction, kind, id string, r *row) bool {
	now := c.cfg.now()
	if r.state != Pending || r.stime <= now {
		return false
	}
	tr.Clear(c.k.pendingKey(kind, r.shard, r.stime, id))
	c.k.enqueue(tr, kind, id, r, now)
	return true
}

// waitForPlace sends job j (row r) of partition part back to wait for a
// place: it enters the waiting set, counting the looks that found the
// partition full since it was last woken (each doubles its wait), and the
// partition's hint, and goes back to the queue until wait(looks), not as
// an attempt.
func (c *Client) waitForPlace(tr kv.Transaction, j *Job, r *row, part string, seen *tuple.Versionstamp,
	wait func(looks int64) int64) (*row, bool, error) {
	if r.resubmit && r.stime > c.cfg.now() {
		// Resubmitted to a later time before its run began: pending at
		// that time and waiting for no place yet, so that no wake moves
		// it before the time asked.
		return c.sendBack(tr, j, r, r.stime, seen)
	}
	looks, err := c.enterWaiting(tr, j.Type, part, j.ID)
	if err != nil {
		return nil, false, err
	}
	return c.sendBack(tr, j, r, wait(looks), seen)
}

// sendBack ends, in a claim's transaction, the run of job j (row r, read
// there): pending again at stime, not as an attempt. It is an end that
// read the row, by the job's holder, and marks its lease touched no more
// than an end that took the row as known would (keys.touch): the
// touch is for the ends that take a row as known without reading it, and
// none will take j's: the claim's batch took j's known row and keeps it
// only for a job it leaves running (batchWith). Marking it would make
// every end of j's siblings in the lease, in flight, conflict.
//
// A job resubmitted while it ran (Resubmit) goes back at the later of
// stime and the time asked: its run had not begun, so the run to come and
// the one asked for are one, none of it before the time asked.
func (c *Client) sendBack(tr kv.Transaction, j *Job, r *row, stime int64, seen *tuple.Versionstamp) (*row, bool, error) {
	if r.resubmit && r.stime > stime {
		stime = r.stime
	}
	r.resubmit, r.stime, r.holder = true, stime, true
	return c.finishRow(tr, j, r, nil, seen)
}

func (k keys) partQueueKey(kind, part string, since int64, id string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartQueue, kind, part, since, id})
}

// decodeWaiting decodes a PARTITION_WAITING value: the looks, and the
// entry's place in PARTITION_QUEUE (since, µs) when it has one (an entry
// an earlier version wrote has none).
func decodeWaiting(v []byte) (looks, since int64, queued bool) {
	t, err := tuple.Unpack(v)
	if err != nil || len(t) < 1 || len(t) > 2 {
		return 0, 0, false
	}
	looks, _ = intElem(t[0])
	if len(t) == 2 {
		since, queued = intElem(t[1])
	}
	return looks, since, queued
}

// enterWaiting records, in tr, that job id of kind waits for a place in
// part: its PARTITION_WAITING entry counts one look more, it keeps its
// place in the partition's queue (or takes one at the end: now), and the
// partition's hint is added to. It returns the looks before this one.
func (c *Client) enterWaiting(tr kv.Transaction, kind, part, id string) (int64, error) {
	wk := c.k.partWaitingKey(kind, part, id)
	wv, err := tr.Get(wk).Get()
	if err != nil {
		return 0, err
	}
	looks, since, queued := decodeWaiting(wv)
	if !queued {
		since = c.cfg.Clock.Now().UnixMicro()
		tr.Set(c.k.partQueueKey(kind, part, since, id), nil)
	}
	tr.Set(wk, tuple.Tuple{looks + 1, since}.Pack())
	tr.Add(c.k.partHintKey(kind, part), one)
	return looks, nil
}

// leaveWaiting clears, in tr, job id's PARTITION_WAITING entry in part and
// its place in the queue, if it has them.
func (c *Client) leaveWaiting(tr kv.Transaction, kind, part, id string) error {
	wk := c.k.partWaitingKey(kind, part, id)
	wv, err := tr.Get(wk).Get()
	if err != nil || wv == nil {
		return err
	}
	tr.Clear(wk)
	if _, since, queued := decodeWaiting(wv); queued {
		tr.Clear(c.k.partQueueKey(kind, part, since, id))
	}
	return nil
}

// onceEach splits claims into those of their jobs' first claims, in order,
// and the rest.
func onceEach(claims []*claim) (once, rest []*claim) {
	seen := make(map[string]bool, len(claims))
	for _, cl := range claims {
		if seen[cl.job.ID] {
			rest = append(rest, cl)
			continue
		}
		seen[cl.job.ID] = true
		once = append(once, cl)
	}
	return once, rest
}
