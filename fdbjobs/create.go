package fdbjobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// checkData validates job data; nil or empty data becomes "{}".
func checkData(d json.RawMessage) ([]byte, error) {
	if len(d) == 0 {
		return []byte("{}"), nil
	}
	if len(d) > MaxDataSize {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrDataTooLarge, len(d), MaxDataSize)
	}
	if !json.Valid(d) {
		return nil, ErrInvalidData
	}
	return d, nil
}

// checkOptionalData is checkData for calls where nil means "keep the
// current data".
func checkOptionalData(d json.RawMessage) ([]byte, error) {
	if d == nil {
		return nil, nil
	}
	return checkData(d)
}

// checkAddArgs checks the scheduled time and data of a job to add and
// addToken checks the store's layout and draws the token with which an
// add recognises its own earlier attempt.
func (c *Client) addToken(ctx context.Context) ([]byte, error) {
	if err := c.CheckLayout(ctx); err != nil {
		return nil, err
	}
	return newToken()
}

// checkJob validates a job's type and id, and its data (checkData).
func checkJob(typ, id string, data json.RawMessage) ([]byte, error) {
	if err := checkName("type", typ); err != nil {
		return nil, err
	}
	if err := checkName("job id", id); err != nil {
		return nil, err
	}
	return checkData(data)
}

// returns its data ("{}" for nil).
func checkAddArgs(stime int64, data json.RawMessage) ([]byte, error) {
	if err := checkSTime(stime); err != nil {
		return nil, err
	}
	return checkData(data)
}

// resubmitArgs checks the scheduled time and data (nil keeps the job's)
// of a Resubmit and draws the token that lets it recognise its own earlier
// commit.
func resubmitArgs(stime int64, data json.RawMessage) (d, token []byte, err error) {
	if err := checkSTime(stime); err != nil {
		return nil, nil, err
	}
	if d, err = checkOptionalData(data); err != nil {
		return nil, nil, err
	}
	token, err = newToken()
	return d, token, err
}

func checkSTime(stime int64) error {
	if stime < 0 || stime > MaxScheduledTimeMax {
		return fmt.Errorf("%w: scheduled time %d outside [0, %d]", ErrInvalidArgument, stime, MaxScheduledTimeMax)
	}
	return nil
}

// MaxScheduledTimeMax is the largest scheduled time accepted.
const MaxScheduledTimeMax int64 = 1 << 62

// Add creates job id of type typ with data (nil means "{}"), scheduled at
// stime (by convention seconds since the Unix epoch; any non-negative
// integer works: Accept takes jobs whose scheduled time is at most its
// maximum). The type must have a timeout (ErrNoTypeTimeout).
//
// Adding a job that exists resubmits it, as couch_jobs does:
//   - finished: it is pending again at stime with the new data;
//   - pending at the same stime: nothing is written and the data is not
//     changed;
//   - pending at another stime: it moves to stime and takes the new data;
//   - running: it is flagged to be re-enqueued at stime when its worker
//     finishes it; the data is not changed (the worker's final data is
//     kept).
//
// tx may be nil, a Database or a caller's Transaction: a document write and
// the job it creates can commit atomically.
//
// In its own retry loop (tx nil or a Database), Add is idempotent: a
// retry after commit_unknown_result recognises the row its earlier attempt
// wrote (even if a worker took the job meanwhile) and does not resubmit.
// Joined to a caller's transaction, each call is a new Add: a caller whose
// transaction may run again should add only what it has not added yet (for
// example, check JobState for ErrNotFound in the same transaction).
func (c *Client) Add(ctx context.Context, tx kv.Transactor, typ, id string, data json.RawMessage, stime int64) error {
	return c.add(ctx, tx, typ, []NewJob{{ID: id, Data: data, ScheduledTime: stime}}, false, nil)
}

