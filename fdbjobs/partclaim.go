package fdbjobs

// A claim of places and starts in partitions (see doc.go, "Partitions"):
// the transaction a Runtime's fetcher runs for the partitioned jobs it
// took (Runtime.claimPartitions, partition.go), before their workers.

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// claim is one job of a claimPartitions batch: the job, its partition,
// and what the claim found.
type claim struct {
	job     *Job
	part    string
	granted bool
	// leased: the place granted is one of the Runtime's leased places
	// (placelease.go), not an entry of the job's own.
	leased bool
	// retaken: granted a place the Runtime held, come free since the
	// fetch, before the claim's transaction (Runtime.claimPartitions).
	retaken bool
	// helping: the job came from a shard of the queue that another node
	// owns (Client.shardOwner). Granted a place, it holds an entry of its
	// own, freed by its end, rather than a place leased to the Runtime,
	// which would sit idle, held from the partition's other jobs, once
	// the Runtime went back to its own shards.
	helping bool
	err     error
	// failed is the error of the transaction that was to claim for it
	// (Runtime.claimPartitions): none of its outcomes stand.
	failed error
}

// leaseWrite is what a claim that leases places wrote of one partition:
// the Runtime's places there, the claim's grants among them, and the
// limit they were counted under.
type leaseWrite struct {
	leased, grants, limit int
	// contended: jobs wait for places in the partition.
	contended bool
}

// partClaims is what one attempt of a claimPartitions transaction knows of
// one partition: its PARTITION_COUNT as read (a snapshot read: the ends
// that lower it do not conflict with claims), and, once the count did not
// do (absent, below 0, or at the limit), the entries of its running set (by job
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
	// overflow: as many entries as read, maybe more; leaseOverflow: as
	// many records of leased places (partLeasesScan).
	overflow, leaseOverflow bool
	// claims is the claim's jobs in the partition; runningFut and
	// leasesFut, the reads of its running set and Runtimes' records when
	// its count does not do for them (prefetch), nil until sent.
	claims                int
	runningFut, leasesFut kv.RangeResult
	// wrote: the attempt wrote an entry of the running set, which a read
	// sent before it (FoundationDB's client sends a range read's first
	// batch at once) would not see.
	wrote bool
	// The partition's starts (PerSecond): the theoretical time of its
	// next start (PARTITION_STARTS, µs since the epoch; a snapshot read,
	// as only claims write it), once read, and the jobs this attempt sent
	// back for want of a start.
	startsFut  kv.FutureByteSlice
	startsRead bool
	tat        int64
	denied     int64
	// hintFut is the partition's PARTITION_HINT, a snapshot read: with no
	// hint no job of the partition waits, so a grant has no waiting entry
	// to clear (a job's entry is written with an add to the hint, and the
	// hint is cleared only by a read of the waiting set that finds none).
	hintFut kv.FutureByteSlice
	// The places of the claiming Runtime (placelease.go): its record in
	// the store (not a snapshot: only its claims and sweeps write it), the
	// places it knows it holds, and the claim's grants of leased places.
	node         []byte // the claiming Runtime's (its lease of the kind's capacity), nil for none
	leasedFut    kv.FutureByteSlice
	leasedBase   int
	leasedStored int
	leased       int
	// leaseLive is the places Runtimes lease in the partition, as read
	// with its running set (counted in live).
	leaseLive int
	// ownAtRead is the claiming Runtime's places as the running set's read
	// counted them, and ownAtSet as the count set from it (countSet).
	ownAtRead, ownAtSet int
	countSet            bool
	// holders are the other Runtimes with places in the partition, as
	// read with its running set; recalled, once they were asked for them
	// (recallHolders). sawWaiting: a grant found jobs waiting there.
	holders    [][]byte
	recalled   bool
	sawWaiting bool
	// wakes counts the waiting jobs the places of dead Runtimes woke, in
	// every partition of the claim (placeWakes at most).
	wakes *int
}

// readCount reads pc's count, once per attempt.
func (pc *partClaims) readCount() error {
	if pc.known {
		return nil
	}
	v, err := pc.countFut.Get()
	if err != nil {
		return err
	}
	if n := kv.DecodeInt64(v); len(v) == 8 && n >= 0 {
		pc.count, pc.tracked = n, true
	}
	pc.known = true
	return nil
}

