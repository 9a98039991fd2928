package control

import (
	"cmp"
	"context"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// RetryResult is the reply of POST /_scheduler/jobs/{id}/_retry.
type RetryResult struct {
	OK bool `json:"ok"`
	// ID is the replication id (the job id while it has none).
	ID string `json:"id"`
	// RetryAt is now: the job starts when a slot frees and the jobs its
	// fair share puts before it have started.
	RetryAt string `json:"retry_at"`
}

// RetryJob ends the backoff of the crashing job id (a replication id or a
// job id) at once: it goes back to the queue at the time a job of its
// priority enqueued now gets (fair share), keeping its error count, so a
// crash after the retry backs off longer still. user "" is a server
// admin; other users find only the jobs they own (ErrNotFound for the
// others, as for a job that does not exist). A job that is not crashing
// is ErrConflict. One transaction; retried after commit_unknown_result,
// it finds the job already moved and changes nothing more.
func (p *Plane) RetryJob(ctx context.Context, id, user string) (RetryResult, error) {
	jobID, err := p.resolveID(ctx, id)
	if err != nil {
		return RetryResult{}, err
	}
	now := p.cfg.Clock.Now()
	type result struct{ d *replicator.JobData }
	res, err := kv.Transact(ctx, p.store.DB, func(tr kv.Transaction) (result, error) {
		d, st, err := p.store.Job(ctx, tr, jobID)
		if err != nil {
			return result{}, err
		}
		if d == nil || user != "" && d.Owner() != user {
			return result{}, replicator.NewReason(replicator.ErrNotFound, "missing")
		}
		if d.State != replicator.StateCrashing || st != fdbjobs.Pending {
			return result{}, replicator.NewReason(replicator.ErrConflict, "the job is %s, not crashing: it has no backoff to end", d.State)
		}
		table, err := p.store.ShareTable(tr)
		if err != nil {
			return result{}, err
		}
		stime := p.conf().EnqueueTime(now, d.Priority, table.Interval)
		x := d.Clone()
		x.RetryAt = replicator.Millis(now)
		// Adding a pending job moves it to stime with the new data.
		return result{d: x}, p.store.Jobs.Add(ctx, tr, replicator.JobType, jobID, x.Encode(), stime)
	})
	if err != nil {
		return RetryResult{}, err
	}
	p.cfg.Logger.Info().Str("job_id", jobID).Str("rep_id", res.d.RepID).Str("db", res.d.DBName).Str("doc_id", res.d.DocID).
		Int("error_count", res.d.ErrorCount).Msg("replication retried on request: its backoff ended")
	return RetryResult{OK: true, ID: cmp.Or(res.d.RepID, jobID), RetryAt: replicator.FormatMillis(res.d.RetryAt)}, nil
}
