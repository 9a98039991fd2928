package fdbjobs

import "errors"

// Sentinel errors. Functions wrap them with %w; test with errors.Is.
var (
	// ErrNotFound is returned when a job does not exist, when a type has no
	// activity timeout where one is looked up, and by Accept when no job
	// became available before its timeout.
	ErrNotFound = errors.New("fdbjobs: not found")

	// ErrHalt is returned by Update and Finish (and by the batch forms, per
	// job) when the caller no longer holds the job: it was removed,
	// re-enqueued by the activity monitor, or accepted by another worker.
	// The worker must stop working on the job and write nothing more for it.
	ErrHalt = errors.New("fdbjobs: halt: job lock lost")

	// ErrRunning is returned by SetData for a running job: its holder
	// writes its data (Update, Finish).
	ErrRunning = errors.New("fdbjobs: job is running")

	// ErrNoTypeTimeout is returned by Add when SetTypeTimeout was never
	// called for the job's type.
	ErrNoTypeTimeout = errors.New("fdbjobs: type has no activity timeout")

	// ErrInvalidData is returned when job data is not valid JSON.
	ErrInvalidData = errors.New("fdbjobs: job data is not valid JSON")

	// ErrDataTooLarge is returned when job data does not fit in one
	// FoundationDB value (see MaxDataSize).
	ErrDataTooLarge = errors.New("fdbjobs: job data too large")

	// ErrInvalidArgument is returned for an empty type or job id, a negative
	// scheduled time, a bad batch size and similar caller mistakes.
	ErrInvalidArgument = errors.New("fdbjobs: invalid argument")

	// ErrNoScheduleMaxTime is returned by Accept when NoSchedule is combined
	// with a MaxScheduledTime other than zero.
	ErrNoScheduleMaxTime = errors.New("fdbjobs: no-schedule accept requires a zero max scheduled time")

	// ErrNotStarted is returned by Subscribe when the Client is not started
	// (subscriptions are served by the Client's notifiers), and by a
	// Runtime's Start (its Client's activity monitors hand back the jobs
	// of nodes that died).
	ErrNotStarted = errors.New("fdbjobs: client not started")

	// ErrSubscriptionClosed is returned by Wait after Unsubscribe, and after
	// the final event (finished or not found) has been consumed.
	ErrSubscriptionClosed = errors.New("fdbjobs: subscription closed")

	// ErrLayout is returned by CheckLayout (and so by Start, Add,
	// AddBatch and Accept) on a store whose jobs were written in a key
	// layout this version does not read.
	ErrLayout = errors.New("fdbjobs: store in another key layout")

	// ErrPaused is returned by Accept and AcceptBatch for a paused type
	// (Pause): they take no job until Resume.
	ErrPaused = errors.New("fdbjobs: type paused")

	// ErrNoFeed is returned by ReadFeed and a FeedReader for a kind whose
	// event feed is off (SetFeed turns it on).
	ErrNoFeed = errors.New("fdbjobs: kind has no event feed")

	// ErrFeedPruned is returned by ReadFeed and a FeedReader when events
	// that follow the place read from were pruned (older than the feed
	// keeps, or removed by DisableFeed): the reader missed them.
	ErrFeedPruned = errors.New("fdbjobs: feed events missed: pruned")

	// ErrInvalidConfig is returned by New for a Config that fails
	// validation.
	ErrInvalidConfig = errors.New("fdbjobs: invalid config")
)
