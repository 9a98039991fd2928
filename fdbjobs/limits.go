package fdbjobs

// Cluster-wide limits (see doc.go, "Limits"): a kind's limit on the jobs
// running at once across every node, shared out among the Runtimes as
// leases of capacity.

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// LimitMax is the highest Limit.Running.
const LimitMax = 1_000_000

// Limit is a kind's cluster-wide limit.
type Limit struct {
	// Running is the most jobs of the kind that run at once across every
	// Runtime of the cluster, from 1 to LimitMax.
	Running int
}

// SetLimit sets kind's cluster-wide limit, now and for every Runtime
// (changeable at run time: each Runtime sees it within about a second,
// through the watch of the types version, and takes its share at its
// next renewal). A lowered limit stops no running job: the Runtimes take
// new ones only once fewer than the limit run. tx may be nil, a Database
// or a caller's Transaction.
func (c *Client) SetLimit(ctx context.Context, tx kv.Transactor, kind string, l Limit) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if l.Running < 1 || l.Running > LimitMax {
		return fmt.Errorf("%w: limit of %d running jobs outside [1, %d]", ErrInvalidArgument, l.Running, LimitMax)
	}
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) {
		tr.Set(c.k.limitKey(kind), tuple.Tuple{int64(l.Running)}.Pack())
	})
}

// ClearLimit removes kind's limit: its Runtimes take jobs up to their own
// Concurrency again.
func (c *Client) ClearLimit(ctx context.Context, tx kv.Transactor, kind string) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) { tr.Clear(c.k.limitKey(kind)) })
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
	n, err := decodeLimit(v)
	return Limit{Running: n}, err == nil, err
}

func decodeLimit(v []byte) (int, error) {
	t, err := tuple.Unpack(v)
	if err == nil && len(t) == 1 {
		if n, ok := intElem(t[0]); ok && n >= 1 && n <= LimitMax {
			return int(n), nil
		}
	}
	return 0, fmt.Errorf("fdbjobs: bad limit %x", v)
}

func (k keys) limitKey(kind string) kv.Key { return k.root.Pack(tuple.Tuple{keyLimit, kind}) }

func (k keys) capacityKey(kind string, node []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyCapacity, kind, node})
}

func (k keys) fenceKey(kind string, node []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyCapacityFence, kind, node})
}

// capacityRecord is a Runtime's lease of a limited kind's capacity: the
// jobs it may run at once, how many it would run, and the version of the
// commit that wrote it.
type capacityRecord struct {
	node        []byte
	grant, want int64
	version     int64
}

func (k keys) decodeCapacity(e kv.KeyValue) (capacityRecord, error) {
	kt, err := k.root.Unpack(e.Key)
	vt, verr := tuple.Unpack(e.Value)
	if err == nil && verr == nil && len(kt) == 3 && len(vt) == 3 {
		node, ok1 := kt[2].([]byte)
		grant, ok2 := intElem(vt[0])
		want, ok3 := intElem(vt[1])
		vs, ok4 := vt[2].(tuple.Versionstamp)
		if ok1 && ok2 && ok3 && ok4 {
			return capacityRecord{node: node, grant: grant, want: want,
				version: int64(binary.BigEndian.Uint64(vs.TransactionVersion[:8]))}, nil
		}
	}
	return capacityRecord{}, fmt.Errorf("fdbjobs: bad capacity record %x", e.Key)
}

