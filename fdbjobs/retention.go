package fdbjobs

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Retention of finished runtime jobs (WorkerOptions.Retain…): how long a
// job that ended with each outcome is kept before its Runtime's sweeper
// removes it. River's periods.
const (
	// RetainCompletedDefault keeps completed jobs a day.
	RetainCompletedDefault = 24 * time.Hour
	// RetainCancelledDefault keeps cancelled jobs a day.
	RetainCancelledDefault = 24 * time.Hour
	// RetainDiscardedDefault keeps discarded jobs a week: their errors are
	// what an operator reads.
	RetainDiscardedDefault = 7 * 24 * time.Hour
	// RetainForever, as a Retain… option, never removes such jobs.
	RetainForever time.Duration = -1
	// SweepPeriodDefault is how often each Runtime's sweeper looks for
	// jobs past their retention (RuntimeOptions.SweepPeriod), at a random
	// moment within each period, so that nodes seldom sweep at once (when
	// they do, one of their transactions retries).
	SweepPeriodDefault = time.Minute
	// sweepPage is the most jobs one sweep transaction removes, and
	// sweepChunk how many rows it reads at once: a transaction stops
	// reading once it read kv.PageBytes, so that with a chunk of the
	// largest rows (MaxDataSize) it stays within the store's budget.
	sweepPage  = 200
	sweepChunk = (kv.BudgetBytesDefault-kv.PageBytes)/kv.MaxValueSize - 1 // 5, a row of room for the rest
)

// retention is a kind's retention by outcome (negative: forever).
type retention map[string]time.Duration

// retainKey is the key of a retention entry: (13, Type, Outcome, At, ID).
// An entry marks jobs of typ that finished with outcome at or before At
// (Unix ms): the job ID alone when its value is empty (Cancel's, and a
// Manual kind's RetainTx), or, when its value is not, the jobs its value
// lists (a tuple of job ids, ID first), which the completer finished in
// one transaction (one entry for many ends: a key per job was a third of
// a finished job's writes). The sweeper walks each outcome's entries in
// time order, and removes a job only when its row still says it finished
// with that outcome at or before At: a job that ran again since finished
// after At, and its entry's mark is cleared alone.
func (k keys) retainKey(typ, outcome string, at int64, id string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyRetain, typ, outcome, at, id})
}

func (k keys) retainRange(typ, outcome string, before int64) kv.KeyRange {
	return kv.KeyRange{Begin: k.root.Pack(tuple.Tuple{keyRetain, typ, outcome}),
		End: k.root.Pack(tuple.Tuple{keyRetain, typ, outcome, before})}
}

// retainSet marks one job finished as its envelope e says.
func (k keys) retainSet(tr kv.Transaction, typ, id string, e *envelope) {
	if e.Outcome != "" && e.FinishedAt != 0 {
		tr.Set(k.retainKey(typ, e.Outcome, e.FinishedAt, id), nil)
	}
}

// retainEntryBytes bounds the job ids of one retention entry.
const retainEntryBytes = 8_000

// retainAll marks ids, jobs of typ finished with outcome at or before
// at, in as few entries as retainEntryBytes allows.
func (k keys) retainAll(tr kv.Transaction, typ, outcome string, at int64, ids []string) {
	for len(ids) > 0 {
		n, size := 1, len(ids[0])
		for n < len(ids) && size+len(ids[n]) <= retainEntryBytes {
			size += len(ids[n])
			n++
		}
		var v []byte
		if n > 1 {
			t := make(tuple.Tuple, n)
			for i, id := range ids[:n] {
				t[i] = id
			}
			v = t.Pack()
		}
		tr.Set(k.retainKey(typ, outcome, at, ids[0]), v)
		ids = ids[n:]
	}
}

// retainEntry is a decoded retention entry: its time and the jobs it marks.
type retainEntry struct {
	key kv.Key
	at  int64
	id  string // the key's
	ids []string
}