// AddFinished creates job id of type typ finished, with data (nil means
// "{}"): the record of work done elsewhere, which no worker takes (a
// replication a _replicator document says another server completed). A
// Resubmit, or an Add of the same id, makes it pending as any finished
// job. A job that exists already is ErrInvalidArgument. tx may be nil, a
// Database or a caller's Transaction; run again after
// commit_unknown_result in its own retry loop, it recognises the job its
// earlier attempt wrote.
func (c *Client) AddFinished(ctx context.Context, tx kv.Transactor, typ, id string, data json.RawMessage) error {
	d, err := checkJob(typ, id, data)
	if err != nil {
		return err
	}
	token, err := c.addToken(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (any, error) {
		info := c.readTypeInfo(tr, typ, false)
		r, err := c.k.readRow(tr, typ, id)
		if err != nil {
			return nil, err
		}
		if r != nil {
			if bytes.Equal(r.addToken, token) {
				return nil, nil // this call's earlier attempt committed
			}
			return nil, fmt.Errorf("%w: job %q of type %q exists", ErrInvalidArgument, id, typ)
		}
		ti, err := info()
		if err != nil {
			return nil, err
		}
		c.k.knowFeed(tr, typ, ti)
		c.k.writeRow(tr, typ, id, &row{state: Finished, data: d, addToken: token, shard: shardOf(id, ti.shards)})
		return nil, nil
	})
	return err
}

// NewJob is one job of AddBatch: its id, data (nil means "{}") and
// scheduled time, as the arguments of Add.
type NewJob struct {
	ID            string
	Data          json.RawMessage
	ScheduledTime int64
	// Fresh says that no job of the type has this id, by construction (a
	// UUID drawn for it, say): in AddBatch's own transactions, the first
	// attempt of its page writes the job without reading its row, as
	// River's InsertMany does; an attempt after that reads it as Add does,
	// so the call stays idempotent under commit_unknown_result. A Fresh
	// job whose id does exist replaces that job without the layer knowing:
	// a worker holding it may still end it, over the new job, and Counts
	// goes on counting the job it replaced. Joined to a caller's
	// transaction, rows are always read.
	Fresh bool
	// Priority is the job's priority, PriorityHighest (1, also for 0) to
	// PriorityLowest: among due jobs, acceptors take higher priorities
	// first, within the bound Config.PriorityAging sets (see doc.go,
	// "Priorities"). A job keeps its priority when it is retried or
	// resubmitted; an Add of an existing job with a Priority other than
	// 0 changes it.
	Priority int
	// Partition is the job's partition as its data's envelope names it
	// (InsertOptions.Partition: Insert sets both). Where the kind has a
	// limit per partition (SetPartitionLimit), a new job goes to the queue
	// shard of its partition rather than of its id, so that one node
	// mostly claims the partition's places (claims of one partition from
	// several nodes conflict with each other; from one node they take
	// turns). Without a limit, jobs spread by id, as a partition's jobs
	// in one shard are taken by one acceptor at a time. A job keeps its
	// shard when it is resubmitted, retried or re-enqueued.
	Partition string
	// drawnID: Insert drew ID, which the add may replace by one that
	// carries the job's place in its kind's fair order (fair.go), once;
	// tag is that place (ns; 0: none), for the add's later attempts.
	drawnID bool
	tag     int64
}

// AddBatch is Add for up to MaxBatch jobs of typ (River's InsertMany).
// Each job follows Add's rules (an existing job is resubmitted); a job id
// may appear only once.
//
// In its own transactions (tx nil or a Database), AddBatch pages: each
// transaction adds at most AddPageJobs jobs and about AddPageBytes bytes
// (FoundationDB advises staying well under 1 MB), reads the type's timeout
// once and the page's rows at once, and wakes blocked acceptors once. Jobs
// that already exist with large data cut a page short and make the next
// ones smaller, and so does a page whose reads fail (each attempt after
// such a failure takes half the jobs of the one before, down to 50: a page
// of many reads gets through a cluster whose reads fail now and then, as a
// loaded one's do);
// a page that commits at its first attempt lets the next one be twice as
// large, up to AddPageJobs. One token is drawn per call, so every page is
// idempotent under commit_unknown_result as Add is. The pages commit one by one: after
// an error the jobs of the pages before it are added (adding them again
// follows Add's rules: a job still pending at the same time is left
// alone, one a worker took meanwhile is resubmitted).
//
// Joined to a caller's transaction, the batch must fit one page
// (ErrInvalidArgument otherwise), and each call is a new AddBatch, as for
// Add.
func (c *Client) AddBatch(ctx context.Context, tx kv.Transactor, typ string, jobs []NewJob) error {
	return c.add(ctx, tx, typ, jobs, true, nil)
}

// AddBatch's pages (see AddBatch).
const (
	// AddPageJobs is the most jobs AddBatch adds per transaction.
	AddPageJobs = 500
	// AddPageBytes is about the most bytes an AddBatch transaction reads
	// and writes (a page stops at the job that reaches it).
	AddPageBytes = kv.PageBytes
	// addPageMin is the fewest jobs a page is cut to after failed reads.
	addPageMin = 50
)

