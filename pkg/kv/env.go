package kv

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by the backends' openers (the embedded store's
// Open, so kvtest.NewDB and `fdbrep serve` alike).
const (
	// EnvLatency enables the network-latency mode: see Latency and
	// LatencyFromEnv.
	EnvLatency = "FDBREP_KV_LATENCY"
	// EnvBudget enables the transaction budget check: see Budget and
	// BudgetFromEnv.
	EnvBudget = "FDBREP_KV_BUDGET"
)

// Defaults of FDBREP_KV_LATENCY=1: round trips of a FoundationDB client to
// its cluster in one data centre.
const (
	// LatencyReadDefault is the time a read (Get, GetKey, one batch of a
	// range read) takes to come back.
	LatencyReadDefault = time.Millisecond
	// LatencyGRVDefault is the time getting a read version takes (a
	// transaction's first read, or GetReadVersion).
	LatencyGRVDefault = time.Millisecond
	// LatencyCommitDefault is the time a commit with writes takes.
	LatencyCommitDefault = 4 * time.Millisecond
	// LatencyReplyBytesDefault is how many bytes one read reply carries at
	// most (FoundationDB's REPLY_BYTE_LIMIT): a range read that returns
	// more costs one round trip per such reply.
	LatencyReplyBytesDefault = 80_000
)

// Defaults of FDBREP_KV_BUDGET=1: FoundationDB's guidance for transactions
// on a healthy cluster.
const (
	// BudgetBytesDefault is the most a transaction should write (its size
	// as counted for transaction_too_large) or read (keys and values
	// returned), in bytes.
	BudgetBytesDefault = 1_000_000
	// BudgetDurationDefault is the longest a transaction attempt should stay
	// open, from its first operation to its commit.
	BudgetDurationDefault = time.Second
)

// PageBytes is the transaction budget of every paging loop, stated once:
// about the most bytes one transaction of a paged operation reads, or
// reads and writes, before it ends its page and leaves the rest to the
// next (view pages, scans, AddBatch, FoldJobs; the activity monitor takes
// three quarters, as it writes back what it reads). It is 40% of
// BudgetBytesDefault, FoundationDB's advice of 1 MB: a page stops at the
// row or chunk that reaches it, which leaves room for the last chunk, the
// keys and the index writes beside the values.
const PageBytes = BudgetBytesDefault * 2 / 5

// Latency is the network-latency mode of a store that runs in process:
// every read and commit waits as long as it would across a network, so
// that code doing thousands of sequential reads in one transaction runs
// into the five second transaction lifetime (transaction_too_old) as it
// would on FoundationDB. Futures become ready after the latency counted
// from when the operation was issued, so reads issued together overlap, as
// on FoundationDB. The zero Latency disables the mode.
type Latency struct {
	Read, GRV, Commit time.Duration
}

// IsZero reports whether l adds no latency.
func (l Latency) IsZero() bool { return l == Latency{} }

// String renders l in FDBREP_KV_LATENCY's syntax.
func (l Latency) String() string {
	return fmt.Sprintf("read=%v,grv=%v,commit=%v", l.Read, l.GRV, l.Commit)
}

// DefaultLatency returns the latencies of FDBREP_KV_LATENCY=1.
func DefaultLatency() Latency {
	return Latency{Read: LatencyReadDefault, GRV: LatencyGRVDefault, Commit: LatencyCommitDefault}
}

// LatencyFromEnv reads FDBREP_KV_LATENCY:
//
//   - unset, empty, "0" or "false": no latency;
//   - "1" or "true": DefaultLatency;
//   - a comma-separated list such as "read=2ms,commit=10ms" (keys read,
//     grv, commit; values in time.ParseDuration syntax): the defaults with
//     the listed values replaced.
//
// A malformed value is an error naming the variable.
func LatencyFromEnv() (Latency, error) { return ParseLatency(os.Getenv(EnvLatency)) }

// ParseLatency parses a value of FDBREP_KV_LATENCY (see LatencyFromEnv).
func ParseLatency(v string) (Latency, error) {
	l := DefaultLatency()
	fields := map[string]*time.Duration{"read": &l.Read, "grv": &l.GRV, "commit": &l.Commit}
	on, err := parseEnv(EnvLatency, v, func(key, val string) error {
		f, ok := fields[key]
		if !ok {
			return fmt.Errorf("unknown key %q (want read, grv or commit)", key)
		}
		d, err := time.ParseDuration(val)
		if err != nil || d < 0 {
			return fmt.Errorf("%s=%q is not a duration of at least 0", key, val)
		}
		*f = d
		return nil
	})
	if err != nil || !on {
		return Latency{}, err
	}
	return l, nil
}

// Budget is the transaction budget check for tests: a transaction attempt
// that writes or reads more than Bytes, or stays open longer than Duration,
// fails with a *BudgetError naming where it was created. A zero field
// disables that part of the check; the zero Budget disables it all. The
// check is a development aid: FoundationDB itself allows 10 MB and five
// seconds, but advises staying well under them.
type Budget struct {
	Bytes    int64
	Duration time.Duration
}

// IsZero reports whether b checks nothing.
func (b Budget) IsZero() bool { return b == Budget{} }

// DefaultBudget returns the budget of FDBREP_KV_BUDGET=1.
func DefaultBudget() Budget {
	return Budget{Bytes: BudgetBytesDefault, Duration: BudgetDurationDefault}
}

// BudgetFromEnv reads FDBREP_KV_BUDGET:
//
//   - unset, empty, "0" or "false": no check;
//   - "1" or "true": DefaultBudget;
//   - a comma-separated list such as "bytes=500000,duration=2s": the
//     defaults with the listed values replaced.
//
// A malformed value is an error naming the variable.
func BudgetFromEnv() (Budget, error) { return ParseBudget(os.Getenv(EnvBudget)) }

// ParseBudget parses a value of FDBREP_KV_BUDGET (see BudgetFromEnv).
func ParseBudget(v string) (Budget, error) {
	b := DefaultBudget()
	on, err := parseEnv(EnvBudget, v, func(key, val string) error {
		switch key {
		case "bytes":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("bytes=%q is not a number of at least 0", val)
			}
			b.Bytes = n
		case "duration":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 {
				return fmt.Errorf("duration=%q is not a duration of at least 0", val)
			}
			b.Duration = d
		default:
			return fmt.Errorf("unknown key %q (want bytes or duration)", key)
		}
		return nil
	})
	if err != nil || !on {
		return Budget{}, err
	}
	return b, nil
}

// ErrInvalidEnv is wrapped by the errors of LatencyFromEnv and
// BudgetFromEnv for a malformed value.
var ErrInvalidEnv = errors.New("kv: invalid environment variable")

// parseEnv parses the common syntax of the variables: off, on (defaults)
// or key=value pairs handed to set.
func parseEnv(name, v string, set func(key, val string) error) (bool, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	for _, field := range strings.Split(v, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			return false, fmt.Errorf("%w: %s: %q is not key=value", ErrInvalidEnv, name, field)
		}
		if err := set(strings.TrimSpace(key), strings.TrimSpace(val)); err != nil {
			return false, fmt.Errorf("%w: %s: %v", ErrInvalidEnv, name, err)
		}
	}
	return true, nil
}
