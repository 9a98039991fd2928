package faultkv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// Default fault rates, used by DefaultOptions and by FDBREP_KV_FAULTS=1.
// They are probabilities per operation. Higher rates find more retry bugs
// but make every test slower: each injected fault costs a retry with the
// backend's backoff.
const (
	// CommitUnknownResultDefault is the chance that a commit that really
	// happened reports commit_unknown_result (1021), so that the retry loop
	// runs the transaction function again.
	CommitUnknownResultDefault = 0.05
	// NotCommittedDefault is the chance that a commit is dropped and reports
	// not_committed (1020), as after a conflict.
	NotCommittedDefault = 0.05
	// TransactionTooOldDefault is the chance that a commit is dropped and
	// reports transaction_too_old (1007).
	TransactionTooOldDefault = 0.02
	// ReadTooOldDefault is the chance that a read (Get, GetKey, GetRange)
	// fails with transaction_too_old (1007). It is lower than the commit
	// rates because a transaction makes many reads.
	ReadTooOldDefault = 0.005
	// TimedOutDefault is the chance that an operation (a read or the commit)
	// of a transaction that set a timeout fails with transaction_timed_out
	// (1031), which is not retryable. Transactions without a timeout never
	// get it, as in FoundationDB.
	TimedOutDefault = 0.02
	// ProxyMemoryLimitDefault is the chance that a commit is dropped and
	// reports commit_proxy_memory_limit_exceeded (1042), as a commit proxy
	// short of memory does; OnError then backs off for up to 30 s.
	ProxyMemoryLimitDefault = 0.005
	// ProcessBehindDefault is the chance that a read fails with
	// process_behind (1037): the storage servers lag behind the logs.
	ProcessBehindDefault = 0.002
	// FutureVersionDefault is the chance that a read fails with
	// future_version (1009): the storage server has not caught up with the
	// read version yet.
	FutureVersionDefault = 0.002
	// GRVProxyMemoryLimitDefault is the chance that the first read of an
	// attempt, which gets the read version, fails with
	// grv_proxy_memory_limit_exceeded (1078).
	GRVProxyMemoryLimitDefault = 0.002
	// TagThrottledDefault is the chance that the first read of an attempt
	// fails with tag_throttled (1213), as when ratekeeper throttles.
	TagThrottledDefault = 0.002
	// WatchFailureDefault is the chance that a watch fails instead of
	// waiting for a change: with too_many_watches (1032) or, as a watch
	// whose storage server fell behind, future_version (1009), half each.
	// Callers must set it again after a pause.
	WatchFailureDefault = 0.02
)

// EnvVar is the environment variable FromEnv reads.
const EnvVar = "FDBREP_KV_FAULTS"

// Options are the fault rates of a wrapper, each a probability in [0, 1] per
// operation; a zero rate disables that fault. A commit draws one fault at
// most, so NotCommitted, TransactionTooOld and CommitUnknownResult must sum
// to at most 1; so must ReadTooOld and TimedOut.
type Options struct {
	// Seed seeds the wrapper's random source: the same seed gives the same
	// sequence of decisions (which operation gets which fault also depends
	// on how concurrent transactions interleave).
	Seed uint64
	// CommitUnknownResult: commit, then report commit_unknown_result (1021).
	CommitUnknownResult float64
	// NotCommitted: drop the commit, report not_committed (1020).
	NotCommitted float64
	// TransactionTooOld: drop the commit, report transaction_too_old (1007).
	TransactionTooOld float64
	// ReadTooOld: fail a read with transaction_too_old (1007).
	ReadTooOld float64
	// TimedOut: in a transaction that set a timeout, fail a read or the
	// commit with transaction_timed_out (1031).
	TimedOut float64
	// ProxyMemoryLimit: drop the commit, report
	// commit_proxy_memory_limit_exceeded (1042).
	ProxyMemoryLimit float64
	// ProcessBehind: fail a read with process_behind (1037).
	ProcessBehind float64
	// FutureVersion: fail a read with future_version (1009).
	FutureVersion float64
	// GRVProxyMemoryLimit: fail the first read of an attempt (getting the
	// read version) with grv_proxy_memory_limit_exceeded (1078).
	GRVProxyMemoryLimit float64
	// TagThrottled: fail the first read of an attempt with tag_throttled
	// (1213).
	TagThrottled float64
	// WatchFailure: fail a watch with too_many_watches (1032) or
	// future_version (1009).
	WatchFailure float64
}

// DefaultOptions returns the default rates with the given seed.
func DefaultOptions(seed uint64) Options {
	return Options{
		Seed:                seed,
		CommitUnknownResult: CommitUnknownResultDefault,
		NotCommitted:        NotCommittedDefault,
		TransactionTooOld:   TransactionTooOldDefault,
		ReadTooOld:          ReadTooOldDefault,
		TimedOut:            TimedOutDefault,
		ProxyMemoryLimit:    ProxyMemoryLimitDefault,
		ProcessBehind:       ProcessBehindDefault,
		FutureVersion:       FutureVersionDefault,
		GRVProxyMemoryLimit: GRVProxyMemoryLimitDefault,
		TagThrottled:        TagThrottledDefault,
		WatchFailure:        WatchFailureDefault,
	}
}

