package fdbjobs

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// InsertOptions tune Insert and InsertMany. The zero value inserts a job
// with a new id, due now, with its worker's MaxAttempts.
type InsertOptions struct {
	// ID is the job's id: empty draws a new one (32 hex digits, the first
	// 16 its fair place in a kind with fair shares: SetFairShare). A job
	// of the kind with this id is resubmitted, as Add does.
	ID string
	// ScheduledAt is when the job is due: zero is now, and so is a time
	// in the past (a job is not due before it was inserted; the store's
	// Config.TimeUnit rounds it, seconds by default); at most
	// ScheduledAtMax.
	ScheduledAt time.Time
	// MaxAttempts overrides the worker's WorkerOptions.MaxAttempts for
	// this job: zero keeps the worker's; at least 1 otherwise.
	MaxAttempts int
	// Unique makes the insert a no-op when a job of the kind with the same
	// unique key exists in one of Unique.ByState (see UniqueOpts).
	Unique UniqueOpts
	// Priority is the job's priority: PriorityHighest (1, the default;
	// 0 means it) to PriorityLowest (4). Due jobs of a higher priority
	// start first, within the bound of Config.PriorityAging (see
	// PriorityAgingDefault). An insert with the ID of an existing job
	// and Priority 0 keeps that job's priority.
	Priority int
	// Partition is the job's partition key (a tenant, a host; at most
	// PartitionMaxBytes): with the kind's limit per partition
	// (SetPartitionLimit), at most so many jobs of one partition run at
	// once, or start per second, across every node. Empty: none.
	Partition string
}

// UniqueOpts make an insert unique, River's way: the insert checks, in
// its own transaction, for a job of the same kind with the same key (its
// arguments with ByArgs, and the period it is inserted in with ByPeriod)
// that is in one of ByState, and when there is one, inserts nothing and
// returns that job's id (InsertResult.Duplicate). The zero value (neither
// ByArgs nor ByPeriod) is not unique. Each unique insert reads and writes
// one key of its own (the key's index entry): two unique inserts conflict
// only when their keys are the same.
type UniqueOpts struct {
	// ByArgs makes the job's arguments (their JSON) part of the key.
	ByArgs bool
	// ByPeriod makes the period the insert falls in part of the key: a
	// job inserted in a later period is not a duplicate. At least a
	// second when set.
	ByPeriod time.Duration
	// ByState are the states a job must be in to count as a duplicate:
	// UniqueStatesDefault when empty. Running jobs always count.
	ByState []string
}

// Job states for UniqueOpts.ByState: a runtime job is pending (due, or
// waiting for a retry or its scheduled time), running, or finished with an
// outcome (OutcomeCompleted, OutcomeDiscarded, OutcomeCancelled).
const (
	StatePending = "pending"
	StateRunning = "running"
)

// UniqueStatesDefault is River's: a job pending, running or completed is
// a duplicate, one discarded or cancelled is not.
var UniqueStatesDefault = []string{StatePending, StateRunning, OutcomeCompleted}

// InsertResult is what Insert did.
type InsertResult struct {
	// ID is the job's id: the new job's, or the duplicate's.
	ID string
	// Duplicate says that a unique insert found a job with its key and
	// inserted nothing.
	Duplicate bool
}

// InsertJob is one job of InsertMany: its arguments and options.
type InsertJob struct {
	Args JobArgs
	Opts InsertOptions
}

// Insert adds a job for a Runtime's Worker of args' kind, in tx (nil for
// a transaction of its own, or a caller's transaction: the job commits
// with the caller's writes, or not at all), and returns its id. The kind
// must have an activity timeout: a Runtime registering its worker writes
// one when it starts, or call SetTypeTimeout before. With opts.Unique, it
// inserts nothing when a duplicate exists (see UniqueOpts).
func (c *Client) Insert(ctx context.Context, tx kv.Transactor, args JobArgs, opts InsertOptions) (InsertResult, error) {
	if opts.Unique.ByArgs || opts.Unique.ByPeriod != 0 {
		return c.insertUnique(ctx, tx, args, opts)
	}
	ids, err := c.InsertMany(ctx, tx, []InsertJob{{Args: args, Opts: opts}})
	if err != nil {
		return InsertResult{}, err
	}
	return InsertResult{ID: ids[0]}, nil
}