// prefetch sends at once, in tr, the range reads that countPartClaims will
// make of the partitions of parts whose count does not do for their claims
// under limit places (absent, below 0, or reaching the limit: new or full
// partitions): each is a round trip, and a claim may find hundreds.
func (c *Client) prefetch(tr kv.Transaction, kind string, parts map[string]*partClaims, limit int) error {
	for part, pc := range parts {
		if err := pc.readCount(); err != nil {
			return err
		}
		if pc.tracked && pc.count+int64(pc.claims) <= int64(limit) || pc.runningFut != nil {
			continue
		}
		begin, end := c.k.root.Sub(keyPartRunning, kind, part).FDBRangeKeys()
		pc.runningFut = tr.GetRange(kv.KeyRange{Begin: begin, End: end}, kv.RangeOptions{Limit: limit + partitionScanExtra + 1})
		pc.leasesFut = tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyPartLeased, kind, part}), kv.RangeOptions{Limit: partLeasesScan + 1})
	}
	return nil
}

// waiting reports whether jobs of pc's partition may wait.
func (pc *partClaims) waiting() (bool, error) {
	v, err := pc.hintFut.Get()
	return kv.DecodeInt64(v) > 0, err
}

// claimPartitions takes places and starts for claims' jobs (each in the
// partition of its claim), under their kind's limit per partition, before
// their workers are called, in one transaction fenced by each job's lock,
// and sets each claim's granted (and err: ErrHalt for a job no longer this
// node's). With no limit, every job is granted. Under a limit of running
// jobs, a job needs a place: its entry in the running set, written here,
// or an entry of its own found there (after a retry or a hand-back). A
// partition's count of entries (PARTITION_COUNT) below the limit grants a
// place with point reads alone; a count absent (none kept yet) or below 0,
// or one at the limit, makes the claim read the running set instead, count
// it, and, when the entries read reach the limit, read the rows of their
// jobs: entries of jobs no longer running (ended unseen, handed back by the
// activity monitor) are cleared. A partition still full makes the job wait
// for a place (waitForPlace: until wait(looks), or until a job of the
// partition ends). Under a limit of starts per second, a job needs a start
// too (takeStart), taken after its place is found and before it is
// written; without one it goes back to the queue until the next. Neither
// wait is an attempt. The jobs are of one kind. Claims of one partition
// conflict with each other through PARTITION_CLAIM, which no transaction
// writes: the ends that free places conflict with no claim that grants
// one.
//
// With pl, a Runtime's places, under a limit of running jobs alone, a
// place granted to a job of the node's own shards is leased to the
// Runtime (pl's record in the partition, counted in PARTITION_COUNT)
// rather than an entry of the job's (a job it helps with: claim.helping),
// in a transaction fenced by the Runtime's lease of the kind's capacity;
// the partitions whose leases it wrote are returned.
func (c *Client) claimPartitions(ctx context.Context, claims []*claim, wait func(looks int64) int64, pl *placeLeases) (map[string]leaseWrite, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	kind := claims[0].job.Type
	items := make([]Completion, len(claims))
	byJob := make(map[*Job]*claim, len(claims))
	for i, cl := range claims {
		items[i], byJob[cl.job] = Completion{Job: cl.job}, cl
	}
	rated := false // (as this Client last read the limit: the starts read at once)
	if m := c.infos.Load(); m != nil {
		rated = (*m)[kind].partRate > 0
	}
	var limitFut kv.FutureByteSlice
	var parts map[string]*partClaims
	var lim Limit
	var now time.Time
	var fence func() error
	var node []byte
	if pl != nil {
		node = pl.cp.node
	}
	limitRead, leasing := false, false
	var fenceErr error
	before := func(tr kv.Transaction) {
		limitRead, leasing, fenceErr, now = false, false, nil, c.cfg.Clock.Now()
		limitFut = tr.Get(c.k.partLimitKey(kind))
		if pl != nil {
			fence = pl.cp.fence(tr)
		}
		parts = map[string]*partClaims{}
		wakes := new(int)
		for _, cl := range claims {
			cl.granted, cl.leased, cl.err = false, false, nil
			if parts[cl.part] == nil {
				pc := &partClaims{countFut: tr.Snapshot().Get(c.k.partCountKey(kind, cl.part)),
					hintFut: tr.Snapshot().Get(c.k.partHintKey(kind, cl.part)), wakes: wakes}
				if rated {
					pc.startsFut = tr.Snapshot().Get(c.k.partStartsKey(kind, cl.part))
				}
				if pl != nil {
					pc.leasedFut = tr.Get(c.k.partLeasedKey(kind, cl.part, node))
					pc.leasedBase = pl.leasedOf(cl.part)
				}
				parts[cl.part] = pc
			}
			parts[cl.part].claims++
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
			lim = Limit{}
			if v != nil {
				if lim, err = decodeLimit(v); err != nil {
					return nil, false, err
				}
			}
			limitRead = true
			if leasing = pl != nil && lim.Running > 0 && lim.PerSecond == 0; leasing {
				fenceErr = fence()
			}
			if lim.Running > 0 && fenceErr == nil {
				if err := c.prefetch(tr, kind, parts, lim.Running); err != nil {
					return nil, false, err
				}
			}
		}
		if leasing && fenceErr != nil {
			// The lease is gone: no job of the claim takes a place.
			return nil, false, fenceErr
		}
		if lim.Running == 0 && lim.PerSecond == 0 {
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
			if leasing {
				pc.node = node // its places counted as this claim leaves them
			}
		}
		own := false // its place, taken before (and counted): a retry, or a job handed back
		if lim.Running > 0 {
			o, free, err := c.placeFree(tr, kind, cl.part, j.ID, pc, lim.Running)
			if err != nil {
				return nil, false, err
			}
			if !o && !free {
				c.recallHolders(tr, kind, pc)
				return c.waitForPlace(tr, j, r, cl.part, seen, wait)
			}
			own = o
		}
		if lim.PerSecond > 0 {
			// Every start takes one, its place its own or not (a job
			// whose claim was retried after commit_unknown_result may
			// take two, or wait with its place kept).
			due, ok, err := c.takeStart(tr, kind, cl.part, pc, lim, now)
			if err != nil {
				return nil, false, err
			}
			if !ok {
				// No start left in the partition's second: back to the
				// queue until the next one (not an attempt).
				return c.sendBack(tr, j, r, c.cfg.stime(due), seen)
			}
		}
		if lim.Running > 0 && !own {
			// Reads first: a job whose read fails (its own error, not the
			// transaction's) is granted nothing, counted nowhere.
			if leasing && !cl.helping && pc.leased == 0 {
				v, err := pc.leasedFut.Get()
				if err != nil {
					return nil, false, err
				}
				pc.leasedStored = int(kv.DecodeInt64(v))
			}
			if w, err := pc.waiting(); err != nil {
				return nil, false, err
			} else if w {
				pc.sawWaiting = true
				if err := c.leaveWaiting(tr, kind, cl.part, j.ID); err != nil {
					return nil, false, err
				}
			}
			if leasing && !cl.helping {
				pc.leased++
				cl.leased = true
			} else {
				tr.Set(c.k.partRunningKey(kind, cl.part, j.ID), nil)
				pc.wrote = true
				if pc.tracked {
					tr.Add(c.k.partCountKey(kind, cl.part), one)
				}
				if pc.ranged {
					pc.entries[j.ID] = true
				}
			}
			if pc.tracked {
				pc.count++
			}
			if pc.ranged {
				pc.live++
			}
		}
		cl.granted = true
		return r, false, nil
	}
	var writes map[string]leaseWrite
	written := func(tr kv.Transaction, _ []*row) {
		writes = nil
		if !leasing {
			return
		}
		for part, pc := range parts {
			if pc.leased == 0 {
				continue
			}
			stored, target := pc.leasedStored, pc.leasedBase+pc.leased
			key := c.k.partLeasedKey(kind, part, node)
			tr.Set(key, kv.Int64(int64(target)))
			// The count: set in this claim with the places counted then,
			// or as read (with what the store held), or unknown (only
			// lowered: below 0 it is counted again).
			d := target - stored
			if pc.countSet {
				d = target - pc.ownAtSet
			}
			if d < 0 || d > 0 && pc.tracked {
				tr.Add(c.k.partCountKey(kind, part), kv.Int64(int64(d)))
			}
			if writes == nil {
				writes = map[string]leaseWrite{}
			}
			writes[part] = leaseWrite{leased: target, grants: pc.leased, limit: lim.Running, contended: pc.sawWaiting}
		}
	}
	errs, err := c.batchWith(ctx, nil, items, before, apply, written, knownKeep)
	if err != nil {
		return nil, err
	}
	for i, cl := range claims {
		if errs[i] != nil {
			cl.granted, cl.leased, cl.err = false, false, errs[i]
		}
	}
	return writes, nil
}

