// Package clockwait waits on a clockwork.Clock until a context ends, so
// that tests drive the wait with a fake clock. The store's retries
// (kv.Backoff), the CouchDB client's retries and rate limit and the
// scheduler's watch polls wait with it. It is not the only wait: the
// replication engine's retries (changes feed, open_revs, missing
// revisions) and the scheduler's accept loop select on their clock's After
// themselves, and fdbjobs' notifier and watch retries wait on real timers
// (sleepCtx), which a fake clock does not move.
package clockwait

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// Sleep waits d on clock and returns nil, or ctx's error as soon as ctx
// ends (at once when it has ended already). d <= 0 does not wait.
func Sleep(ctx context.Context, clock clockwork.Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
