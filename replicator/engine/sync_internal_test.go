package engine

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

func TestAttemptReason(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	cases := []struct {
		name string
		side side
		err  error
		want string
	}{
		{"refused source", sourceSide, &couch.RequestError{Method: "GET", URL: "u", Err: dial}, StallSourceUnreachable},
		{"refused target", targetSide, fmt.Errorf("x: %w", dial), StallTargetUnreachable},
		{"no such host", targetSide, &net.DNSError{Err: "no such host", Name: "h"}, StallTargetUnreachable},
		{"silent peer", sourceSide, fmt.Errorf("%w: nothing for 30s", couch.ErrTimeout), StallConnectionStalled},
		{"5xx", targetSide, &couch.HTTPError{Status: 503, Error_: "service_unavailable"}, StallRetrying},
		{"cut short", sourceSide, errors.New("unexpected EOF"), StallRetrying},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := attemptReason(c.side, c.err)
			require.Equal(t, c.want, got)
		})
	}
}

// A run's Sync: caught up only with nothing in flight and nothing
// pending; a peer's condition until it answers; a refusing target until a
// document is written; filtering only for a filtered run that waits with
// nothing in flight.
func TestHealthSync(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.UnixMilli(1_000_000))
	h := newHealth(clk, true)
	zero, some := int64(0), int64(40)
	pending := func(p *int64) Stats { return Stats{ChangesPending: p} }

	require.False(t, h.sync(pending(nil), 0).CaughtUp, "nothing known yet")
	h.rowSent(true)
	h.rowSent(true)
	require.False(t, h.sync(pending(&zero), 1).CaughtUp, "a row in flight")
	y := h.sync(pending(&zero), 2)
	require.True(t, y.CaughtUp)
	require.Equal(t, clk.Now().UnixMilli(), y.CaughtUpSince)
	clk.Advance(time.Second)
	require.Equal(t, y.CaughtUpSince, h.sync(pending(&zero), 2).CaughtUpSince, "caught up since the first time seen")

	h.observer(targetSide)(couch.Attempt{Method: "POST", URL: "http://t/db/_bulk_docs", N: 2, Max: 6,
		Err: &couch.HTTPError{Status: 500, Error_: "internal_server_error"}})
	s := h.sync(pending(&zero), 2).Stall
	require.NotNil(t, s)
	require.Equal(t, StallRetrying, s.Reason)
	require.Contains(t, s.Detail, "500 internal_server_error (attempt 2 of 6)")
	h.observer(targetSide)(couch.Attempt{Method: "POST", URL: "http://t/db/_bulk_docs", N: 3, Max: 6})
	require.Nil(t, h.sync(pending(&zero), 2).Stall, "cleared by an answer")

	h.wrote(3, 3, 403, "forbidden: no")
	require.Equal(t, StallTargetRefusing, h.sync(pending(&zero), 2).Stall.Reason)
	h.wrote(3, 1, 403, "forbidden: no")
	require.Nil(t, h.sync(pending(&zero), 2).Stall, "cleared by a document written")

	// Behind, nothing in flight, nothing passing the filter.
	require.Nil(t, h.sync(pending(&some), 2).Stall)
	clk.Advance(StallAfter)
	s = h.sync(pending(&some), 2).Stall
	require.NotNil(t, s)
	require.Equal(t, StallFiltering, s.Reason)
	h.rowSent(true)
	require.Nil(t, h.sync(pending(&some), 2).Stall, "a row passed the filter")
}

// caught_up_since is when the run last caught up after replicating
// anything: changes that come and are replicated between two readings
// move it, though no reading saw the run behind.
func TestCaughtUpSinceAfterWork(t *testing.T) {
	clk := clockwork.NewFakeClockAt(time.UnixMilli(1_000_000))
	h := newHealth(clk, false)
	zero := int64(0)
	caught := h.sync(Stats{ChangesPending: &zero}, 0)
	require.True(t, caught.CaughtUp)
	clk.Advance(2 * time.Second)
	require.Equal(t, caught.CaughtUpSince, h.sync(Stats{ChangesPending: &zero}, 0).CaughtUpSince, "idle: unchanged")

	for range 3000 {
		h.rowSent(true)
	}
	clk.Advance(time.Second)
	h.batchDone()
	done := clk.Now().UnixMilli()
	clk.Advance(time.Second)
	y := h.sync(Stats{ChangesPending: &zero}, 3000)
	require.True(t, y.CaughtUp)
	require.Equal(t, done, y.CaughtUpSince, "caught up when the new changes were replicated")
	clk.Advance(time.Minute)
	require.Equal(t, done, h.sync(Stats{ChangesPending: &zero}, 3000).CaughtUpSince, "idle again: unchanged")
}
