package clockwait_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/internal/clockwait"
	"github.com/fdbrep/fdbrep/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func TestSleep(t *testing.T) {
	clock := clockwork.NewFakeClock()
	if err := clockwait.Sleep(t.Context(), clock, 0); err != nil {
		t.Fatalf("Sleep(0) = %v, want nil", err)
	}

	done := make(chan error, 1)
	go func() { done <- clockwait.Sleep(t.Context(), clock, time.Second) }()
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Sleep after the clock passed it = %v, want nil", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- clockwait.Sleep(ctx, clock, time.Hour) }()
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with ctx cancelled = %v, want context.Canceled", err)
	}
	// An ended context ends even a zero wait.
	if err := clockwait.Sleep(ctx, clock, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(0) with ctx cancelled = %v, want context.Canceled", err)
	}
}
