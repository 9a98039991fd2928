package fdbjobs

import (
	"cmp"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
)

// Defaults for Config and the API. Each is documented where it is used.
const (
	// ActivityMonitorMaxJitterDefault caps the random delay added to each
	// activity monitor period (the delay is at most half the type timeout).
	ActivityMonitorMaxJitterDefault = 10 * time.Second
	// MissingTimeoutCheckDefault is how often an activity monitor whose type
	// lost its timeout checks whether it came back.
	MissingTimeoutCheckDefault = 5 * time.Second
	// NotifierHoldoffDefault is the least time between two rounds of a
	// notifier: changes within it are coalesced into one round of reads.
	NotifierHoldoffDefault = 50 * time.Millisecond
	// TypeCheckPeriodDefault is how often a started Client re-reads the
	// list of types as a fallback; changes made through SetTypeTimeout and
	// ClearTypeTimeout are seen at once through a watch.
	TypeCheckPeriodDefault = 15 * time.Second
	// BatchSizeDefault is the initial number of jobs the activity monitor
	// re-enqueues, and the notifier reads, per transaction.
	BatchSizeDefault = 1000
	// BatchIncrementDefault is added to the batch size after a full batch
	// succeeds.
	BatchIncrementDefault = 100
	// BatchFactorDefault multiplies the batch size after a batch fails
	// with transaction_too_large, a retryable error or a timeout.
	BatchFactorDefault = 0.75
	// TimeUnitDefault is the unit of scheduled times (Config.TimeUnit):
	// seconds since the Unix epoch, couch_jobs' convention.
	TimeUnitDefault = time.Second
	// PendingCountLimitDefault is PendingCount's limit when given 0.
	PendingCountLimitDefault = 1024
	// FoldBatchDefault is the number of jobs FoldJobs reads per
	// transaction.
	FoldBatchDefault = 500
	// MaxDataSize is the largest job data accepted, leaving room in
	// FoundationDB's 100,000-byte value limit for the row's other fields.
	MaxDataSize = kv.MaxValueSize - 200
	// MaxBatch is the most jobs one batch call takes.
	MaxBatch = 10_000
)

// SubspaceDefault is the subspace of the job layer's keys when
// Config.Subspace is nil.
var SubspaceDefault = subspace.Sub("fdbjobs")

// Config configures a Client. The zero value gives the defaults.
type Config struct {
	// Subspace holds every key of the job layer. Defaults to
	// SubspaceDefault. Every node must use the same one.
	Subspace subspace.Subspace
	// Clock drives activity monitor periods and Accept timeouts; tests pass
	// a fake clock. Defaults to the real clock.
	Clock clockwork.Clock
	// Logger receives errors from background services. Defaults to a
	// logger that discards everything.
	Logger *zerolog.Logger
	// ActivityMonitorMaxJitter: see ActivityMonitorMaxJitterDefault.
	ActivityMonitorMaxJitter time.Duration
	// MissingTimeoutCheck: see MissingTimeoutCheckDefault.
	MissingTimeoutCheck time.Duration
	// NotifierHoldoff: see NotifierHoldoffDefault. A longer holdoff reads
	// less under heavy activity and delays events by up to that much.
	NotifierHoldoff time.Duration
	// TypeCheckPeriod: see TypeCheckPeriodDefault.
	TypeCheckPeriod time.Duration
	// BatchSize: see BatchSizeDefault.
	BatchSize int
	// BatchIncrement: see BatchIncrementDefault.
	BatchIncrement int
	// BatchFactor: see BatchFactorDefault; in (0, 1).
	BatchFactor float64
	// TimeUnit is the unit of scheduled times, counted from the Unix
	// epoch: Accept and PendingCount without a maximum scheduled time take
	// the jobs scheduled up to now (the Client's clock) in this unit, so
	// that a job scheduled for later never runs early. Defaults to
	// TimeUnitDefault; at least a nanosecond.
	TimeUnit time.Duration
	// PriorityAging: see PriorityAgingDefault (0 means it). Counted in
	// whole TimeUnits, at least one and at most 2^59 (handicaps are added
	// to scheduled times); aging cannot be turned off, but a long one
	// (a year, say) makes priorities strict in practice.
	// Every node should use the same: the bound it gives holds for the
	// jobs of a shard as its acceptors order them.
	PriorityAging time.Duration
	// Members names this node and the live nodes that accept jobs, for
	// the pending queue's shards (see doc.go, "Shards"): each shard of a
	// type is owned by one member, chosen by rendezvous hashing of the
	// member names, and a node's Accepts take from the shards it owns
	// first, so that the acceptors of different nodes do not meet on the
	// same keys. It is called at each Accept and must be cheap (return a
	// cached list). Nil, or a list without self, makes every shard this
	// node's own: right for one node; nodes that share a store should set
	// it, or their acceptors meet and retry more often.
	Members func() (self string, members []string)
	// DisableActivityMonitor stops a started Client from running activity
	// monitors; some other node must run them or dead workers' jobs stay
	// running forever.
	DisableActivityMonitor bool
}