// placeFree reports whether job id has a place of its own in part's
// running set (as far as the entries read tell) or the partition has one
// free for it (limit places), reading pc's count, or its entries when the
// count does not do.
func (c *Client) placeFree(tr kv.Transaction, kind, part, id string, pc *partClaims, limit int) (own, free bool, err error) {
	if err := pc.readCount(); err != nil {
		return false, false, err
	}
	if !pc.tracked || pc.count >= int64(limit) {
		if err := c.countPartClaims(tr, kind, part, pc, limit); err != nil {
			return false, false, err
		}
	}
	if pc.ranged {
		if _, ok := pc.entries[id]; ok {
			return true, true, nil
		}
		return false, pc.live < limit && !pc.overflow && !pc.leaseOverflow, nil
	}
	return false, pc.count < int64(limit), nil
}

// takeStart takes one of part's starts (lim.PerSecond > 0) at now, or
// returns when the next one comes for the job sent back: a generic cell
// rate (a token bucket kept as one time, PARTITION_STARTS): each start
// moves the partition's theoretical time of the next start on by
// 1/PerSecond from it or from now, whichever is later, and a start is
// free while that time is within the bucket's depth, (max(1, PerSecond) -
// 1)/PerSecond, of now. The jobs sent back in one claim are spread a
// start apart, the latest PartitionRecheckMax from now.
func (c *Client) takeStart(tr kv.Transaction, kind, part string, pc *partClaims, lim Limit, now time.Time) (time.Time, bool, error) {
	if !pc.startsRead {
		if pc.startsFut == nil {
			pc.startsFut = tr.Snapshot().Get(c.k.partStartsKey(kind, part))
		}
		v, err := pc.startsFut.Get()
		if err != nil {
			return time.Time{}, false, err
		}
		pc.tat, pc.startsRead = kv.DecodeInt64(v), true
	}
	nowUs := now.UnixMicro()
	rm := lim.rateMicro()
	step := (int64(1e12) + rm - 1) / rm // µs between starts, rounded up: never faster than PerSecond
	depth := (max(1, int64(lim.PerSecond)) - 1) * step
	tat := max(pc.tat, nowUs)
	if tat-nowUs > depth {
		due := min(tat-depth+pc.denied*step, nowUs+PartitionRecheckMax.Microseconds())
		pc.denied++
		return time.UnixMicro(due), false, nil
	}
	pc.tat = tat + step
	tr.Set(c.k.partStartsKey(kind, part), kv.Int64(pc.tat))
	return time.Time{}, true, nil
}

