package fdbjobs

// Cluster-wide limits (see doc.go, "Limits"): a kind's limit on the jobs
// running at once across every node, shared out among the Runtimes as
// leases of capacity.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Bounds of a Limit.
const (
	// LimitMax is the highest Limit.Running and Limit.PerSecond.
	LimitMax = 1_000_000
	// LimitRateMin is the lowest Limit.PerSecond but 0.
	LimitRateMin = 0.001
)

// Limit is a kind's cluster-wide limit (SetLimit), or its limit per
// partition (SetPartitionLimit, where every "of the kind" below reads
// "of one partition of the kind"): of the jobs running at once, of the
// jobs started per second, or both.
type Limit struct {
	// Running is the most jobs of the kind that run at once across every
	// Runtime of the cluster, from 1 to LimitMax (0: no such limit).
	Running int
	// PerSecond is the jobs of the kind that start per second across
	// every Runtime, on average, from LimitRateMin to LimitMax (0: no such
	// limit): each Runtime's part is a token bucket that holds a second's
	// worth of its rate, at least one start, so that over any window of W
	// seconds the cluster starts at most PerSecond × (W + 1) jobs and one
	// per Runtime (in a single second, up to about twice PerSecond).
	PerSecond float64
}

// check validates l.
func (l Limit) check() error {
	switch {
	case l.Running == 0 && l.PerSecond == 0:
		return fmt.Errorf("%w: a limit of neither running jobs nor starts per second (ClearLimit removes one)", ErrInvalidArgument)
	case l.Running < 0 || l.Running > LimitMax:
		return fmt.Errorf("%w: limit of %d running jobs outside [1, %d]", ErrInvalidArgument, l.Running, LimitMax)
	case l.PerSecond != 0 && !(l.PerSecond >= LimitRateMin && l.PerSecond <= LimitMax):
		return fmt.Errorf("%w: limit of %v starts per second outside [%v, %d]", ErrInvalidArgument, l.PerSecond, LimitRateMin, LimitMax)
	}
	return nil
}

// rateMicro is PerSecond in millionths of a start per second: the unit of
// rates in the store.
func (l Limit) rateMicro() int64 { return int64(math.Round(l.PerSecond * 1e6)) }

// SetLimit sets kind's cluster-wide limit for every Runtime, changeable
// at run time. It is not in force when SetLimit returns: each Runtime
// sees it through its Client's watch of the types version (milliseconds,
// or the type-check period, TypeCheckPeriodDefault, at worst), then takes
// its share at its next renewal (within about a second for a kind that
// had no limit; otherwise within about Timeout/8, under 5 s at the
// default Timeout).
// Until then a Runtime may go on starting jobs as before (up to its
// Concurrency), and a kind that gets its first limit starts none until
// its Runtimes' leases are written. Set a limit before starting the
// Runtimes to have it from their first job. A lowered limit stops no
// running job: the Runtimes take new ones only once fewer than the limit
// run. Jobs taken with the lower-level Accept and AcceptBatch neither
// follow a limit nor count toward it. tx may be nil, a Database or a
// caller's Transaction.
func (c *Client) SetLimit(ctx context.Context, tx kv.Transactor, kind string, l Limit) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if err := l.check(); err != nil {
		return err
	}
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) error {
		tr.Set(c.k.limitKey(kind), tuple.Tuple{int64(l.Running), l.rateMicro()}.Pack())
		return nil
	})
}

// ClearLimit removes kind's limit: its Runtimes take jobs up to their own
// Concurrency again.
func (c *Client) ClearLimit(ctx context.Context, tx kv.Transactor, kind string) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) error { tr.Clear(c.k.limitKey(kind)); return nil })
}

// GetLimit returns kind's limit; ok is false when it has none.
func (c *Client) GetLimit(ctx context.Context, tx kv.ReadTransactor, kind string) (l Limit, ok bool, err error) {
	if err := checkName("kind", kind); err != nil {
		return Limit{}, false, err
	}
	v, err := kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(c.k.limitKey(kind)).Get()
	})
	if err != nil || v == nil {
		return Limit{}, false, err
	}
	l, err = decodeLimit(v)
	return l, err == nil, err
}