func (c Config) withDefaults() Config {
	if c.Subspace == nil {
		c.Subspace = SubspaceDefault
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		l := zerolog.Nop()
		c.Logger = &l
	}
	c.ActivityMonitorMaxJitter = cmp.Or(c.ActivityMonitorMaxJitter, ActivityMonitorMaxJitterDefault)
	c.MissingTimeoutCheck = cmp.Or(c.MissingTimeoutCheck, MissingTimeoutCheckDefault)
	c.NotifierHoldoff = cmp.Or(c.NotifierHoldoff, NotifierHoldoffDefault)
	c.TypeCheckPeriod = cmp.Or(c.TypeCheckPeriod, TypeCheckPeriodDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.BatchIncrement = cmp.Or(c.BatchIncrement, BatchIncrementDefault)
	c.BatchFactor = cmp.Or(c.BatchFactor, BatchFactorDefault)
	c.TimeUnit = cmp.Or(c.TimeUnit, TimeUnitDefault)
	c.PriorityAging = cmp.Or(c.PriorityAging, PriorityAgingDefault)
	return c
}

// now is the Client's clock in scheduled-time units: the default maximum
// scheduled time of Accept and PendingCount.
func (c Config) now() int64 { return c.Clock.Now().UnixNano() / int64(c.TimeUnit) }

// batch is the adaptive batch of a background loop whose batches start at
// BatchSize jobs, shrink by BatchFactor and grow by BatchIncrement up to
// max (see doc.go, Failure behaviour and idempotence).
func (c Config) batch(max int) kv.Batch {
	return kv.Batch{Max: max, First: c.BatchSize, Factor: c.BatchFactor, Increment: c.BatchIncrement}
}

func (c Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.ActivityMonitorMaxJitter < 0:
		return bad("ActivityMonitorMaxJitter %v is negative", c.ActivityMonitorMaxJitter)
	case c.MissingTimeoutCheck < 0:
		return bad("MissingTimeoutCheck %v is negative", c.MissingTimeoutCheck)
	case c.NotifierHoldoff < 0:
		return bad("NotifierHoldoff %v is negative", c.NotifierHoldoff)
	case c.TypeCheckPeriod < 0:
		return bad("TypeCheckPeriod %v is negative", c.TypeCheckPeriod)
	case c.BatchSize < 0:
		return bad("BatchSize %d is negative", c.BatchSize)
	case c.BatchIncrement < 0:
		return bad("BatchIncrement %d is negative", c.BatchIncrement)
	case c.BatchFactor <= 0 || c.BatchFactor >= 1:
		return bad("BatchFactor %v is not in (0, 1)", c.BatchFactor)
	case c.TimeUnit < 0:
		return bad("TimeUnit %v is negative", c.TimeUnit)
	case c.PriorityAging < 0:
		return bad("PriorityAging %v is negative", c.PriorityAging)
	case c.TimeUnit > 0 && int64(c.PriorityAging/c.TimeUnit) > priorityAgingMaxUnits:
		return bad("PriorityAging %v is more than %d TimeUnits", c.PriorityAging, int64(priorityAgingMaxUnits))
	}
	return nil
}
