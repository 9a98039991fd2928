package replicator

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// EndBackoff ends the backoff of the crashing job jobID now: it is
// pending at now, as if its backoff had just run out (a backoff's end
// keeps the job's place in the fair share: its priority stays in its
// data), with its error count (a crash after it backs off longer still);
// its data's RetryAt becomes now. keep, when set, must accept the job's data
// (else ErrNotFound, as for a job that does not exist); a job that is not
// crashing is ErrConflict. One transaction. Run again after an attempt
// that wrote, it writes again only if the job is still in a backoff of the
// same crash that does not end when that attempt's did (that attempt did
// not commit; the crash's own write may have moved its end meanwhile);
// otherwise that attempt committed (commit_unknown_result) and the job is
// as it wrote or has moved on since (an acceptor may already run it), and
// it returns what that attempt wrote. It returns the job's data as
// written.
func (s *Store) EndBackoff(ctx context.Context, jobID string, now time.Time, keep func(*JobData) bool) (*JobData, error) {
	var wrote *JobData // what an earlier attempt wrote
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (*JobData, error) {
		d, st, err := s.Job(ctx, tr, jobID)
		if err != nil {
			return nil, err
		}
		if d == nil || keep != nil && !keep(d) {
			return nil, NewReason(ErrNotFound, "missing")
		}
		inBackoff := d.State == StateCrashing && st == fdbjobs.Pending
		if wrote != nil && !(inBackoff && d.ErrorCount == wrote.ErrorCount && d.RetryAt != wrote.RetryAt) {
			return wrote, nil
		}
		if !inBackoff {
			return nil, NewReason(ErrConflict, "the job is %s, not crashing: it has no backoff to end", d.State)
		}
		x := d.Clone()
		Lifecycle{}.Transform(x, Change{Kind: BackoffEnded, At: now})
		wrote = x
		// Adding a pending job moves it to the new time with the new data.
		return x, s.jobs.Add(ctx, tr, JobType, jobID, x.Encode(), x.RetryAt)
	})
}