// decodeRetain decodes the retention entry e.
func (k keys) decodeRetain(e kv.KeyValue) (retainEntry, error) {
	t, err := k.root.Unpack(e.Key)
	if err != nil || len(t) != 5 {
		return retainEntry{}, fmt.Errorf("fdbjobs: bad retention key %s", e.Key)
	}
	at, ok1 := intElem(t[3])
	id, ok2 := t[4].(string)
	if !ok1 || !ok2 {
		return retainEntry{}, fmt.Errorf("fdbjobs: bad retention key %s", e.Key)
	}
	en := retainEntry{key: e.Key, at: at, id: id, ids: []string{id}}
	if len(e.Value) == 0 {
		return en, nil
	}
	v, err := tuple.Unpack(e.Value)
	if err != nil || len(v) == 0 {
		return retainEntry{}, fmt.Errorf("fdbjobs: bad retention entry %s", e.Key)
	}
	en.ids = make([]string, len(v))
	for i, el := range v {
		if en.ids[i], ok1 = el.(string); !ok1 {
			return retainEntry{}, fmt.Errorf("fdbjobs: bad retention entry %s", e.Key)
		}
	}
	return en, nil
}

// retainRest writes entry en again with the jobs ids (the rest of a page's).
func (k keys) retainRest(tr kv.Transaction, en retainEntry, ids []string) {
	t := make(tuple.Tuple, len(ids))
	for i, id := range ids {
		t[i] = id
	}
	tr.Set(en.key, t.Pack())
}

// outcomeManual is the outcome under which a Manual kind's retention
// entries are kept (RetainTx): the layer knows no outcome of its jobs.
const outcomeManual = "manual"

// RemovedJob is a job the Runtime's sweeper removes past its retention,
// as WorkerOptions.OnRemove sees it.
type RemovedJob struct {
	ID string
	// Data are the job's data as Job.Data has them: a Manual kind's data,
	// or the arguments of a Runtime's kind.
	Data json.RawMessage
}

// RetainTx marks job id of typ, a Manual kind's, in tr, as finished at
// finished: the sweeper of a Runtime that works typ removes it once it is
// WorkerOptions.RetainFinished older, if its row is then finished (a job
// that was pending or running again, or is gone, leaves only its mark).
// Its worker calls it in the transaction that finishes the job, and
// UnretainTx, with the same time, in the one that changes it next, so
// that each finish has its mark: a job finished again at a later time
// whose earlier mark stayed would go at the earlier mark's time.
// Idempotent; a job of a Runtime's kind has its retention by outcome
// (WorkerOptions.RetainCompleted…) and needs neither.
func (c *Client) RetainTx(tr kv.Transaction, typ, id string, finished time.Time) {
	tr.Set(c.k.retainKey(typ, outcomeManual, finished.UnixMilli(), id), nil)
}

// UnretainTx clears, in tr, the mark RetainTx made with finished.
func (c *Client) UnretainTx(tr kv.Transaction, typ, id string, finished time.Time) {
	tr.Clear(c.k.retainKey(typ, outcomeManual, finished.UnixMilli(), id))
}

// SetRetainFinished makes d the RetainFinished of kind, a Manual kind of
// the Runtime, from its next sweep. A kind the Runtime does not work, one
// not Manual, or d neither positive nor RetainForever, is
// ErrInvalidArgument.
func (r *Runtime) SetRetainFinished(kind string, d time.Duration) error {
	if d <= 0 && d != RetainForever {
		return fmt.Errorf("%w: SetRetainFinished(%q, %v): positive or RetainForever", ErrInvalidArgument, kind, d)
	}
	for _, k := range r.kinds {
		if k.kind == kind && k.opts.Manual {
			k.retainFinished.Store(int64(d))
			return nil
		}
	}
	return fmt.Errorf("%w: SetRetainFinished(%q): no Manual worker of this kind on the Runtime", ErrInvalidArgument, kind)
}

