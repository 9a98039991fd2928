package fdbjobs

// Places leased to a Runtime (see doc.go, "Partitions"): under a limit of
// running jobs per partition (and no limit of starts), a place a
// Runtime's claim takes for a job of its node's own shards of the queue
// stays the Runtime's once its job ends, for its next job of the
// partition, until it goes unused for a sweep, jobs of the partition wait
// for a place, or the limit changes. Most starts then write nothing for
// their place, and most ends nothing either. (A job the node helps with,
// from another's shard, holds an entry of its own: the node's next jobs
// come from its own shards, and a place it kept would sit idle.)

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

const (
	// placeSweep is how often a Runtime gives back the places it leased
	// that went unused since the last sweep, and reads whether jobs still
	// wait where it saw them wait. (Where jobs wait, places go back at
	// once: a claim that makes one wait asks the Runtimes holding places
	// there, through their PARTITION_RECALL.)
	placeSweep = time.Second
	// placePage is how many partitions one transaction of a sweep
	// writes.
	placePage = 100
	// placeWakes bounds the waiting jobs one transaction of a sweep
	// wakes in one partition (the others look again at their own time,
	// or are woken by the next place freed), and, once reached, ends the
	// transaction's page.
	placeWakes = 32
	// placeUnsure is how long a Runtime keeps sweeping a partition where
	// a claim of its failed: the claim's commit may still land (cut short
	// by a hold that lapsed, or commit_unknown_result then an error), its
	// places counted in the store and not by the Runtime. FoundationDB
	// resolves no commit whose read version is older than
	// kv.MaxTransactionLifetimeMillis; twice that leaves room for the
	// clocks.
	placeUnsure = 2 * kv.MaxTransactionLifetimeMillis * time.Millisecond
)

// partRecallKey is a counter other Runtimes' claims add to when they
// make a job wait in a partition where node's Runtime holds places
// (recallHolders); that Runtime watches it.
func (k keys) partRecallKey(kind string, node []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartRecall, kind, node})
}

// partLeasedKey is the places node's Runtime leases in part: an int64 LE,
// written only by that Runtime's claims and sweeps (and cleared by a
// claim that finds its lease of the kind's capacity gone).
func (k keys) partLeasedKey(kind, part string, node []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyPartLeased, kind, part, node})
}

// leasedPart is a Runtime's places in one partition.
type leasedPart struct {
	// leased is the places the store holds for the Runtime, as its last
	// write that committed left them (or fewer: a write that failed
	// counts the lower of before and after; the next reads the store).
	leased int
	// used is those of them that jobs running on the Runtime hold.
	used int
	// idle is the fewest places unused since the last sweep.
	idle int
	// limit is the partition limit the places were counted under: a
	// place is reused only while the kind's limit is the same.
	limit int
	// contended: jobs wait for a place in the partition (a claim of the
	// Runtime's made one wait, or a sweep read the partition's hint), so
	// that a place freed goes back, and wakes one.
	contended bool
	// unsure: until then each sweep writes the store's places down to
	// leased and keeps the record (see placeUnsure).
	unsure time.Time
}

// placeLeases is a Runtime's places in one kind's partitions (one per
// Start, beside its capacity: a place is the Runtime's while its lease of
// the kind's capacity is, the record other Runtimes' claims check).
type placeLeases struct {
	r  *Runtime
	k  *kindWorker
	cp *capacity
	// mu guards parts; the Runtime's claims and sweeps that write the
	// store's places hold k.claims too (before mu), so that one at a time
	// writes them.
	mu    sync.Mutex
	parts map[string]*leasedPart
	// poke asks the sweeper for a sweep now (buffered: one pending).
	poke chan struct{}
}

func newPlaceLeases(r *Runtime, k *kindWorker, cp *capacity) *placeLeases {
	return &placeLeases{r: r, k: k, cp: cp, parts: map[string]*leasedPart{}, poke: make(chan struct{}, 1)}
}

