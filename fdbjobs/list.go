package fdbjobs

// Listing a kind's jobs by state, a page per transaction.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// States of a pending runtime job as List tells them apart, by its
// scheduled time and attempts: StatePending lists all three.
const (
	// StateAvailable: pending and due.
	StateAvailable = "available"
	// StateScheduled: pending, due later, no attempt yet.
	StateScheduled = "scheduled"
	// StateRetrying: pending, due later, after a failed attempt.
	StateRetrying = "retrying"
)

// List's bounds.
const (
	// ListLimitMax bounds ListParams.Limit.
	ListLimitMax = 1000
	// listScanKeys is about the most index keys one page reads: a type
	// with many shards reads fewer from each.
	listScanKeys = 10_000
	// listPageBytes is about the most job data one page reads.
	listPageBytes = kv.PageBytes
)

// ListParams say which jobs List returns.
type ListParams struct {
	// Kind is the jobs' kind (type).
	Kind string
	// State is one of StateAvailable, StateScheduled, StateRetrying,
	// StatePending (the three), StateRunning, OutcomeCompleted,
	// OutcomeCancelled, OutcomeDiscarded.
	State string
	// After is the Next of the page before ("" for the first).
	After string
	// Limit is the most jobs of the page: 1 to ListLimitMax.
	Limit int
}

// ListPage is one page of List.
type ListPage struct {
	Jobs []JobRow
	// Next is the cursor of the next page (ListParams.After), "" after the
	// last. A page may hold fewer than Limit jobs and still have a Next.
	Next string
}

// JobRow is a job as List and the work middleware show it.
type JobRow struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// State is one of List's states (ListParams.State), StatePending
	// aside.
	State string `json:"state"`
	// Attempt counts the job's attempts: those that ended and, while it
	// runs, the running one (Work.Attempt). An attempt whose node died is
	// not counted.
	Attempt int `json:"attempt"`
	// MaxAttempts is the job's own (InsertOptions.MaxAttempts), 0 when it
	// has its worker's (WorkerOptions.MaxAttempts).
	MaxAttempts int `json:"max_attempts"`
	// Errors are its last attempts' errors, oldest first.
	Errors []AttemptError `json:"errors,omitempty"`
	// ScheduledAt is when it is (or was last) due.
	ScheduledAt time.Time `json:"scheduled_at"`
	// Priority is its priority (InsertOptions.Priority).
	Priority int `json:"priority"`
	// Partition is its partition (InsertOptions.Partition).
	Partition string `json:"partition,omitempty"`
	// FinishedAt is when it got its outcome; zero unless finished by a
	// Runtime or Cancel.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Args are its arguments' JSON; for a job of the lower-level API
	// (Add), its data.
	Args json.RawMessage `json:"args"`
}