func decodeLimit(v []byte) (Limit, error) {
	t, err := tuple.Unpack(v)
	if err == nil && (len(t) == 1 || len(t) == 2) {
		n, ok := intElem(t[0])
		var r int64
		if len(t) == 2 {
			r, ok = intElem(t[1])
		}
		l := Limit{Running: int(n), PerSecond: float64(r) / 1e6}
		if ok && l.check() == nil {
			return l, nil
		}
	}
	return Limit{}, fmt.Errorf("fdbjobs: bad limit %x", v)
}

func (k keys) limitKey(kind string) kv.Key { return k.root.Pack(tuple.Tuple{keyLimit, kind}) }

func (k keys) capacityKey(kind string, node []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyCapacity, kind, node})
}

func (k keys) fenceKey(kind string, node []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyCapacityFence, kind, node})
}

// capacityRecord is a Runtime's lease of a limited kind's capacity: the
// jobs it may run at once and how many it would run, its rate of starts
// and the rate it would take (in millionths per second), and the version
// of the commit that wrote it.
type capacityRecord struct {
	node                []byte
	grant, want         int64
	rateGrant, rateWant int64
	version             int64
}

func (k keys) decodeCapacity(e kv.KeyValue) (capacityRecord, error) {
	kt, err := k.root.Unpack(e.Key)
	vt, verr := tuple.Unpack(e.Value)
	if err == nil && verr == nil && len(kt) == 3 && len(vt) == 5 {
		node, ok1 := kt[2].([]byte)
		grant, ok2 := intElem(vt[0])
		want, ok3 := intElem(vt[1])
		vs, ok4 := vt[2].(tuple.Versionstamp)
		rg, ok5 := intElem(vt[3])
		rw, ok6 := intElem(vt[4])
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 {
			return capacityRecord{node: node, grant: grant, want: want, rateGrant: rg, rateWant: rw,
				version: int64(binary.BigEndian.Uint64(vs.TransactionVersion[:8]))}, nil
		}
	}
	return capacityRecord{}, fmt.Errorf("fdbjobs: bad capacity record %x", e.Key)
}

// grantOf is the capacity a Runtime that runs running jobs and would run
// want takes of limit, given the grants others hold and what they want:
// share, no more than is free and no more than its max-min fair part of
// the limit among every Runtime's wants, which bounds the jobs it starts;
// and held, what its lease holds: share, or what it runs when that is
// more (which is free: grants are written one transaction after the
// other, each within what the others left), so that nobody takes the
// capacity of jobs still running, and the lease shrinks to share as they
// end.
func grantOf(limit, others int64, otherWants []int64, running, want int64) (share, held int64) {
	free := max(0, limit-others)
	share = min(want, free, fairPart(limit, otherWants, want))
	return share, max(running, share)
}

// fairPart is a Runtime's max-min fair part of limit when it wants want
// and the others want otherWants: the limit is filled up evenly, the
// smallest wants first, each Runtime getting no more than it wants (each
// level rounded up, so that the parts add up to the limit).
func fairPart(limit int64, otherWants []int64, want int64) int64 {
	others := slices.Sorted(slices.Values(otherWants))
	rest := limit
	for i, o := range others {
		n := int64(len(others)-i) + 1 // the others left, and this Runtime
		level := (rest + n - 1) / n
		if want <= o || o > level {
			return min(want, level) // its turn, or the level is reached
		}
		rest -= o
	}
	return min(want, rest)
}

// capacity is a Runtime's lease of one limited kind's capacity, renewed by
// its loop (run). Its node is the Runtime's, drawn at each Start.
type capacity struct {
	r    *Runtime
	k    *kindWorker
	node []byte
	// samples are (local time, read version) pairs of the loop's own
	// renewals, oldest first: a record written before a version read
	// Timeout ago is another Runtime's that stopped renewing. Owned by
	// the loop.
	samples []versionSample
	// leased: the Runtime holds a lease (its accepts are fenced).
	leased atomic.Bool
	// limiter spaces the Runtime's starts by its part of the kind's
	// rate, while rated; a new one (a full bucket) when the rate comes
	// back from none or 0.
	limiter atomic.Pointer[rate.Limiter]
	rated   atomic.Bool
	// startsMu serializes a rated kind's fetchers on the Runtime from
	// their look at the bucket to their accept's end, so that the starts
	// they make are those the bucket held.
	startsMu sync.Mutex
	// starved: a fetcher waited for starts since the last renewal.
	starved atomic.Bool
	// mu guards lapse and lapsed.
	mu sync.Mutex
	// lapse ends the ctx of the kind's running jobs (cause
	// ErrCapacityLapsed) when the lease lapses; lapsed is that ctx.
	lapsed context.Context
	lapse  context.CancelCauseFunc
	// places are the Runtime's places in the kind's partitions, held
	// while the lease is (placelease.go).
	places *placeLeases
}