// addCost is what adding job j with data d is counted as in a page: its
// data, its keys as mutations and write conflict ranges (the row, the
// pending key) and room for the row's other fields.
func addCost(typ string, j NewJob, d []byte) int {
	return len(d) + 4*(len(typ)+len(j.ID)) + 256
}

// add is Add (batch false: errors name no job) and AddBatch; hook (nil
// for none) runs in each page's transaction with the page's jobs.
func (c *Client) add(ctx context.Context, tx kv.Transactor, typ string, jobs []NewJob, batch bool, hook pageHook) error {
	if err := checkName("type", typ); err != nil {
		return err
	}
	if len(jobs) == 0 || len(jobs) > MaxBatch {
		return fmt.Errorf("%w: batch size %d outside [1, %d]", ErrInvalidArgument, len(jobs), MaxBatch)
	}
	datas := make([][]byte, len(jobs))
	var seen map[string]bool
	if batch {
		seen = make(map[string]bool, len(jobs))
	}
	for i, j := range jobs {
		err := checkName("job id", j.ID)
		if err == nil {
			datas[i], err = checkAddArgs(j.ScheduledTime, j.Data)
		}
		if err == nil && j.Priority != 0 {
			_, err = checkPriority(j.Priority)
		}
		if err == nil {
			err = checkPartition(j.Partition)
		}
		if err == nil && batch {
			if seen[j.ID] {
				err = fmt.Errorf("%w: job appears twice in one batch", ErrInvalidArgument)
			}
			seen[j.ID] = true
		}
		if err != nil {
			if batch {
				return fmt.Errorf("job %d (%q): %w", i, j.ID, err)
			}
			return err
		}
	}
	token, err := c.addToken(ctx)
	if err != nil {
		return err
	}
	if _, joined := tx.(kv.Transaction); joined {
		if n := addPageEnd(typ, jobs, datas, AddPageJobs); n < len(jobs) {
			return fmt.Errorf("%w: %d jobs do not fit one transaction (%d would): pass a nil transactor to page", ErrInvalidArgument, len(jobs), n)
		}
		_, err := kv.Transact(ctx, tx, func(tr kv.Transaction) (int, error) {
			return c.addPage(tr, typ, jobs, datas, token, false, false, hook)
		})
		return err
	}
	size := kv.Batch{Max: AddPageJobs, Min: addPageMin}
	// tried is the end of the jobs any attempt so far took: an attempt
	// reported failed may have committed (commit_unknown_result), and a
	// later page may start among its jobs, so only the jobs beyond it are
	// added blind.
	tried := 0
	for start := 0; start < len(jobs); {
		end := start + addPageEnd(typ, jobs[start:], datas[start:], size.Size())
		attempts := 0
		used, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (int, error) {
			// An attempt after one whose reads failed takes half its jobs,
			// down to addPageMin (see AddBatch): pages get through a
			// cluster whose reads keep failing. Jobs an earlier attempt
			// committed carry the call's token, so taking fewer of them
			// again changes nothing; they are read, never added blind.
			n := min(end-start, size.Size())
			attempts++
			blind := attempts == 1 && start >= tried
			tried = max(tried, start+n)
			used, err := c.addPage(tr, typ, jobs[start:start+n], datas[start:start+n], token, true, blind, hook)
			if err != nil {
				size.Shrink()
			}
			return used, err
		})
		if err != nil {
			if start > 0 {
				return fmt.Errorf("jobs %d and after: %w", start, err)
			}
			return err
		}
		c.committed(tx, typ)
		switch {
		case used < end-start:
			size.Fit(used) // rows larger than planned, or retries: smaller pages
		case attempts == 1:
			size.Grow() // back towards full pages
		}
		start += used
	}
	return nil
}

// addPageEnd returns how many of jobs (with their checked data) make one
// page of AddBatch: at most limit, and as many as fit AddPageBytes (at
// least one).
func addPageEnd(typ string, jobs []NewJob, datas [][]byte, limit int) int {
	n, size := 0, 0
	for n < min(limit, len(jobs)) {
		size += addCost(typ, jobs[n], datas[n])
		if n > 0 && size > AddPageBytes {
			break
		}
		n++
	}
	return n
}