// List returns a page of the jobs of p.Kind in p.State, read at tx's
// snapshot (nil for a transaction of its own; no conflict with what other
// transactions write), and the cursor of the next page: a walk that goes
// on across transactions and processes, never reading every job. Each
// state is read from the index that holds it, so that a page reads about
// Limit jobs and a bounded number of index keys (listScanKeys, and
// listPageBytes of jobs); the pending and running states read one range
// per shard of the kind, so a page of a kind with thousands of shards
// (SetTypeShards) makes that many reads:
//   - available, scheduled, retrying and pending: the pending queue's
//     shards, merged in scheduled-time order (then id). Scheduled and
//     retrying jobs are told apart by reading them, so their pages may be
//     short when the other kind is many.
//   - running: the leases, merged in the order of the jobs' last renewal
//     (Accept or heartbeat), oldest first. A job renewed while the pages
//     are read moves behind the cursor and may be listed again.
//   - completed, cancelled and discarded: the RETAIN index, in finishing
//     order, oldest first (jobs a completer finished in one transaction
//     together, in its order). It holds the jobs a Runtime or Cancel
//     finished: finished jobs of the lower-level API (Finish, AddFinished)
//     are counted (Counts) but not listed.
//
// Each page reads its own snapshot: a job that moves between pages may be
// missed or seen twice. Bad parameters (an unknown state, a Limit out of
// bounds, a cursor that is not this kind's and state's) are
// ErrInvalidArgument.
func (c *Client) List(ctx context.Context, tx kv.ReadTransactor, p ListParams) (ListPage, error) {
	if err := checkName("kind", p.Kind); err != nil {
		return ListPage{}, err
	}
	if p.Limit < 1 || p.Limit > ListLimitMax {
		return ListPage{}, fmt.Errorf("%w: List limit %d outside [1, %d]", ErrInvalidArgument, p.Limit, ListLimitMax)
	}
	switch p.State {
	case StateAvailable, StateScheduled, StateRetrying, StatePending, StateRunning, OutcomeCompleted, OutcomeCancelled, OutcomeDiscarded:
	default:
		return ListPage{}, fmt.Errorf("%w: List state %q: one of %s, %s, %s, %s, %s, %s, %s, %s", ErrInvalidArgument, p.State,
			StateAvailable, StateScheduled, StateRetrying, StatePending, StateRunning, OutcomeCompleted, OutcomeCancelled, OutcomeDiscarded)
	}
	after, err := decodeCursor(p)
	if err != nil {
		return ListPage{}, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (ListPage, error) {
		snap, now := tr.Snapshot(), c.cfg.now()
		var cands []listCand
		var more bool
		var err error
		switch p.State {
		case StateRunning:
			cands, more, err = c.runningCands(snap, p, after)
		case OutcomeCompleted, OutcomeCancelled, OutcomeDiscarded:
			cands, more, err = c.finishedCands(snap, p, after)
		default:
			cands, more, err = c.pendingCands(snap, p, after, now)
		}
		if err != nil {
			return ListPage{}, err
		}
		jobs, examined, err := c.listRows(snap, p, cands, now)
		if err != nil {
			return ListPage{}, err
		}
		page := ListPage{Jobs: jobs}
		if len(cands) > 0 && (examined < len(cands) || more) {
			page.Next = encodeCursor(p, cands[examined-1].pos)
		}
		return page, nil
	})
}

// listCand is a job an index lists: the row it must find for the job to
// be listed, and the cursor's place once it has been looked at.
type listCand struct {
	id  string
	pos tuple.Tuple
	// want says whether the job's row (and envelope, nil for a job of
	// the lower-level API) is the one the index entry names.
	want func(r *row, e *envelope) bool
}

// listRows reads the rows of cands in order, about Limit at a time, until
// the page has Limit jobs or listPageBytes of data, and returns the jobs
// and how many candidates it looked at (at least one when there are any).
func (c *Client) listRows(snap kv.ReadTransaction, p ListParams, cands []listCand, now int64) ([]JobRow, int, error) {
	var jobs []JobRow
	examined, size := 0, 0
	for examined < len(cands) && len(jobs) < p.Limit && size < listPageBytes {
		chunk := cands[examined:min(len(cands), examined+p.Limit-len(jobs))]
		futs := make([]kv.FutureByteSlice, len(chunk))
		for i, cd := range chunk {
			futs[i] = snap.Get(c.k.dataKey(p.Kind, cd.id))
		}
		for i, cd := range chunk {
			v, err := futs[i].Get()
			if err != nil {
				return nil, 0, err
			}
			examined++
			size += len(v)
			if v == nil {
				continue // removed since its index entry was written
			}
			r, err := decodeRow(v)
			if err != nil {
				return nil, 0, err
			}
			e, _ := decodeEnvelope(r.data)
			if !cd.want(r, e) {
				continue
			}
			jobs = append(jobs, c.jobRow(p.Kind, cd.id, r, e, now))
			if size >= listPageBytes {
				break
			}
		}
	}
	return jobs, examined, nil
}

// GetJob returns job id of kind as List shows it, or ErrNotFound.
func (c *Client) GetJob(ctx context.Context, tx kv.ReadTransactor, kind, id string) (JobRow, error) {
	if err := checkName("kind", kind); err != nil {
		return JobRow{}, err
	}
	if err := checkName("job id", id); err != nil {
		return JobRow{}, err
	}
	r, err := c.readJob(ctx, tx, kind, id)
	if err != nil {
		return JobRow{}, err
	}
	e, _ := decodeEnvelope(r.data)
	return c.jobRow(kind, id, r, e, c.cfg.now()), nil
}