type versionSample struct {
	at      time.Time
	version int64
}

// ErrCapacityLapsed is the cause of a limited kind's Work ctx when its
// Runtime could not renew its lease of the kind's capacity for half the
// kind's Timeout: the job is handed back, before other Runtimes may take
// that capacity. An accept whose lease another Runtime took returns it.
var ErrCapacityLapsed = fmt.Errorf("fdbjobs: lease of the kind's capacity lapsed")

func newCapacity(r *Runtime, k *kindWorker) (*capacity, error) {
	node, err := newToken()
	if err != nil {
		return nil, err
	}
	cp := &capacity{r: r, k: k, node: node}
	cp.places = newPlaceLeases(r, k, cp)
	cp.limiter.Store(rate.NewLimiter(0, 0))
	cp.lapsed, cp.lapse = context.WithCancelCause(context.Background())
	return cp, nil
}

// jobCtx is the ctx a running job's ctx also ends with: the current
// lease's.
func (cp *capacity) jobCtx() context.Context {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.lapsed
}

// renewPeriod is how often a Runtime renews its lease of a limited kind's
// capacity, give or take a quarter: eight times per Timeout, four times
// per the lease's half.
func (cp *capacity) renewPeriod() time.Duration { return cp.k.opts.Timeout / 8 }

// limitPoll is how often a Runtime looks at its Client's copy of
// the types for a limit of a kind that has none (no transaction).
const limitPoll = time.Second

// run renews the lease until ctx ends, then clears it. A kind without a
// limit takes no lease and runs up to its Concurrency; run looks at the
// Client's copy of the types every limitPoll for a limit. Until its first
// renewal has read whether the kind has a limit, the Runtime takes none
// of its jobs (Start sets the grant to 0), nor, once the kind got one,
// until its first lease: its fetchers, waiting, bring that renewal
// forward.
func (cp *capacity) run(ctx context.Context) {
	clock := cp.r.c.cfg.Clock
	log := cp.r.c.cfg.Logger
	held := false // a record of this Runtime's may be in the store
	first := true
	// short: the last renewal's grant was all the Runtime asked for, and
	// less than its Concurrency (it was idle).
	short := false
	// The lease lapses half a Timeout after the renewal that wrote it
	// began, unless a later one renews it: a timer, so that a renewal
	// stuck in its retries does not keep it.
	var lapse clockwork.Timer
	defer func() {
		if lapse != nil {
			lapse.Stop()
		}
	}()
	// The places' sweeper gives them back before the lease goes.
	placesCtx, stopPlaces := context.WithCancel(ctx)
	placesDone := make(chan struct{})
	go func() { defer close(placesDone); cp.places.run(placesCtx) }()
	defer func() {
		stopPlaces()
		<-placesDone
		if held && !cp.r.leaveLease {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cp.k.opts.Timeout)
			defer cancel()
			if _, err := kv.Transact(cctx, cp.r.c.db, func(tr kv.Transaction) (any, error) {
				tr.Clear(cp.r.c.k.capacityKey(cp.k.kind, cp.node))
				tr.Clear(cp.r.c.k.fenceKey(cp.k.kind, cp.node))
				tr.Clear(cp.r.c.k.partRecallKey(cp.k.kind, cp.node))
				return nil, nil
			}); err != nil {
				log.Warn().Err(err).Str("kind", cp.k.kind).Msg("fdbjobs: runtime: giving back the kind's capacity (other Runtimes take it a Timeout later)")
			}
		}
	}()
	for {
		limited, known := cp.limited()
		wait := limitPoll
		if limited || !known || held || first {
			// Jittered, so that the Runtimes' renewals (which conflict
			// with each other) do not keep in step.
			wait = cp.renewPeriod()*3/4 + jitter(cp.renewPeriod()/2)
			start := clock.Now()
			rn, err := cp.renew(ctx)
			short = rn.short
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				log.Warn().Err(err).Str("kind", cp.k.kind).Msg("fdbjobs: runtime: renewing the lease of the kind's capacity")
			case !rn.limited:
				// No limit: the next look at the Client's copy comes a
				// limitPoll on, not a renewal's period.
				held, first, wait = false, false, limitPoll
				if lapse != nil {
					lapse.Stop()
				}
				cp.leased.Store(false)
				cp.setRate(-1)
				cp.k.slots.setGrant(-1)
			default:
				held, first = true, false
				if lapse != nil {
					lapse.Stop()
				}
				if rn.fresh {
					cp.places.forget()
				}
				if left := start.Add(cp.k.opts.Timeout / HoldFraction).Sub(clock.Now()); left > 0 {
					cp.leased.Store(true)
					cp.setRate(rn.rate)
					cp.k.slots.setGrant(int(rn.grant))
					lapse = clock.AfterFunc(left, cp.lapseNow)
				} else {
					cp.lapseNow() // renewed too late to count on
				}
			}
		}
		// A fetcher that waits for the grant (its slots all taken) brings
		// the renewal forward when the grant was short of the
		// Concurrency only because the Runtime asked for little (it was
		// idle), renewWanting after the last at the soonest: it asks for
		// its Concurrency as soon as it runs a job. A grant cut by what
		// the others hold waits for the period: they give back at
		// theirs.
		last := clock.Now()
		t := clock.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.Chan():
				break waiting
			case <-cp.k.slots.wanting:
				// A fetcher waits: for more of a grant the Runtime was
				// short of, or for the first lease of a kind that got a
				// limit (fetch: it takes no job until then).
				limited, _ := cp.limited()
				if !short && (!limited || cp.leased.Load()) {
					continue
				}
				if d := renewWanting - clock.Since(last); d > 0 {
					select {
					case <-ctx.Done():
						t.Stop()
						return
					case <-clock.After(d):
					}
				}
				break waiting
			}
		}
		t.Stop()
	}
}