// InsertMany is Insert for jobs of one kind (AddBatch's paging and
// bounds; joined to a caller's transaction, one page at most), and
// returns their ids. Jobs without an id are written without reading a row
// first (AddBatch's Fresh). Unique jobs are Insert's alone
// (ErrInvalidArgument here).
func (c *Client) InsertMany(ctx context.Context, tx kv.Transactor, jobs []InsertJob) ([]string, error) {
	if len(jobs) == 0 || len(jobs) > MaxBatch {
		return nil, fmt.Errorf("%w: batch size %d outside [1, %d]", ErrInvalidArgument, len(jobs), MaxBatch)
	}
	var kind string
	now := c.cfg.Clock.Now()
	batch := make([]NewJob, len(jobs))
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		if j.Opts.Unique.ByArgs || j.Opts.Unique.ByPeriod != 0 {
			return nil, fmt.Errorf("%w: job %d: unique jobs are inserted one by one (Insert)", ErrInvalidArgument, i)
		}
		nj, _, err := c.newJob(j.Args, j.Opts, now)
		if err != nil && len(jobs) > 1 {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		if err != nil {
			return nil, err // Insert's one job
		}
		if k := j.Args.Kind(); i == 0 {
			kind = k
		} else if k != kind {
			return nil, fmt.Errorf("%w: job %d: kind %q in a batch of %q", ErrInvalidArgument, i, k, kind)
		}
		ids[i], batch[i] = nj.ID, nj
	}
	if err := c.add(ctx, tx, kind, batch, len(batch) > 1, c.insertHook(ctx, kind)); err != nil {
		return nil, err
	}
	for i, j := range batch {
		ids[i] = j.ID // a fair kind's drawn ids carry their places
	}
	c.metrics.Load().count(metricInserted, kind, len(ids))
	return ids, nil
}

// stime is t as a scheduled time: the TimeUnit it falls in, rounded up,
// so that a job is never due before t; the last one a time in ns holds
// (ScheduledAtMax) for a later t.
func (c Config) stime(t time.Time) int64 {
	u := int64(c.TimeUnit)
	if t.After(ScheduledAtMax) {
		t = ScheduledAtMax
	}
	n := t.UnixNano()
	q := n / u
	if n%u > 0 {
		q++
	}
	return q
}

// ScheduledAtMax is the latest InsertOptions.ScheduledAt, in 2262 (the
// latest time of a Unix time in nanoseconds); a later retry or snooze waits
// until it.
var ScheduledAtMax = time.Unix(0, math.MaxInt64)

// newJob is the job to add for args and opts, and its arguments' JSON.
func (c *Client) newJob(args JobArgs, opts InsertOptions, now time.Time) (NewJob, []byte, error) {
	if args == nil {
		return NewJob{}, nil, fmt.Errorf("%w: nil arguments", ErrInvalidArgument)
	}
	if opts.MaxAttempts < 0 {
		return NewJob{}, nil, fmt.Errorf("%w: MaxAttempts %d: at least 1 (0: the worker's)", ErrInvalidArgument, opts.MaxAttempts)
	}
	if opts.Priority != 0 {
		if _, err := checkPriority(opts.Priority); err != nil {
			return NewJob{}, nil, err
		}
	}
	if err := checkPartition(opts.Partition); err != nil {
		return NewJob{}, nil, err
	}
	a, err := json.Marshal(args)
	if err != nil {
		return NewJob{}, nil, fmt.Errorf("%w: arguments: %v", ErrInvalidData, err)
	}
	data, err := json.Marshal(envelope{Args: a, MaxAttempts: opts.MaxAttempts, Partition: opts.Partition})
	if err != nil {
		return NewJob{}, nil, err
	}
	id, fresh := opts.ID, false
	if id == "" {
		id, fresh = randomHex(), true
	}
	stime := c.cfg.now()
	if opts.ScheduledAt.After(ScheduledAtMax) {
		return NewJob{}, nil, fmt.Errorf("%w: ScheduledAt %v after %v, the latest it may be", ErrInvalidArgument, opts.ScheduledAt, ScheduledAtMax)
	}
	if at := opts.ScheduledAt; at.After(now) {
		stime = c.cfg.stime(at)
	}
	return NewJob{ID: id, Data: data, ScheduledTime: stime, Fresh: fresh, Priority: opts.Priority, Partition: opts.Partition, drawnID: fresh}, a, nil
}

