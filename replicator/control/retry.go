package control

import (
	"cmp"
	"context"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/replicator"
)

// RetryJob ends the backoff of the crashing job id (a replication id or a
// job id) at once (Store.EndBackoff), keeping its error count, so a
// crash after the retry backs off longer still. A server admin finds
// every job; another viewer only the jobs they own (ErrNotFound for the
// others, as for a job that does not exist). A job that is not crashing
// is ErrConflict. One transaction; retried after commit_unknown_result,
// it finds the job already moved and changes nothing more.
func (p *Plane) RetryJob(ctx context.Context, viewer api.User, id string) (api.RetryResult, error) {
	owner, err := ownerOf(viewer)
	if err != nil {
		return api.RetryResult{}, err
	}
	jobID, err := p.resolveID(ctx, id)
	if err != nil {
		return api.RetryResult{}, err
	}
	var keep func(*replicator.JobData) bool
	if owner != "" {
		keep = func(d *replicator.JobData) bool { return d.Owner() == owner }
	}
	d, err := p.store.EndBackoff(ctx, jobID, p.cfg.Clock.Now(), keep)
	if err != nil {
		return api.RetryResult{}, err
	}
	p.cfg.Logger.Info().Str("job_id", jobID).Str("rep_id", d.RepID).Str("db", d.DBName).Str("doc_id", d.DocID).
		Int("error_count", d.ErrorCount).Msg("replication retried on request: its backoff ended")
	return api.RetryResult{OK: true, ID: cmp.Or(d.RepID, jobID), RetryAt: replicator.FormatMillis(d.RetryAt)}, nil
}