// Validate reports whether o is usable: every rate in [0, 1], and the rates
// of each kind of decision (commit, read, read version) summing to at
// most 1.
func (o Options) Validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"CommitUnknownResult", o.CommitUnknownResult},
		{"NotCommitted", o.NotCommitted},
		{"TransactionTooOld", o.TransactionTooOld},
		{"ReadTooOld", o.ReadTooOld},
		{"TimedOut", o.TimedOut},
		{"ProxyMemoryLimit", o.ProxyMemoryLimit},
		{"ProcessBehind", o.ProcessBehind},
		{"FutureVersion", o.FutureVersion},
		{"GRVProxyMemoryLimit", o.GRVProxyMemoryLimit},
		{"TagThrottled", o.TagThrottled},
		{"WatchFailure", o.WatchFailure},
	} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			return fmt.Errorf("%w: %s rate %v is outside [0, 1]", ErrInvalidOptions, r.name, r.v)
		}
	}
	if sum := o.CommitUnknownResult + o.NotCommitted + o.TransactionTooOld + o.ProxyMemoryLimit; sum > 1 {
		return fmt.Errorf("%w: commit fault rates sum to %v, more than 1", ErrInvalidOptions, sum)
	}
	if sum := o.ReadTooOld + o.TimedOut + o.ProcessBehind + o.FutureVersion; sum > 1 {
		return fmt.Errorf("%w: read fault rates sum to %v, more than 1", ErrInvalidOptions, sum)
	}
	if sum := o.GRVProxyMemoryLimit + o.TagThrottled; sum > 1 {
		return fmt.Errorf("%w: read version fault rates sum to %v, more than 1", ErrInvalidOptions, sum)
	}
	return nil
}

// envKeys maps the keys of FDBREP_KV_FAULTS to the rate they set.
var envKeys = map[string]func(*Options) *float64{
	"commit_unknown": func(o *Options) *float64 { return &o.CommitUnknownResult },
	"not_committed":  func(o *Options) *float64 { return &o.NotCommitted },
	"too_old":        func(o *Options) *float64 { return &o.TransactionTooOld },
	"read_too_old":   func(o *Options) *float64 { return &o.ReadTooOld },
	"timed_out":      func(o *Options) *float64 { return &o.TimedOut },
	"proxy_memory":   func(o *Options) *float64 { return &o.ProxyMemoryLimit },
	"process_behind": func(o *Options) *float64 { return &o.ProcessBehind },
	"future_version": func(o *Options) *float64 { return &o.FutureVersion },
	"grv_memory":     func(o *Options) *float64 { return &o.GRVProxyMemoryLimit },
	"tag_throttled":  func(o *Options) *float64 { return &o.TagThrottled },
	"watch":          func(o *Options) *float64 { return &o.WatchFailure },
}

// envKeyList lists the keys of FDBREP_KV_FAULTS, for error messages.
const envKeyList = "seed, commit_unknown, not_committed, too_old, read_too_old, timed_out, proxy_memory, " +
	"process_behind, future_version, grv_memory, tag_throttled or watch"

// FromEnv reads FDBREP_KV_FAULTS and reports whether fault injection is
// enabled and with which options:
//
//   - unset, empty, "0" or "false": disabled;
//   - "1" or "true": DefaultOptions with a random seed;
//   - a comma-separated list of key=value pairs, such as
//     "seed=42,commit_unknown=0.05,not_committed=0.05,too_old=0.02,read_too_old=0.005,timed_out=0.02,
//     proxy_memory=0.005,process_behind=0.002,future_version=0.002,grv_memory=0.002,tag_throttled=0.002,watch=0.02":
//     the defaults with the listed values replaced (a random seed if seed
//     is not listed).
//
// Callers should log Options.Seed so that a failure can be replayed with
// seed=N. A malformed value is an error wrapping ErrInvalidOptions.
func FromEnv() (Options, bool, error) {
	return parseEnv(os.Getenv(EnvVar))
}

func parseEnv(v string) (Options, bool, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "", "0", "false":
		return Options{}, false, nil
	case "1", "true":
		return DefaultOptions(rand.Uint64()), true, nil
	}
	o := DefaultOptions(rand.Uint64())
	for _, field := range strings.Split(v, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			return Options{}, false, fmt.Errorf("%w: %s: %q is not key=value", ErrInvalidOptions, EnvVar, field)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if key == "seed" {
			seed, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return Options{}, false, fmt.Errorf("%w: %s: seed %q: %w", ErrInvalidOptions, EnvVar, val, err)
			}
			o.Seed = seed
			continue
		}
		field, ok := envKeys[key]
		if !ok {
			return Options{}, false, fmt.Errorf("%w: %s: unknown key %q (want %s)", ErrInvalidOptions, EnvVar, key, envKeyList)
		}
		rate, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return Options{}, false, fmt.Errorf("%w: %s: %s %q: %w", ErrInvalidOptions, EnvVar, key, val, err)
		}
		*field(&o) = rate
	}
	if err := o.Validate(); err != nil {
		return Options{}, false, fmt.Errorf("%s: %w", EnvVar, err)
	}
	return o, true, nil
}