// renewWanting is the least time between two renewals of a Runtime's
// lease that its fetchers brought forward.
const renewWanting = 50 * time.Millisecond

// limited reads the Client's copy of the types: whether kind has a limit,
// and whether the copy is there to say.
func (cp *capacity) limited() (limited, known bool) {
	m := cp.r.c.infos.Load()
	if m == nil {
		return false, false
	}
	ti := (*m)[cp.k.kind]
	return ti.limit != (Limit{}) || ti.partLimit > 0, true
}

// setRate makes micro (millionths of a start per second) this Runtime's
// rate of starts, with a bucket of a second's worth (at least one start;
// none at rate 0, and the bucket emptied); -1: no rate. A rate that comes
// back from none or 0 starts with a full bucket.
func (cp *capacity) setRate(micro int64) {
	if micro < 0 {
		cp.rated.Store(false)
		return
	}
	now := cp.r.c.cfg.Clock.Now()
	lim := cp.limiter.Load()
	switch {
	case micro == 0:
		cp.limiter.Store(rate.NewLimiter(0, 0))
	case !cp.rated.Load() || lim.Limit() == 0:
		burst := int(max(1, (micro+999_999)/1_000_000))
		cp.limiter.Store(rate.NewLimiter(rate.Limit(float64(micro)/1e6), burst))
	default:
		lim.SetLimitAt(now, rate.Limit(float64(micro)/1e6))
		lim.SetBurstAt(now, int(max(1, (micro+999_999)/1_000_000)))
	}
	cp.rated.Store(true)
}

// startsPoll is how often a fetcher of a rated kind that found its
// bucket empty looks again (its rate may have changed meanwhile).
const startsPoll = 100 * time.Millisecond