// Sweep removes, now, the jobs of the Runtime's kinds past their retention
// (WorkerOptions.Retain…), in pages of a transaction each, and returns how
// many it removed. Each Runtime does so by itself every SweepPeriod.
func (r *Runtime) Sweep(ctx context.Context) (int, error) {
	total := 0
	for _, k := range r.kinds {
		n, err := r.sweep(ctx, k)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// sweep removes k's jobs past their retention, and the events of its feed
// past the feed's keep (PruneFeed), in pages, until none is left or ctx
// ends; it returns how many marks it cleared.
func (r *Runtime) sweep(ctx context.Context, k *kindWorker) (int, error) {
	now := r.c.cfg.Clock.Now()
	if _, err := r.c.PruneFeed(ctx, k.kind, now); err != nil {
		return 0, err
	}
	if k.opts.Manual {
		keep := time.Duration(k.retainFinished.Load())
		if keep < 0 {
			return 0, nil
		}
		return r.c.SweepRetained(ctx, k.kind, now.Add(-keep), Sweep{FinishedAt: k.opts.FinishedAt, OnRemove: k.opts.OnRemove})
	}
	removed := 0
	for outcome, keep := range k.retain {
		if keep < 0 {
			continue
		}
		n, err := r.c.sweepOutcome(ctx, k.kind, outcome, now.Add(-keep).UnixMilli(), Sweep{OnRemove: k.opts.OnRemove})
		removed += n
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// Sweep is what one sweep of a kind's jobs calls: WorkerOptions'
// FinishedAt and OnRemove (either may be nil).
type Sweep struct {
	FinishedAt func(data json.RawMessage) (time.Time, bool)
	OnRemove   func(ctx context.Context, tr kv.Transaction, jobs []RemovedJob) error
}

// SweepRetained removes, now, the jobs of typ (a Manual kind's) that
// RetainTx marked finished at or before before, in pages of a transaction
// each (shrunk while transactions fail, and bounded by kv.PageBytes of
// rows read), with the kind's hooks in each as a Runtime's sweeper calls
// them, and returns how many marks it cleared (in transactions that said
// they committed: one that committed with commit_unknown_result, which its
// retry finds done, is not counted). A Runtime that works typ
// does so every SweepPeriod with its RetainFinished; this is for a caller
// that sweeps at times of its own.
func (c *Client) SweepRetained(ctx context.Context, typ string, before time.Time, hooks Sweep) (int, error) {
	if err := checkName("type", typ); err != nil {
		return 0, err
	}
	return c.sweepOutcome(ctx, typ, outcomeManual, before.UnixMilli(), hooks)
}

// sweepOutcome removes the jobs of typ whose retention entries of outcome
// are at or before before (Unix ms), a page per transaction, until none is
// left or ctx ends; it returns how many marks (jobs of entries) it
// cleared. A mark is checked against its job, and one left behind by an
// earlier finish (its job ended again since, or runs again) is cleared
// alone: a Runtime's kind's against the envelope's outcome and finish
// time (at or before the entry's), a Manual kind's against the row's
// state and, with hooks.FinishedAt, the finish time its data say.
func (c *Client) sweepOutcome(ctx context.Context, typ, outcome string, before int64, hooks Sweep) (int, error) {
	removed := 0
	size := &kv.Batch{Max: sweepPage}
	for {
		n, err := kv.TransactBatch(ctx, c.db, size, func(tr kv.Transaction, page int) (sweptPage, error) {
			return c.sweepOne(ctx, tr, typ, outcome, before, page, hooks)
		})
		if err != nil {
			return removed, err
		}
		removed += n.cleared
		if !n.more {
			return removed, nil
		}
	}
}

// sweepOne is one transaction of sweepOutcome: the jobs of up to limit
// marks, fewer once the rows read reach kv.PageBytes; more says whether
// marks are left. An entry whose marks were all looked at is cleared, one
// looked at in part is written again with the rest.
func (c *Client) sweepOne(ctx context.Context, tr kv.Transaction, typ, outcome string, before int64, limit int, hooks Sweep) (sweptPage, error) {
	kvs, err := tr.GetRange(c.k.retainRange(typ, outcome, before+1), kv.RangeOptions{Limit: limit}).GetSliceWithError()
	if err != nil {
		return sweptPage{}, err
	}
	// The marks, in entry order, up to limit.
	type mark struct {
		entry int
		id    string
	}
	entries := make([]retainEntry, len(kvs))
	var marks []mark
	for i, e := range kvs {
		en, err := c.k.decodeRetain(e)
		if err != nil {
			c.cfg.Logger.Warn().Err(err).Msg("fdbjobs: sweep: clearing a retention entry it cannot read")
			en = retainEntry{key: e.Key}
		}
		entries[i] = en
		for _, id := range en.ids {
			if len(marks) < limit {
				marks = append(marks, mark{i, id})
			}
		}
	}
	var gone []RemovedJob
	var goneRows []*row
	read, examined := 0, 0
	// The rows are read a chunk at a time, so that the page stops once
	// they reach kv.PageBytes (a kind's data may be large).
	for examined < len(marks) && read < kv.PageBytes {
		chunk := marks[examined:min(len(marks), examined+sweepChunk)]
		rows := make([]kv.FutureByteSlice, len(chunk))
		for i, m := range chunk {
			rows[i] = tr.Get(c.k.dataKey(typ, m.id))
		}
		examined += len(chunk)
		for i, m := range chunk {
			v, err := rows[i].Get()
			if err != nil {
				return sweptPage{}, err
			}
			read += len(v)
			if v == nil {
				continue
			}
			row, err := decodeRow(v)
			if err != nil || row.state != Finished {
				continue
			}
			at := entries[m.entry].at
			data := json.RawMessage(row.data)
			if outcome != outcomeManual {
				var e envelope
				if json.Unmarshal(row.data, &e) != nil || e.Outcome != outcome || e.FinishedAt == 0 || e.FinishedAt > at {
					continue // the job ended again since: its own entry marks it
				}
				data = e.Args
			} else if hooks.FinishedAt != nil {
				if fin, ok := hooks.FinishedAt(data); !ok || fin.UnixMilli() != at {
					continue // an earlier finish's mark
				}
			}
			gone, goneRows = append(gone, RemovedJob{ID: m.id, Data: data}), append(goneRows, row)
		}
	}
	if len(gone) > 0 && hooks.OnRemove != nil {
		if err := hooks.OnRemove(ctx, tr, gone); err != nil {
			return sweptPage{}, err
		}
	}
	for i, j := range gone {
		c.k.clearRow(tr, typ, j.ID, goneRows[i])
	}
	// Each entry: cleared when all its marks were looked at, written again
	// with the rest when some were.
	looked := make([]int, len(entries))
	for _, m := range marks[:examined] {
		looked[m.entry]++
	}
	more := len(kvs) == limit
	for i, en := range entries {
		switch {
		case looked[i] == len(en.ids):
			tr.Clear(en.key)
		case looked[i] > 0:
			c.k.retainRest(tr, en, en.ids[looked[i]:])
			more = true
		default:
			more = true
		}
	}
	return sweptPage{cleared: examined, more: more}, nil
}

// sweptPage is what one page of a sweep did.
type sweptPage struct {
	cleared int
	more    bool
}

// sweeper runs k's sweeps every SweepPeriod, at a random moment of each.
func (r *Runtime) sweeper(ctx context.Context, k *kindWorker) {
	clock := r.c.cfg.Clock
	for {
		wait := time.Duration(rand.Int64N(int64(r.opts.SweepPeriod))) + r.opts.SweepPeriod/2
		select {
		case <-clock.After(wait):
		case <-ctx.Done():
			return
		}
		if _, err := r.sweep(ctx, k); err != nil && ctx.Err() == nil {
			r.c.cfg.Logger.Warn().Err(err).Str("kind", k.kind).Msg("fdbjobs: runtime: removing jobs past their retention")
		}
	}
}