// insertUnique is Insert with opts.Unique: in one transaction, the key's
// index entry (12, Kind, Key) -> (JobID, Period) is read; a job it names,
// of the same period, in one of ByState, is the duplicate; otherwise the
// job is added and the entry names it. A retry after
// commit_unknown_result finds its own job and reports it inserted.
func (c *Client) insertUnique(ctx context.Context, tx kv.Transactor, args JobArgs, opts InsertOptions) (InsertResult, error) {
	u := opts.Unique
	if u.ByPeriod < 0 || (u.ByPeriod > 0 && u.ByPeriod < time.Second) {
		return InsertResult{}, fmt.Errorf("%w: Unique.ByPeriod %v: at least 1s", ErrInvalidArgument, u.ByPeriod)
	}
	states := u.ByState
	if len(states) == 0 {
		states = UniqueStatesDefault
	}
	want := map[string]bool{StateRunning: true}
	for _, st := range states {
		switch st {
		case StatePending, StateRunning, OutcomeCompleted, OutcomeDiscarded, OutcomeCancelled:
			want[st] = true
		default:
			return InsertResult{}, fmt.Errorf("%w: Unique.ByState %q: one of %s, %s, %s, %s, %s", ErrInvalidArgument, st,
				StatePending, StateRunning, OutcomeCompleted, OutcomeDiscarded, OutcomeCancelled)
		}
	}
	now := c.cfg.Clock.Now()
	nj, a, err := c.newJob(args, opts, now)
	if err != nil {
		return InsertResult{}, err
	}
	kind := args.Kind()
	if err := checkName("kind", kind); err != nil {
		return InsertResult{}, err
	}
	d, err := checkAddArgs(nj.ScheduledTime, nj.Data)
	if err != nil {
		return InsertResult{}, err
	}
	var period int64
	if u.ByPeriod > 0 {
		period = now.UnixNano() / int64(u.ByPeriod)
	}
	h := sha256.New()
	if u.ByArgs {
		h.Write(a)
	}
	key := c.k.uniqueKey(kind, h.Sum(nil))
	token, err := c.addToken(ctx)
	if err != nil {
		return InsertResult{}, err
	}
	nj.Fresh = false // read: an id of the caller's may exist
	res, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (InsertResult, error) {
		v, err := tr.Get(key).Get()
		if err != nil {
			return InsertResult{}, err
		}
		if v != nil {
			t, err := tuple.Unpack(v)
			if err != nil || len(t) != 2 {
				return InsertResult{}, fmt.Errorf("fdbjobs: unique index entry of kind %q: %v", kind, err)
			}
			other, _ := t[0].(string)
			p, _ := t[1].(int64)
			if other == nj.ID {
				return InsertResult{ID: other}, nil // this call's earlier attempt
			}
			if p == period {
				r, err := c.k.readRow(tr, kind, other)
				if err != nil {
					return InsertResult{}, err
				}
				if r != nil && want[uniqueState(r)] {
					return InsertResult{ID: other, Duplicate: true}, nil
				}
			}
		}
		page := []NewJob{nj}
		if _, err := c.addPage(tr, kind, page, [][]byte{d}, token, false, false, c.insertHook(ctx, kind)); err != nil {
			return InsertResult{}, err
		}
		nj = page[0] // a fair kind's drawn id carries its place, from now on

		tr.Set(key, tuple.Tuple{nj.ID, period}.Pack())
		return InsertResult{ID: nj.ID}, nil
	})
	if err == nil && !res.Duplicate {
		c.committed(tx, kind)
		c.metrics.Load().count(metricInserted, kind, 1)
	}
	return res, err
}

// uniqueState is a row's state as UniqueOpts.ByState names it.
func uniqueState(r *row) string { return countState(r.state, r.data) }