// limit is the kind's limit of running jobs per partition when places
// may be leased under it (no limit of starts), 0 otherwise.
func (pl *placeLeases) limit() int {
	m := pl.r.c.infos.Load()
	if m == nil || !pl.cp.leased.Load() {
		return 0
	}
	ti := (*m)[pl.k.kind]
	if ti.partRate > 0 {
		return 0
	}
	return ti.partLimit
}

// take gives a job of part one of the Runtime's unused places there, when
// it has one it may reuse.
func (pl *placeLeases) take(part string, limit int) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p := pl.parts[part]
	if p == nil || limit == 0 || p.limit != limit || p.contended || p.used >= p.leased {
		return false
	}
	p.used++
	p.idle = min(p.idle, p.leased-p.used)
	return true
}

// granted records, after a claim that committed, the Runtime's places in
// part as it wrote them (w), its jobs holding w.grants of them.
func (pl *placeLeases) granted(part string, w leaseWrite) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p := pl.part(part)
	p.leased, p.limit = w.leased, w.limit
	p.used += w.grants
	p.contended = p.contended || w.contended
	p.idle = min(p.idle, max(0, p.leased-p.used))
}

// part returns part's record, made when it has none. mu held.
func (pl *placeLeases) part(part string) *leasedPart {
	p := pl.parts[part]
	if p == nil {
		p = &leasedPart{}
		pl.parts[part] = p
	}
	return p
}

// leasedOf is the places the Runtime holds in part as it knows them.
func (pl *placeLeases) leasedOf(part string) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p := pl.parts[part]; p != nil {
		return p.leased
	}
	return 0
}

// track makes sure the partitions of claims have records, so that a
// sweep writes the store's places there down to what the Runtime knows,
// should a claim commit unseen (see failed).
func (pl *placeLeases) track(claims []*claim) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, cl := range claims {
		pl.part(cl.part)
	}
}

// failed keeps the records of claims' partitions for placeUnsure: the
// claims failed, and their commit may still land.
func (pl *placeLeases) failed(claims []*claim) {
	until := pl.r.c.cfg.Clock.Now().Add(placeUnsure)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, cl := range claims {
		pl.part(cl.part).unsure = until
	}
}

// forget counts none of the places as the Runtime's: its lease of the
// kind's capacity is new, and another Runtime may have taken the places
// it held under an earlier one. (A sweep writes the store's down to
// none; the jobs still running leave.)
func (pl *placeLeases) forget() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, p := range pl.parts {
		p.leased, p.idle = 0, 0
	}
}

// holding reports whether the Runtime holds places, or may: its lease of
// the kind's capacity stays while it does, so that it can give them back.
func (pl *placeLeases) holding() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return len(pl.parts) > 0
}

// contend records that jobs of part wait for a place: the Runtime's
// places there go back as they come free.
func (pl *placeLeases) contend(part string) {
	pl.mu.Lock()
	p := pl.part(part)
	p.contended = true
	spare := p.used < p.leased
	pl.mu.Unlock()
	if spare {
		pl.wake()
	}
}

// release gives back the place a job of part held, as it leaves the
// Runtime: kept for the next job, or, where jobs wait or the limit
// changed, given back by a sweep now.
func (pl *placeLeases) release(part string) {
	pl.mu.Lock()
	p := pl.parts[part]
	now := false
	if p != nil && p.used > 0 {
		p.used--
		now = p.contended || p.limit != pl.limit()
	}
	pl.mu.Unlock()
	if now {
		pl.wake()
	}
}

// wake asks for a sweep now.
func (pl *placeLeases) wake() {
	select {
	case pl.poke <- struct{}{}:
	default:
	}
}

// lapsed gives up the places no job holds: the lease of the kind's
// capacity lapsed (its jobs' ctx ended), and other Runtimes may take them
// a Timeout on. The next sweep writes the store's places down to those the
// jobs still hold, and each goes back as its job ends.
func (pl *placeLeases) lapsed() {
	pl.mu.Lock()
	for _, p := range pl.parts {
		p.leased, p.idle, p.contended = min(p.leased, p.used), 0, true
	}
	pl.mu.Unlock()
	pl.wake()
}