// takeStarts waits, while the kind is rated, until the bucket holds at
// least one start, and returns how many of n the fetcher may make (what
// the bucket holds, at most n) and the function that takes from the
// bucket the starts made (the jobs its accept took) and lets the next
// fetcher look; 0 and nil when ctx ended first. A fetcher that waits
// asks for an earlier renewal, as one waiting for slots does.
func (cp *capacity) takeStarts(ctx context.Context, n int) (int, func(got int)) {
	clock := cp.r.c.cfg.Clock
	cp.startsMu.Lock()
	for {
		if !cp.rated.Load() {
			return n, func(int) { cp.startsMu.Unlock() }
		}
		lim := cp.limiter.Load()
		if tokens := lim.TokensAt(clock.Now()); tokens >= 1 {
			return min(n, int(tokens)), func(got int) {
				if got > 0 {
					lim.ReserveN(clock.Now(), got)
				}
				cp.startsMu.Unlock()
			}
		}
		cp.starved.Store(true)
		select {
		case cp.k.slots.wanting <- struct{}{}:
		default:
		}
		select {
		case <-clock.After(startsPoll):
		case <-ctx.Done():
			cp.startsMu.Unlock()
			return 0, nil
		}
	}
}

// lapseNow takes every slot and start away and ends the running jobs'
// ctx; the jobs started after have a new one.
func (cp *capacity) lapseNow() {
	cp.leased.Store(false) // (set again by the next renewal)
	cp.k.slots.setGrant(0)
	cp.setRate(0)
	cp.mu.Lock()
	lapse := cp.lapse
	cp.lapsed, cp.lapse = context.WithCancelCause(context.Background())
	cp.mu.Unlock()
	lapse(ErrCapacityLapsed)
	cp.places.lapsed()
	cp.r.c.cfg.Logger.Warn().Str("kind", cp.k.kind).
		Msg("fdbjobs: runtime: the lease of the kind's capacity lapsed; its running jobs are handed back")
}

// renew writes this Runtime's lease in one transaction: it reads the
// kind's limit and every lease (not as a snapshot: two renewals conflict,
// so that each grant is within what the others left), clears those of
// Runtimes that stopped renewing (written before a version this one read
// Timeout ago), and writes its own with its grants. Without a limit it
// clears its own.
func (cp *capacity) renew(ctx context.Context) (renewal, error) {
	c := cp.r.c
	k := cp.k
	// A Runtime that runs jobs of the kind, or whose fetchers waited for
	// its grants since its last renewal, wants its Concurrency; an idle
	// one, one slot, so that it takes a job as soon as there is one (and
	// then renews to want more).
	running := int64(k.slots.taken())
	busy := running > 0 || k.slots.wasBlocked() || cp.starved.Swap(false)
	want := int64(k.slots.size())
	if !busy {
		want = 1
	}
	stale := cp.staleBefore()
	type res struct {
		renewal
		version int64
		at      time.Time
	}
	r, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (res, error) {
		lf := tr.Get(c.k.limitKey(k.kind))
		plf := tr.Get(c.k.partLimitKey(k.kind))
		// A snapshot read, made a conflicting one under a limit of the
		// kind's own (each grant within what the others left): leases of
		// places alone do not share anything out, so their renewals do
		// not conflict (100 Runtimes' would, all the time).
		recRange := prefixRange(c.k.root, tuple.Tuple{keyCapacity, k.kind})
		recs := tr.Snapshot().GetRange(recRange, kv.RangeOptions{})
		version, err := tr.GetReadVersion().Get()
		if err != nil {
			return res{}, err
		}
		at := c.cfg.Clock.Now()
		lv, err := lf.Get()
		if err != nil {
			return res{}, err
		}
		own := c.k.capacityKey(k.kind, cp.node)
		// Its own record read as it is (the snapshot above does not
		// conflict): another Runtime's clear of it, as stale, makes this
		// renewal run again and find it gone (a new lease, a new fence).
		if err := tr.AddReadConflictKey(own); err != nil {
			return res{}, err
		}
		var limit Limit
		if lv != nil {
			if limit, err = decodeLimit(lv); err != nil {
				return res{}, err
			}
			if err := tr.AddReadConflictRange(recRange); err != nil {
				return res{}, err
			}
		} else if plv, err := plf.Get(); err != nil {
			return res{}, err
		} else if plv == nil && !cp.places.holding() {
			tr.Clear(own)
			tr.Clear(c.k.fenceKey(k.kind, cp.node))
			return res{version: version, at: at}, nil
		}
		// A kind with no limit of its own but one per partition (or
		// places the Runtime holds yet): the lease is its places'
		// (placelease.go), and grants it every slot and start.
		// Rates as slots: a Runtime with jobs running wants the whole
		// rate, an idle one a hundredth.
		total := limit.rateMicro()
		rateWant := total
		if !busy {
			rateWant = max(1, total/100)
		}
		kvs, err := recs.GetSliceWithError()
		if err != nil {
			return res{}, err
		}
		var others, othersRate int64
		var wants, rateWants []int64
		mine := false
		for _, e := range kvs {
			rec, err := c.k.decodeCapacity(e)
			if err != nil {
				return res{}, err
			}
			switch {
			case string(rec.node) == string(cp.node):
				mine = true
			case rec.version < stale:
				// Its Runtime stopped renewing a Timeout ago (unless it
				// renews meanwhile: the clear conflicts with that).
				if err := tr.AddReadConflictKey(e.Key); err != nil {
					return res{}, err
				}
				tr.Clear(e.Key)
				tr.Clear(c.k.fenceKey(k.kind, rec.node))
				tr.Clear(c.k.partRecallKey(k.kind, rec.node))
			default:
				others, othersRate = others+rec.grant, othersRate+rec.rateGrant
				wants, rateWants = append(wants, rec.want), append(rateWants, rec.rateWant)
			}
		}
		rn := renewal{grant: -1, rate: -1, limited: true}
		var g, rg int64
		if limit.Running > 0 {
			var share int64
			share, g = grantOf(int64(limit.Running), others, wants, running, want)
			rn.grant = share
			rn.short = share == want && want < int64(k.slots.size())
		}
		if total > 0 {
			rg = min(rateWant, max(0, total-othersRate), fairPart(total, rateWants, rateWant))
			rn.rate = rg
			rn.short = rn.short || rg == rateWant && rateWant < total
		}
		v, err := tuple.Tuple{g, want, tuple.IncompleteVersionstamp(0), rg, rateWant}.PackWithVersionstamp(nil)
		if err != nil {
			return res{}, err
		}
		tr.SetVersionstampedValue(own, v)
		if !mine {
			// A new lease (or one taken back): its accepts' fence.
			tr.Set(c.k.fenceKey(k.kind, cp.node), nil)
		}
		rn.fresh = !mine
		return res{renewal: rn, version: version, at: at}, nil
	})
	if err != nil {
		return renewal{}, err
	}
	cp.samples = append(cp.samples, versionSample{at: r.at, version: r.version})
	return r.renewal, nil
}

