package sim

import (
	"testing"
	"time"
)

// Shrink looks for a shorter operation sequence that still fails, by
// delta debugging: it replays cfg with chunks of the operations that ran
// before the failure removed, halving the chunks while any removal
// fails, within budget (real time). A replay may pass where the original
// failed (goroutines interleave differently between runs), so a chunk is
// dropped only when its removal fails, and the result is a sequence that
// failed at least once. It returns the shortest sequence found and its
// failure.
func Shrink(t *testing.T, cfg Config, failed Result, budget time.Duration) ([]Op, *Failure) {
	deadline := time.Now().Add(budget)
	ops := failed.Ops[:min(len(failed.Ops), failed.Applied+1)]
	best := failed.Failure
	// A replay runs until a little after the original failure.
	cfg.Until = failed.Failure.At + 10*time.Duration(failed.Setup.IntervalSec)*time.Second + 2*time.Minute
	try := func(cand []Op) *Failure {
		c := cfg
		c.Ops = cand
		res := Run(t, c)
		return res.Failure
	}
	for chunk := max(1, len(ops)/2); chunk >= 1 && time.Now().Before(deadline); {
		removed := false
		for i := 0; i+chunk <= len(ops) && time.Now().Before(deadline); {
			cand := append(append(make([]Op, 0, len(ops)), ops[:i]...), ops[i+chunk:]...) // never nil: nil means "generate"
			if f := try(cand); f != nil {
				ops, best, removed = cand, f, true
				continue // the same i now names the next chunk
			}
			i += chunk
		}
		if !removed || chunk > len(ops) {
			chunk /= 2
		}
	}
	return ops, best
}