// run sweeps every placeSweep, and when asked, until ctx ends, then gives
// back every place (the Runtime's jobs have ended by then). It watches
// the Runtime's PARTITION_RECALL, and reads the hints of the partitions
// where it holds places as soon as another Runtime's claim adds to it.
func (pl *placeLeases) run(ctx context.Context) {
	clock := pl.r.c.cfg.Clock
	t := clock.NewTicker(placeSweep)
	defer t.Stop()
	seen := int64(0)
	var watch kv.FutureNil
	var wb kv.Backoff
	defer func() {
		if watch != nil {
			watch.Cancel()
		}
	}()
	arm := func() {
		v, w, err := pl.recallWatch(ctx)
		if err != nil {
			return // armed again at the next sweep
		}
		watch = w
		if v != seen {
			seen = v
			pl.sweep(ctx, false, false, true)
		}
	}
	arm()
	for {
		var recalled <-chan struct{}
		if watch != nil {
			recalled = watch.Done()
		}
		select {
		case <-ctx.Done():
			if pl.r.leaveLease {
				return // as a Runtime that died
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), partitionReleaseTimeout)
			pl.sweep(cctx, true, false, false)
			cancel()
			return
		case <-t.Chan():
			pl.sweep(ctx, false, true, true)
			if watch == nil {
				arm()
			}
		case <-pl.poke:
			pl.sweep(ctx, false, false, false)
		case <-recalled:
			_, err := watch.Get()
			watch = nil
			if err != nil {
				if d, ok := wb.Next(err); ok {
					select {
					case <-clock.After(d):
					case <-ctx.Done():
					}
				}
				continue // armed again at the next sweep
			}
			wb.Reset()
			arm()
		}
	}
}

// recallWatch reads the Runtime's PARTITION_RECALL and watches it.
func (pl *placeLeases) recallWatch(ctx context.Context) (int64, kv.FutureNil, error) {
	type res struct {
		v int64
		w kv.FutureNil
	}
	key := pl.r.c.k.partRecallKey(pl.k.kind, pl.cp.node)
	r, err := kv.Transact(ctx, pl.r.c.db, func(tr kv.Transaction) (res, error) {
		v, err := tr.Get(key).Get()
		if err != nil {
			return res{}, err
		}
		return res{kv.DecodeInt64(v), tr.Watch(key)}, nil
	})
	return r.v, r.w, err
}

// placeReturn is one partition of a sweep: its places as the Runtime
// knows them and as they will be.
type placeReturn struct {
	part      string
	target    int
	readHint  bool
	contended bool
	// none: a wake found no job waiting (the partition is contended no
	// more, until a claim makes one wait again).
	none bool
}

// sweep gives back, a page of partitions per transaction fenced by the
// kind's capacity lease, the places of each partition that the Runtime
// need not keep: all those unused where jobs wait or the limit changed
// (or all, with all), the ones unused since the last sweep with
// periodic; each place given back wakes a job waiting in the partition.
// With hints it reads whether jobs wait in every partition where the
// Runtime holds places or saw jobs wait. A partition the Runtime neither
// holds places in nor saw jobs wait in is written (the store's places
// brought down to none, should a write have failed) and forgotten, once
// no claim of the Runtime's that failed there may still commit.
func (pl *placeLeases) sweep(ctx context.Context, all, periodic, hints bool) {
	pl.k.claims.Lock()
	defer pl.k.claims.Unlock()
	limit := pl.limit()
	now := pl.r.c.cfg.Clock.Now()
	var rets []placeReturn
	pl.mu.Lock()
	for part, p := range pl.parts {
		unsure := now.Before(p.unsure)
		if limit == 0 {
			p.contended = false // no limit (or no lease): no job waits for the places
		}
		unused := max(0, p.leased-p.used)
		give := 0
		switch {
		case all || p.contended || p.limit != limit:
			give = unused
		case periodic:
			give = min(p.idle, unused)
		}
		if periodic {
			p.idle = unused - give
		}
		readHint := hints && (p.leased > 0 || p.contended)
		if give == 0 && !readHint && !unsure && (p.leased > 0 || p.contended) {
			continue
		}
		// Not reused meanwhile: the places go as the sweep begins (and
		// stay gone should its write fail; the next reads the store).
		p.leased -= give
		rets = append(rets, placeReturn{part: part, target: p.leased, readHint: readHint})
	}
	pl.mu.Unlock()
	for len(rets) > 0 {
		page := rets[:min(placePage, len(rets))]
		n, err := pl.giveBack(ctx, page)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrCapacityLapsed) {
				pl.r.c.cfg.Logger.Warn().Err(err).Str("kind", pl.k.kind).
					Msg("fdbjobs: runtime: giving back places in partitions (the next sweep tries again)")
			}
			rets = rets[len(page):]
			continue
		}
		page, rets = page[:n], rets[n:]
		again := false // jobs wait where unused places are left
		pl.mu.Lock()
		for _, rt := range page {
			p := pl.parts[rt.part]
			if p == nil {
				continue
			}
			p.leased = min(p.leased, rt.target) // (the store's, when it held fewer)
			if rt.readHint {
				p.contended = rt.contended
				again = again || p.contended && p.used < p.leased
			}
			if rt.none {
				p.contended = false
			}
			p.idle = min(p.idle, max(0, p.leased-p.used))
			if p.leased == 0 && p.used == 0 && !p.contended && !now.Before(p.unsure) {
				delete(pl.parts, rt.part)
			}
		}
		pl.mu.Unlock()
		if again {
			pl.wake()
		}
	}
}