// addPage adds jobs in tr and returns how many it added: all of them, or
// when mayCut, fewer once the rows it read of existing jobs bring the page
// over AddPageBytes (at least one). With blind, it does not read the rows
// of Fresh jobs. hook (nil for none) then sees the jobs it added.
func (c *Client) addPage(tr kv.Transaction, typ string, jobs []NewJob, datas [][]byte, token []byte, mayCut, blind bool, hook pageHook) (int, error) {
	hookTr := tr // the caller's, whose adds it reads back
	tr, flush := coalesceAdds(tr)
	defer flush()
	// The lanes only when a job has a priority (useLane needs them) or a
	// partition (fair shares read the lanes' heads): a default add reads
	// no more than before priorities.
	prioritized := slices.ContainsFunc(jobs, func(j NewJob) bool { return j.Priority != 0 })
	partitioned := slices.ContainsFunc(jobs, func(j NewJob) bool { return j.Partition != "" })
	info := c.readTypeInfo(tr, typ, prioritized || partitioned)
	// The limit per partition only when a job has a partition: with one,
	// a partition's jobs share a shard (NewJob.Partition). A snapshot
	// read: a limit set meanwhile only moves where new jobs go.
	var partLimitFut kv.FutureByteSlice
	if partitioned {
		partLimitFut = tr.Snapshot().Get(c.k.partLimitKey(typ))
	}
	futs := make([]kv.FutureByteSlice, len(jobs))
	for i, j := range jobs {
		if !blind || !j.Fresh {
			futs[i] = tr.Get(c.k.dataKey(typ, j.ID))
		}
	}
	ti, err := info()
	if err != nil {
		return 0, err
	}
	c.k.knowFeed(tr, typ, ti)
	if !ti.hasTimeout {
		return 0, fmt.Errorf("type %q: %w: start a Runtime with a worker of the kind once (it writes the kind's Timeout), or call SetTypeTimeout, before inserting", typ, ErrNoTypeTimeout)
	}
	byPartition := false
	if partLimitFut != nil {
		v, err := partLimitFut.Get()
		if err != nil {
			return 0, err
		}
		if v != nil {
			l, err := decodeLimit(v)
			if err != nil {
				return 0, err
			}
			byPartition = l.Running > 0 || l.PerSecond > 0
		}
	}
	var fair *fairQueue
	if partLimitFut != nil { // a job has a partition: the kind may share fairly
		if fair, err = c.fairShares(tr, typ, jobs, ti); err != nil {
			return 0, err
		}
	}
	enqueued, size, used := false, 0, len(jobs)
	for i, j := range jobs {
		if mayCut && i > 0 && size > AddPageBytes {
			used = i
			break
		}
		size += addCost(typ, j, datas[i])
		var v []byte
		if futs[i] != nil {
			if v, err = futs[i].Get(); err != nil {
				return 0, err
			}
		}
		if j.Priority != 0 {
			c.k.useLane(tr, typ, ti, j.Priority)
			ti.lanes |= 1 << (j.Priority - PriorityHighest)
		}
		if v == nil {
			stime, prio := j.ScheduledTime, cmp.Or(j.Priority, PriorityHighest)
			r := &row{data: datas[i], addToken: token, shard: queueShard(shardOf(shardKey(j, byPartition), ti.shards), prio)}
			if fair != nil {
				var placed bool
				var id string
				if stime, placed, id = fair.place(j, stime); id != "" {
					// Drawn once: a later attempt adds the same job.
					tag, _ := tagOf(id, 0, 1)
					jobs[i].ID, jobs[i].drawnID, jobs[i].tag, j.ID = id, false, tag, id
				}
				if placed {
					r.shard = fairQueueShard(shardOf(shardKey(j, byPartition), ti.shards), prio)
					c.k.useFairLane(tr, typ, ti, prio)
					ti.lanes |= 1 << (fairLanes + prio - PriorityHighest)
				}
			}
			c.k.enqueueIn(tr, typ, j.ID, r, stime)
			enqueued = true
			continue
		}
		size += 2 * len(v) // read, and maybe written again with its data
		r, err := decodeRow(v)
		if err != nil {
			return 0, err
		}
		enqueued = c.resubmitRow(tr, typ, j.ID, r, j.ScheduledTime, j.Priority, datas[i], token) || enqueued
	}
	if enqueued {
		c.k.bumpPending(tr, typ)
	}
	if fair != nil {
		fair.write(tr, c.k)
	}
	if hook != nil {
		if err := hook(hookTr, jobs[:used]); err != nil {
			return 0, err
		}
	}
	return used, nil
}

// pageHook runs in a transaction that adds jobs, with them.
type pageHook func(tr kv.Transaction, jobs []NewJob) error