// countPartClaims reads pc's running set, once per attempt (a read that
// conflicts with the ends that clear entries: a job made to wait is woken
// by an end that commits after its claim, or its claim fails), checks the
// entries when they reach the limit, and, when it read them all, sets the
// partition's count to the entries found (this attempt's grants counted
// on from there).
func (c *Client) countPartClaims(tr kv.Transaction, kind, part string, pc *partClaims, limit int) error {
	if pc.ranged {
		return nil
	}
	if err := c.readPartClaims(tr, kind, part, pc, limit); err != nil {
		return err
	}
	if err := c.readPartLeases(tr, kind, part, pc); err != nil {
		return err
	}
	whole := !pc.overflow && !pc.leaseOverflow // (a check that clears entries may reset overflow)
	if (pc.live >= limit || pc.overflow || pc.leaseOverflow) && !pc.checked {
		if err := c.checkPartClaims(tr, kind, part, pc); err != nil {
			return err
		}
	}
	if whole {
		tr.Set(c.k.partCountKey(kind, part), kv.Int64(int64(pc.live)))
		pc.count, pc.tracked = int64(pc.live), true
		pc.countSet, pc.ownAtSet = true, pc.ownAtRead
	}
	return nil
}

// readPartClaims reads pc's running set: the limit in force and
// partitionScanExtra entries more at most (a set with that many counts as
// full until checked). Until checked, every entry counts as a running job.
func (c *Client) readPartClaims(tr kv.Transaction, kind, part string, pc *partClaims, limit int) error {
	scan := limit + partitionScanExtra + 1
	rr := pc.runningFut
	if rr == nil || pc.wrote {
		begin, end := c.k.root.Sub(keyPartRunning, kind, part).FDBRangeKeys()
		rr = tr.GetRange(kv.KeyRange{Begin: begin, End: end}, kv.RangeOptions{Limit: scan})
	}
	kvs, err := rr.GetSliceWithError()
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
	pc.live = live + pc.leaseLive
	if cleared > 0 {
		pc.overflow = false // a place among those read: the next claim reads the rest
	}
	return nil
}