// jobRow is the JobRow of job id's row r with envelope e (nil: a job of
// the lower-level API), at scheduled time now.
func (c *Client) jobRow(kind, id string, r *row, e *envelope, now int64) JobRow {
	j := JobRow{ID: id, Kind: kind, State: countState(r.state, r.data), ScheduledAt: c.cfg.timeOf(r.stime), Priority: shardPriority(r.shard), Args: r.data}
	if e != nil {
		j.Attempt, j.MaxAttempts, j.Errors, j.Args, j.Partition = e.Attempt, e.MaxAttempts, e.Errors, e.Args, e.Partition
		if e.FinishedAt != 0 {
			j.FinishedAt = time.UnixMilli(e.FinishedAt)
		}
	}
	switch {
	case r.state == Running:
		j.Attempt++
	case r.state != Pending:
	case r.stime <= now:
		j.State = StateAvailable
	case j.Attempt > 0:
		j.State = StateRetrying
	default:
		j.State = StateScheduled
	}
	return j
}

// timeOf is scheduled time stime as a time.
func (c Config) timeOf(stime int64) time.Time {
	u := int64(c.TimeUnit)
	if per := int64(time.Second) / u; per > 0 && int64(time.Second)%u == 0 {
		return time.Unix(stime/per, stime%per*u)
	}
	return time.Unix(0, stime*u)
}

// shardCands reads, as a snapshot, up to n keys from each of ranges (one
// per shard of ss, whose keys are (Type, Shard, A, B)) and merges them in
// (A, B) order: the keys up to the first place where a shard's read
// stopped (beyond it, that shard may have keys the page did not read).
// more says whether a shard has more.
func shardCands(snap kv.ReadTransaction, ss subspace.Subspace, what string, ranges []kv.KeyRange, n int) (keys []kv.KeyValue, more bool, err error) {
	sortKey := func(k kv.Key) ([]byte, error) {
		t, err := ss.Unpack(k)
		if err != nil || len(t) != 4 {
			return nil, fmt.Errorf("fdbjobs: bad %s %s", what, k)
		}
		return t[2:].Pack(), nil
	}
	futs := make([]kv.RangeResult, len(ranges))
	for i, r := range ranges {
		futs[i] = snap.GetRange(r, kv.RangeOptions{Limit: n})
	}
	type entry struct {
		sort []byte
		kv   kv.KeyValue
	}
	var all []entry
	var bound []byte
	for _, f := range futs {
		kvs, err := f.GetSliceWithError()
		if err != nil {
			return nil, false, err
		}
		for _, e := range kvs {
			s, err := sortKey(e.Key)
			if err != nil {
				return nil, false, err
			}
			all = append(all, entry{s, e})
		}
		if len(kvs) == n {
			more = true
			if last := all[len(all)-1].sort; bound == nil || bytes.Compare(last, bound) < 0 {
				bound = last
			}
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return bytes.Compare(a.sort, b.sort) })
	for _, e := range all {
		if bound != nil && bytes.Compare(e.sort, bound) > 0 {
			break
		}
		keys = append(keys, e.kv)
	}
	return keys, more, nil
}

// perShard is how many keys a page reads from each of high shards.
func perShard(limit int, high int64) int {
	return max(1, min(limit, listScanKeys/int(high)))
}

// queueShards are the shards of typ's pending keys: every lane (one per
// priority its jobs have had) of every shard it has had.
func (c *Client) queueShards(snap kv.ReadTransaction, typ string) ([]int64, error) {
	lf := snap.Get(c.k.lanesKey(typ))
	high, err := c.shardsHigh(snap, typ)
	if err != nil {
		return nil, err
	}
	lv, err := lf.Get()
	if err != nil {
		return nil, err
	}
	return decodeLanes(lv).all(high), nil
}

