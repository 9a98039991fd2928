package fdbjobs

import "time"

// Defaults of RuntimeOptions.
const (
	// FetchPollDefault is how often a kind's idle fetcher looks for jobs
	// that became due by the clock (a retry, a snooze, a job inserted for
	// later); a job inserted due now wakes it at once (Accept's watch).
	FetchPollDefault = time.Second
	// WatchHoldAfterDefault is how long a job runs before its Runtime
	// watches its row (WatchHold), so that the worker hears within the
	// watch's latency that the job was removed or taken: shorter jobs
	// finish without paying the watch's transaction, and hear of it at
	// their Finish.
	WatchHoldAfterDefault = 200 * time.Millisecond
)

// RuntimeOptions tune a Runtime. The zero value gives the defaults.
type RuntimeOptions struct {
	// FetchPoll: see FetchPollDefault.
	FetchPoll time.Duration
	// WatchHoldAfter: see WatchHoldAfterDefault.
	WatchHoldAfter time.Duration
	// SweepPeriod: see SweepPeriodDefault.
	SweepPeriod time.Duration
	// SchedulePoll: see SchedulePollDefault.
	SchedulePoll time.Duration
	// ChargeInterval: see ChargeIntervalDefault.
	ChargeInterval time.Duration
	// Middleware wrap every attempt of every kind, outside the kinds' own
	// (WorkerOptions.Middleware), outermost first.
	Middleware []WorkMiddleware
}