// partLeasesScan bounds the Runtimes' records of places one claim reads
// in a partition (a Runtime has one per partition where it holds places).
const partLeasesScan = 1000

// readPartLeases adds to pc's running jobs the places Runtimes lease in
// part (placelease.go): a record whose Runtime's lease of the kind's
// capacity is gone (the Runtime died, and another's renewal cleared it a
// Timeout later) is cleared and not counted, and its places wake as many
// waiting jobs (placeWakes at most). Past partLeasesScan records the
// partition counts as full.
func (c *Client) readPartLeases(tr kv.Transaction, kind, part string, pc *partClaims) (err error) {
	rr := pc.leasesFut
	if rr == nil {
		rr = tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyPartLeased, kind, part}), kv.RangeOptions{Limit: partLeasesScan + 1})
	}
	kvs, err := rr.GetSliceWithError()
	if err != nil {
		return err
	}
	if len(kvs) > partLeasesScan {
		pc.leaseOverflow = true
	}
	own := 0 // the claiming Runtime's record, as stored
	defer func() {
		if pc.node != nil {
			// With this claim's grants so far (not written yet).
			n := own + pc.leased
			pc.live, pc.leaseLive, pc.ownAtRead = pc.live+n, pc.leaseLive+n, n
		}
	}()
	type rec struct {
		key  kv.Key
		node []byte
		n    int
		fut  kv.FutureByteSlice
	}
	var others []rec
	for _, e := range kvs {
		t, err := c.k.root.Unpack(e.Key)
		if err != nil || len(t) != 4 || t[2] != any(part) {
			continue
		}
		node, _ := t[3].([]byte)
		n := int(kv.DecodeInt64(e.Value))
		if pc.node != nil && string(node) == string(pc.node) {
			own = n
			continue
		}
		others = append(others, rec{e.Key, node, n, tr.Get(c.k.capacityKey(kind, node))})
	}
	freed := 0
	defer func() {
		if freed == 0 || err != nil {
			return
		}
		// The places of the dead wake as many waiters (this claim's job
		// among them, as may be).
		wakes := pc.wakes
		if wakes == nil {
			wakes = new(int)
		}
		for ; freed > 0 && *wakes < placeWakes; freed-- {
			*wakes++
			if err = c.wakeOne(tr, kind, part); err != nil {
				return
			}
		}
	}()
	for _, o := range others {
		v, err := o.fut.Get()
		if err != nil {
			return err
		}
		if v == nil {
			tr.Clear(o.key)
			freed += o.n
			continue
		}
		pc.live, pc.leaseLive = pc.live+o.n, pc.leaseLive+o.n
		pc.holders = append(pc.holders, o.node)
	}
	return nil
}

// recallHolders, in a claim that makes a job of pc's partition wait, asks
// the other Runtimes that hold places there (as its read of the running
// set found them) to give them back as they come free: each one's
// PARTITION_RECALL, which it watches, is added to, once per claim.
func (c *Client) recallHolders(tr kv.Transaction, kind string, pc *partClaims) {
	if pc.recalled {
		return
	}
	pc.recalled = true
	for _, node := range pc.holders {
		tr.Add(c.k.partRecallKey(kind, node), one)
	}
}