// shardsHigh is the most shards typ has had (every one may hold jobs).
func (c *Client) shardsHigh(snap kv.ReadTransaction, typ string) (int64, error) {
	v, err := snap.Get(c.k.shardsKey(typ)).Get()
	if err != nil {
		return 0, err
	}
	_, high, err := decodeShards(v)
	return high, err
}

// pendingCands are the pending jobs of p's state after the cursor
// (stime, id), from the pending keys of every shard.
func (c *Client) pendingCands(snap kv.ReadTransaction, p ListParams, after tuple.Tuple, now int64) ([]listCand, bool, error) {
	qs, err := c.queueShards(snap, p.Kind)
	if err != nil {
		return nil, false, err
	}
	ranges := make([]kv.KeyRange, len(qs))
	for i, s := range qs {
		r := prefixRange(c.k.pending, tuple.Tuple{p.Kind, s})
		switch p.State {
		case StateAvailable:
			r.End = c.k.pending.Pack(tuple.Tuple{p.Kind, s, now + 1})
		case StateScheduled, StateRetrying:
			r.Begin = c.k.pending.Pack(tuple.Tuple{p.Kind, s, now + 1})
		}
		if after != nil {
			if b := kv.KeyAfter(c.k.pending.Pack(append(tuple.Tuple{p.Kind, s}, after...))); bytes.Compare(b, r.Begin.FDBKey()) > 0 {
				r.Begin = b
			}
		}
		ranges[i] = r
	}
	keys, more, err := shardCands(snap, c.k.pending, "pending key", ranges, perShard(p.Limit, int64(len(qs))))
	if err != nil {
		return nil, false, err
	}
	cands := make([]listCand, len(keys))
	for i, e := range keys {
		t, _ := c.k.pending.Unpack(e.Key)
		stime, _ := intElem(t[2])
		id, _ := t[3].(string)
		cands[i] = listCand{id: id, pos: tuple.Tuple{stime, id}, want: func(r *row, e *envelope) bool {
			if r.state != Pending || r.stime != stime {
				return false
			}
			retrying := e != nil && e.Attempt > 0
			return p.State != StateScheduled && p.State != StateRetrying || retrying == (p.State == StateRetrying)
		}}
	}
	return cands, more, nil
}

// runningCands are the running jobs after the cursor, from the leases of
// every shard: each job is listed by the lease its row's seq names. The
// cursor is (versionstamp, token, next): the lease to go on from, and the
// place in it of the next entry, or -1 to go on after it.
func (c *Client) runningCands(snap kv.ReadTransaction, p ListParams, after tuple.Tuple) ([]listCand, bool, error) {
	high, err := c.shardsHigh(snap, p.Kind)
	if err != nil {
		return nil, false, err
	}
	var afterLease []byte // (vs, token) packed: its entries before next were listed
	next := int64(-1)
	if after != nil {
		afterLease = after[:2].Pack()
		next, _ = intElem(after[2])
	}
	ranges := make([]kv.KeyRange, high)
	for s := range high {
		r := prefixRange(c.k.leases, tuple.Tuple{p.Kind, s})
		if after != nil {
			r.Begin = c.k.leases.Pack(append(tuple.Tuple{p.Kind, s}, after[:2]...))
			if next < 0 {
				r.Begin = kv.KeyAfter(r.Begin.FDBKey())
			}
		}
		ranges[s] = r
	}
	keys, more, err := shardCands(snap, c.k.leases, "lease key", ranges, perShard(p.Limit, high))
	if err != nil {
		return nil, false, err
	}
	var cands []listCand
	for _, e := range keys {
		vs, token, entries, err := c.k.decodeLease(e.Key, e.Value)
		if err != nil {
			return nil, false, err
		}
		first := 0
		if afterLease != nil && bytes.Equal(tuple.Tuple{vs, token}.Pack(), afterLease) {
			first = int(max(next, 0))
		}
		for i := first; i < len(entries); i++ {
			en := entries[i]
			pos := tuple.Tuple{vs, token, int64(i + 1)}
			if i == len(entries)-1 {
				pos[2] = int64(-1)
			}
			l := lock{token: token, index: en.index}
			cands = append(cands, listCand{id: en.id, pos: pos, want: func(r *row, _ *envelope) bool {
				return r.state == Running && r.seq == vs && r.lock.equal(l)
			}})
		}
	}
	return cands, more, nil
}

