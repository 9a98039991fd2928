// Package clockwait waits on a clockwork.Clock until a context ends: the
// one wait of the retry and rate-limit loops, so that tests drive it with
// a fake clock.
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