// renewal is what a renewal of a lease gave: the slots (-1: no limit of
// running jobs) and the rate of starts (millionths per second; -1: no
// limit of starts) of the Runtime, whether the kind has a limit, and
// whether the lease is short of the Runtime's Concurrency or of the rate
// only because it asked for little.
type renewal struct {
	grant, rate int64
	limited     bool
	short       bool
	// fresh: the lease is new (or was taken back): places the Runtime
	// held under an earlier one may be others' now.
	fresh bool
}

// staleBefore is the latest version this Runtime read at least Timeout
// ago (its clock): a lease written before it was last renewed more than a
// Timeout ago, so its Runtime has stopped using it (half a Timeout after
// it began that renewal). -1 while there is none.
func (cp *capacity) staleBefore() int64 {
	cut := cp.r.c.cfg.Clock.Now().Add(-cp.k.opts.Timeout)
	v := int64(-1)
	i := 0
	for ; i < len(cp.samples) && !cp.samples[i].at.After(cut); i++ {
		v = cp.samples[i].version
	}
	if i > 1 {
		cp.samples = cp.samples[i-1:] // keep the latest of the old ones
	}
	return v
}

// fence, in an accept transaction of a limited kind, reads this Runtime's
// lease's fence key (not as a snapshot), which only the lease's creation
// and its end write: an accept that commits held the lease, so no other
// Runtime took it back meanwhile, and its own renewals do not make it
// run again. It returns the read's wait.
func (cp *capacity) fence(tr kv.Transaction) func() error {
	f := tr.Get(cp.r.c.k.fenceKey(cp.k.kind, cp.node))
	return func() error {
		v, err := f.Get()
		if err != nil {
			return err
		}
		if v == nil {
			return ErrCapacityLapsed
		}
		return nil
	}
}