// finishedCands are the jobs finished with p.State after the cursor, from
// the RETAIN index: its entries in time order, and each entry's jobs in
// the order it lists them. The cursor is (at, id, next): the entry to go
// on from, and the place in it of the next job, or -1 to go on after it.
func (c *Client) finishedCands(snap kv.ReadTransaction, p ListParams, after tuple.Tuple) ([]listCand, bool, error) {
	r := prefixRange(c.k.root, tuple.Tuple{keyRetain, p.Kind, p.State})
	next := int64(-1)
	if after != nil {
		r.Begin = c.k.root.Pack(append(tuple.Tuple{keyRetain, p.Kind, p.State}, after[:2]...))
		if next, _ = intElem(after[2]); next < 0 {
			r.Begin = kv.KeyAfter(r.Begin.FDBKey())
		}
	}
	kvs, err := snap.GetRange(r, kv.RangeOptions{Limit: p.Limit}).GetSliceWithError()
	if err != nil {
		return nil, false, err
	}
	var cands []listCand
	for n, e := range kvs {
		en, err := c.k.decodeRetain(e)
		if err != nil {
			return nil, false, err
		}
		first := 0
		if n == 0 && next > 0 && bytes.Equal(e.Key, r.Begin.FDBKey()) {
			first = int(next)
		}
		at := en.at
		for i := first; i < len(en.ids); i++ {
			pos := tuple.Tuple{at, en.id, int64(i + 1)}
			if i == len(en.ids)-1 {
				pos[2] = int64(-1)
			}
			cands = append(cands, listCand{id: en.ids[i], pos: pos, want: func(r *row, e *envelope) bool {
				return r.state == Finished && e != nil && e.Outcome == p.State && e.FinishedAt != 0 && e.FinishedAt <= at
			}})
		}
	}
	return cands, len(kvs) == p.Limit, nil
}

// A cursor is (cursorVersion, kind, state, place...) packed, in base64url.
const cursorVersion = 1

func encodeCursor(p ListParams, pos tuple.Tuple) string {
	return base64.RawURLEncoding.EncodeToString(append(tuple.Tuple{int64(cursorVersion), p.Kind, p.State}, pos...).Pack())
}

// decodeCursor returns the place p.After names (nil for none), checked
// against p's kind and state.
func decodeCursor(p ListParams) (tuple.Tuple, error) {
	if p.After == "" {
		return nil, nil
	}
	bad := fmt.Errorf("%w: List cursor %q: not one of a page of kind %q in state %q", ErrInvalidArgument, p.After, p.Kind, p.State)
	b, err := base64.RawURLEncoding.DecodeString(p.After)
	if err != nil {
		return nil, bad
	}
	t, err := tuple.Unpack(b)
	if err != nil || len(t) < 3 {
		return nil, bad
	}
	if v, _ := intElem(t[0]); v != cursorVersion || t[1] != p.Kind || t[2] != p.State {
		return nil, bad
	}
	pos := t[3:]
	var ok bool
	switch p.State {
	case StateRunning:
		if ok = len(pos) == 3; ok {
			_, ok1 := pos[0].(tuple.Versionstamp)
			_, ok2 := pos[1].([]byte)
			_, ok3 := intElem(pos[2])
			ok = ok1 && ok2 && ok3
		}
	case OutcomeCompleted, OutcomeCancelled, OutcomeDiscarded:
		if ok = len(pos) == 3; ok {
			_, ok1 := intElem(pos[0])
			_, ok2 := pos[1].(string)
			_, ok3 := intElem(pos[2])
			ok = ok1 && ok2 && ok3
		}
	default:
		if ok = len(pos) == 2; ok {
			_, ok1 := intElem(pos[0])
			_, ok2 := pos[1].(string)
			ok = ok1 && ok2
		}
	}
	if !ok {
		return nil, bad
	}
	return pos, nil
}