// grantOf is the capacity a Runtime that runs running jobs and would run
// want takes of limit, given the grants others hold and what they want:
// no more than is free, no more than its max-min fair part of the limit
// among every Runtime's wants, and never less than what it runs (which is
// free: grants are written one transaction after the other, each within
// what the others left).
func grantOf(limit, others int64, otherWants []int64, running, want int64) int64 {
	free := max(0, limit-others)
	return max(running, min(want, free, fairPart(limit, otherWants, want)))
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
	// mu guards lapse and lapsed.
	mu sync.Mutex
	// lapse ends the ctx of the kind's running jobs (cause
	// ErrCapacityLapsed) when the lease lapses; lapsed is that ctx.
	lapsed context.Context
	lapse  context.CancelCauseFunc
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
// limit takes no lease and runs up to its Concurrency. Until its first
// renewal has read whether the kind has a limit, the Runtime takes none
// of its jobs (Start sets the grant to 0).
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
	defer func() {
		if held && !cp.r.leaveLease {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cp.k.opts.Timeout)
			defer cancel()
			if _, err := kv.Transact(cctx, cp.r.c.db, func(tr kv.Transaction) (any, error) {
				tr.Clear(cp.r.c.k.capacityKey(cp.k.kind, cp.node))
				tr.Clear(cp.r.c.k.fenceKey(cp.k.kind, cp.node))
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
			var grant, limit int64
			var err error
			grant, limit, short, err = cp.renew(ctx)
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				log.Warn().Err(err).Str("kind", cp.k.kind).Msg("fdbjobs: runtime: renewing the lease of the kind's capacity")
			case limit == 0:
				held, first = false, false
				if lapse != nil {
					lapse.Stop()
				}
				cp.k.slots.setGrant(-1)
			default:
				held, first = true, false
				if lapse != nil {
					lapse.Stop()
				}
				if left := start.Add(cp.k.opts.Timeout / HoldFraction).Sub(clock.Now()); left > 0 {
					cp.k.slots.setGrant(int(grant))
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
				if !short {
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
	return (*m)[cp.k.kind].limit > 0, true
}

// lapseNow takes every slot away and ends the running jobs' ctx; the
// jobs started after have a new one.
func (cp *capacity) lapseNow() {
	cp.k.slots.setGrant(0)
	cp.mu.Lock()
	lapse := cp.lapse
	cp.lapsed, cp.lapse = context.WithCancelCause(context.Background())
	cp.mu.Unlock()
	lapse(ErrCapacityLapsed)
	cp.r.c.cfg.Logger.Warn().Str("kind", cp.k.kind).
		Msg("fdbjobs: runtime: the lease of the kind's capacity lapsed; its running jobs are handed back")
}

// renew writes this Runtime's lease in one transaction: it reads the
// kind's limit and every lease (not as a snapshot: two renewals conflict,
// so that each grant is within what the others left), clears those of
// Runtimes that stopped renewing (written before a version this one read
// Timeout ago), and writes its own with its grant. Without a limit it
// clears its own. It returns the grant and the limit (0: none).
func (cp *capacity) renew(ctx context.Context) (grant, limit int64, short bool, err error) {
	c := cp.r.c
	k := cp.k
	// A Runtime that runs jobs of the kind wants its Concurrency; an idle
	// one, one slot, so that it takes a job as soon as there is one (and
	// then wants more at its next renewal).
	running := int64(k.slots.taken())
	want := int64(k.slots.size())
	if running == 0 {
		want = 1
	}
	stale := cp.staleBefore()
	type res struct {
		grant, limit, version int64
		at                    time.Time
	}
	r, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (res, error) {
		lf := tr.Get(c.k.limitKey(k.kind))
		recs := tr.GetRange(prefixRange(c.k.root, tuple.Tuple{keyCapacity, k.kind}), kv.RangeOptions{})
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
		if lv == nil {
			tr.Clear(own)
			tr.Clear(c.k.fenceKey(k.kind, cp.node))
			return res{version: version, at: at}, nil
		}
		limit, err := decodeLimit(lv)
		if err != nil {
			return res{}, err
		}
		kvs, err := recs.GetSliceWithError()
		if err != nil {
			return res{}, err
		}
		var others int64
		var wants []int64
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
				// Its Runtime stopped renewing a Timeout ago.
				tr.Clear(e.Key)
				tr.Clear(c.k.fenceKey(k.kind, rec.node))
			default:
				others += rec.grant
				wants = append(wants, rec.want)
			}
		}
		g := grantOf(int64(limit), others, wants, running, want)
		v, err := tuple.Tuple{g, want, tuple.IncompleteVersionstamp(0)}.PackWithVersionstamp(nil)
		if err != nil {
			return res{}, err
		}
		tr.SetVersionstampedValue(own, v)
		if !mine {
			// A new lease (or one taken back): its accepts' fence.
			tr.Set(c.k.fenceKey(k.kind, cp.node), nil)
		}
		return res{grant: g, limit: int64(limit), version: version, at: at}, nil
	})
	if err != nil {
		return 0, 0, false, err
	}
	cp.samples = append(cp.samples, versionSample{at: r.at, version: r.version})
	return r.grant, r.limit, r.grant == want && want < int64(k.slots.size()), nil
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