// resubmitRow applies the resubmit rules to an existing job (see Add).
// data nil keeps the current data, prio 0 the job's priority. token identifies the Add or Resubmit
// call: a row it already changed is left alone, as the call's earlier
// attempt committed (and the job may have moved on since). It reports
// whether it enqueued the job: the caller then wakes the acceptors
// (bumpPending), once per transaction.
func (c *Client) resubmitRow(tr kv.Transaction, typ, id string, r *row, stime int64, prio int, data, token []byte) bool {
	if bytes.Equal(r.addToken, token) {
		return false
	}
	r.addToken = token
	shard := r.shard
	if prio != 0 {
		shard = queueShard(shardBase(r.shard), prio)
	}
	switch r.state {
	case Finished:
		if data != nil {
			r.data = data
		}
		r.shard = shard
		c.k.enqueue(tr, typ, id, r, stime)
		return true
	case Pending:
		if r.stime == stime && r.shard == shard {
			return false
		}
		tr.Clear(c.k.pendingKey(typ, r.shard, r.stime, id))
		if data != nil {
			r.data = data
		}
		r.shard = shard
		c.k.enqueue(tr, typ, id, r, stime)
		return true
	case Running:
		if r.resubmit && r.stime == stime && r.shard == shard {
			return false
		}
		r.resubmit, r.stime, r.shard = true, stime, shard
		c.k.writeRow(tr, typ, id, r)
	}
	return false
}

// Remove deletes a job in any state. A running job's worker gets ErrHalt
// from its next Update or Finish; subscribers get a NotFound event.
// Removing a missing job returns ErrNotFound. Run in its own retry loop
// (tx nil or a Database), a retry after commit_unknown_result reports
// success, not ErrNotFound, and leaves alone a job added again meanwhile.
func (c *Client) Remove(ctx context.Context, tx kv.Transactor, typ, id string) error {
	if err := checkName("type", typ); err != nil {
		return err
	}
	if err := checkName("job id", id); err != nil {
		return err
	}
	// What an earlier attempt of this call removed: nothing yet (nil), or
	// the add token of the incarnation of the job it removed.
	var removed []byte
	removedBefore := false
	_, err := c.transactor(tx).Transact(ctx, func(tr kv.Transaction) (any, error) {
		r, err := c.k.readRow(tr, typ, id)
		if err != nil {
			return nil, err
		}
		if removedBefore && (r == nil || !bytes.Equal(r.addToken, removed)) {
			// An earlier attempt removed the job and may have committed;
			// what is there now, if anything, was added since.
			return nil, nil
		}
		if r == nil {
			return nil, fmt.Errorf("job %q of type %q: %w", id, typ, ErrNotFound)
		}
		if r.state == Pending {
			tr.Clear(c.k.pendingKey(typ, r.shard, r.stime, id))
		}
		c.k.clearRow(tr, typ, id, r)
		removed, removedBefore = r.addToken, true
		return nil, nil
	})
	return err
}

// SetData replaces the data of a job that is not running (pending or
// finished), keeping its state, scheduled time and place in the queue: a
// change of the data alone, such as re-encrypting what it holds. Reading
// the job's row, it conflicts with an Accept that takes the job at the
// same time (one of them retries). A running job is ErrRunning (its holder
// writes its data, with Update or Finish), a missing one ErrNotFound. It
// writes the same thing when run again, so it is idempotent under
// commit_unknown_result.
func (c *Client) SetData(ctx context.Context, tx kv.Transactor, typ, id string, data json.RawMessage) error {
	d, err := checkJob(typ, id, data)
	if err != nil {
		return err
	}
	_, err = c.transactor(tx).Transact(ctx, func(tr kv.Transaction) (any, error) {
		r, err := c.k.readRow(tr, typ, id)
		switch {
		case err != nil:
			return nil, err
		case r == nil:
			return nil, fmt.Errorf("job %q of type %q: %w", id, typ, ErrNotFound)
		case r.state == Running:
			return nil, fmt.Errorf("job %q of type %q: %w", id, typ, ErrRunning)
		}
		r.data = d
		// A pending job's key is written with it (writeRow): an Accept
		// taking the job at the same time conflicts.
		c.k.writeRow(tr, typ, id, r)
		return nil, nil
	})
	return err
}

// shardKey is what a new job's queue shard is drawn from: its partition
// where the kind has a limit per partition (byPartition), else its id.
func shardKey(j NewJob, byPartition bool) string {
	if byPartition && j.Partition != "" {
		return j.Partition
	}
	return j.ID
}
