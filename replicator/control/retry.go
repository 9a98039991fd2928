package control

import (
	"cmp"
	"context"

	"github.com/fdbrep/fdbrep/replicator"
)

// RetryResult is the reply of POST /_scheduler/jobs/{id}/_retry.
type RetryResult struct {
	OK bool `json:"ok"`
	// ID is the replication id (the job id while it has none).
	ID string `json:"id"`
	// RetryAt is now: the job starts when a slot is free for it, as when
	// its backoff runs out.
	RetryAt string `json:"retry_at"`
}

// RetryJob ends the backoff of the crashing job id (a replication id or a
// job id) at once (Store.EndBackoff), keeping its error count, so a
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
	var keep func(*replicator.JobData) bool
	if user != "" {
		keep = func(d *replicator.JobData) bool { return d.Owner() == user }
	}
	d, err := p.store.EndBackoff(ctx, jobID, p.cfg.Clock.Now(), keep)
	if err != nil {
		return RetryResult{}, err
	}
	p.cfg.Logger.Info().Str("job_id", jobID).Str("rep_id", d.RepID).Str("db", d.DBName).Str("doc_id", d.DocID).
		Int("error_count", d.ErrorCount).Msg("replication retried on request: its backoff ended")
	return RetryResult{OK: true, ID: cmp.Or(d.RepID, jobID), RetryAt: replicator.FormatMillis(d.RetryAt)}, nil
}
