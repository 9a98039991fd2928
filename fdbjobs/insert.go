package fdbjobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// InsertOptions tune Insert and InsertMany. The zero value inserts a job
// with a new id, due now, with its worker's MaxAttempts.
type InsertOptions struct {
	// ID is the job's id: empty draws a new one (32 hex digits). A job of
	// the kind with this id is resubmitted, as Add does.
	ID string
	// ScheduledAt is when the job is due: zero is now.
	ScheduledAt time.Time
	// MaxAttempts overrides the worker's WorkerOptions.MaxAttempts for
	// this job: zero keeps the worker's; at least 1 otherwise.
	MaxAttempts int
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
// one when it starts, or call SetTypeTimeout before.
func (c *Client) Insert(ctx context.Context, tx kv.Transactor, args JobArgs, opts InsertOptions) (string, error) {
	ids, err := c.InsertMany(ctx, tx, []InsertJob{{Args: args, Opts: opts}})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// InsertMany is Insert for jobs of one kind (AddBatch's paging and
// bounds; joined to a caller's transaction, one page at most). Jobs
// without an id are written without reading a row first (AddBatch's
// Fresh).
func (c *Client) InsertMany(ctx context.Context, tx kv.Transactor, jobs []InsertJob) ([]string, error) {
	if len(jobs) == 0 || len(jobs) > MaxBatch {
		return nil, fmt.Errorf("%w: batch size %d outside [1, %d]", ErrInvalidArgument, len(jobs), MaxBatch)
	}
	var kind string
	now := c.cfg.Clock.Now()
	batch := make([]NewJob, len(jobs))
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		if j.Args == nil {
			return nil, fmt.Errorf("%w: job %d: nil arguments", ErrInvalidArgument, i)
		}
		k := j.Args.Kind()
		if i == 0 {
			kind = k
		} else if k != kind {
			return nil, fmt.Errorf("%w: job %d: kind %q in a batch of %q", ErrInvalidArgument, i, k, kind)
		}
		if j.Opts.MaxAttempts < 0 {
			return nil, fmt.Errorf("%w: job %d: MaxAttempts %d: at least 1 (0: the worker's)", ErrInvalidArgument, i, j.Opts.MaxAttempts)
		}
		args, err := json.Marshal(j.Args)
		if err != nil {
			return nil, fmt.Errorf("%w: job %d: arguments: %v", ErrInvalidData, i, err)
		}
		data, err := json.Marshal(envelope{Args: args, MaxAttempts: j.Opts.MaxAttempts})
		if err != nil {
			return nil, err
		}
		id, fresh := j.Opts.ID, false
		if id == "" {
			id, fresh = randomHex(), true
		}
		stime := c.cfg.now()
		if at := j.Opts.ScheduledAt; at.After(now) {
			stime = c.cfg.stime(at)
		}
		ids[i] = id
		batch[i] = NewJob{ID: id, Data: data, ScheduledTime: stime, Fresh: fresh}
	}
	if err := c.add(ctx, tx, kind, batch, len(batch) > 1); err != nil {
		return nil, err
	}
	return ids, nil
}

// stime is t as a scheduled time: the TimeUnit it falls in, rounded up,
// so that a job is never due before t.
func (c Config) stime(t time.Time) int64 {
	u := int64(c.TimeUnit)
	n := t.UnixNano()
	return (n + u - 1) / u
}