// giveBack writes rets' places in one transaction: each partition's
// record of the Runtime's places set to its target (from what the store
// holds, so that a retry after commit_unknown_result gives back nothing
// twice), its count lowered by as many, and as many jobs waiting there
// woken; it reads the hints asked for. Once it woke placeWakes jobs it
// writes no further partition: it returns how many it wrote, at least one.
func (pl *placeLeases) giveBack(ctx context.Context, rets []placeReturn) (int, error) {
	c, kind, node := pl.r.c, pl.k.kind, pl.cp.node
	return kv.Transact(ctx, c.db, func(tr kv.Transaction) (int, error) {
		fence := pl.cp.fence(tr)
		held := make([]kv.FutureByteSlice, len(rets))
		hints := make([]kv.FutureByteSlice, len(rets))
		for i, rt := range rets {
			held[i] = tr.Get(c.k.partLeasedKey(kind, rt.part, node))
			if rt.readHint {
				hints[i] = tr.Snapshot().Get(c.k.partHintKey(kind, rt.part))
			}
		}
		if err := fence(); err != nil {
			return 0, err
		}
		woken := 0
		for i := range rets {
			if woken >= placeWakes {
				return i, nil
			}
			rt := &rets[i]
			rt.none, rt.contended = false, false // (an earlier attempt's)
			v, err := held[i].Get()
			if err != nil {
				return 0, err
			}
			// Never above what the store holds: places a claim that found
			// the lease gone cleared stay cleared.
			stored := int(kv.DecodeInt64(v))
			rt.target = min(rt.target, stored)
			c.writeLeased(tr, kind, rt.part, node, stored, rt.target)
			for range min(placeWakes, max(0, stored-rt.target)) {
				woke, err := c.wakeFirst(tr, kind, rt.part)
				if err != nil {
					return 0, err
				}
				if !woke {
					rt.none = true // none left waiting
					break
				}
				woken++
			}
			if hints[i] != nil {
				hv, err := hints[i].Get()
				if err != nil {
					return 0, err
				}
				rt.contended = kv.DecodeInt64(hv) > 0
			}
		}
		return len(rets), nil
	})
}

// writeLeased sets, in tr, node's places in part from stored (as read) to
// target, and the partition's count by the difference.
func (c *Client) writeLeased(tr kv.Transaction, kind, part string, node []byte, stored, target int) {
	if stored == target {
		return
	}
	key := c.k.partLeasedKey(kind, part, node)
	if target <= 0 {
		tr.Clear(key)
	} else {
		tr.Set(key, kv.Int64(int64(target)))
	}
	tr.Add(c.k.partCountKey(kind, part), kv.Int64(int64(target-stored)))
}
