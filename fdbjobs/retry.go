package fdbjobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
	"unicode/utf8"
)

// RetryPolicy says how long after a failed attempt a job is tried again.
// attempt counts the attempt that failed (1 for the first). A delay of zero
// or less tries it again at once.
type RetryPolicy interface {
	NextRetry(attempt int, err error) time.Duration
}

// RetryFunc is a RetryPolicy written as a function.
type RetryFunc func(attempt int, err error) time.Duration

// NextRetry calls f.
func (f RetryFunc) NextRetry(attempt int, err error) time.Duration { return f(attempt, err) }

// RetryPolicyDefault is River's default policy: attempt⁴ seconds (1 s, 16
// s, 81 s, …; 25 attempts span about three weeks), each within ±10% at
// random, so that jobs that failed together do not come back together.
var RetryPolicyDefault RetryPolicy = RetryFunc(exponentialRetry)

func exponentialRetry(attempt int, _ error) time.Duration {
	d := math.Pow(float64(max(attempt, 1)), 4) * float64(time.Second)
	d *= 0.9 + 0.2*rand.Float64()
	return time.Duration(min(d, float64(math.MaxInt64/2)))
}

// ExponentialRetry is a RetryPolicy that waits Min after a job's first
// failed attempt and twice as long after each one after it, up to Max,
// less up to Jitter of each wait at random, so that jobs that failed
// together do not come back together. The replicator's crash backoff is
// one: Min 32 s ([replicator] min_backoff), Max 2 days, Jitter 0.25.
type ExponentialRetry struct {
	// Min is the first wait (> 0), and Max the longest (≥ Min).
	Min, Max time.Duration
	// Jitter is the part of each wait taken off at random, in [0, 1):
	// 0.25 makes a wait of 64 s one of 48 to 64 s.
	Jitter float64
}

// NextRetry is Delay with a random r.
func (p ExponentialRetry) NextRetry(attempt int, _ error) time.Duration {
	return p.Delay(attempt, rand.Float64())
}

// Delay is the wait after attempt failed attempts (1 for the first),
// with r in [0, 1) choosing the jitter: min(Min × 2^(attempt-1), Max),
// less r × Jitter of it. A caller whose transaction may run again (after
// commit_unknown_result) picks r once, outside it, so that each run
// schedules the job at the same time.
func (p ExponentialRetry) Delay(attempt int, r float64) time.Duration {
	wait := p.Min
	for i := 1; i < attempt && wait < p.Max; i++ {
		if wait > p.Max/2 {
			wait = p.Max // doubling would pass Max (or overflow)
			break
		}
		wait *= 2
	}
	wait = min(wait, p.Max)
	return wait - time.Duration(r*p.Jitter*float64(wait))
}

// check is ErrInvalidArgument for bounds out of order.
func (p ExponentialRetry) check() error {
	if p.Min <= 0 || p.Max < p.Min || !(p.Jitter >= 0 && p.Jitter < 1) { // NaN too
		return fmt.Errorf("%w: ExponentialRetry %v..%v, jitter %v: 0 < Min ≤ Max, 0 ≤ Jitter < 1", ErrInvalidArgument, p.Min, p.Max, p.Jitter)
	}
	return nil
}

// ErrorHistoryMax is how many of a job's last attempt errors it keeps
// (Work.Errors), and ErrorTextMax the bytes of each error's text: a job's
// history stays small whatever its worker returns.
const (
	ErrorHistoryMax = 10
	ErrorTextMax    = 2000
)

// AttemptError is the error of one failed attempt.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// Permanent marks err as one that no retry can mend: the job is
// discarded at once, whatever attempts it has left.
func Permanent(err error) error { return &permanentError{err: err} }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + fmt.Sprint(e.err) }
func (e *permanentError) Unwrap() error { return e.err }

// Snooze returns an error that puts the job back for d without counting
// an attempt (its worker found it cannot run yet).
func Snooze(d time.Duration) error { return &snoozeError{d: max(d, 0)} }

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %v", e.d) }

// errDecode is the error of a job whose arguments do not decode: it is
// discarded at once.
var errDecode = errors.New("fdbjobs: job arguments do not decode")

// Outcome states of a finished runtime job, in its data (JobOutcome).
const (
	// OutcomeCompleted: its worker returned nil.
	OutcomeCompleted = "completed"
	// OutcomeDiscarded: its last attempt failed, or an error was
	// permanent, or its arguments did not decode.
	OutcomeDiscarded = "discarded"
)

// envelope is the data of a job inserted for a Runtime: its arguments
// and its attempts. A job whose data is no envelope (one added with Add:
// valid JSON that is not an object with an "args" member) reads as the
// envelope of its data as arguments, before its first attempt; its first
// end writes the envelope.
type envelope struct {
	Args json.RawMessage `json:"args"`
	// Attempt counts the attempts that ended (failed, or completed).
	Attempt     int            `json:"attempt,omitempty"`
	MaxAttempts int            `json:"max_attempts,omitempty"`
	Errors      []AttemptError `json:"errors,omitempty"`
	// Outcome is set when the job is finished: OutcomeCompleted,
	// OutcomeDiscarded or OutcomeCancelled.
	Outcome string `json:"outcome,omitempty"`
	// FinishedAt is when it got its Outcome (Unix ms): its retention
	// counts from there.
	FinishedAt int64 `json:"finished_at,omitempty"`
	// Schedule and Period name the schedule that inserted the job and the
	// time of its period (Unix ms).
	Schedule string `json:"schedule,omitempty"`
	Period   int64  `json:"period,omitempty"`
	// Partition is InsertOptions.Partition.
	Partition string `json:"partition,omitempty"`
}

func decodeEnvelope(data json.RawMessage) (*envelope, error) {
	if args, ok := argsOnly(data); ok {
		return &envelope{Args: args}, nil
	}
	if rest, p, ok := trailingPartition(data); ok {
		if args, ok := argsOf(rest); ok {
			return &envelope{Args: args, Partition: p}, nil
		}
	}
	var e envelope
	if err := json.Unmarshal(data, &e); err != nil || e.Args == nil {
		if !json.Valid(data) {
			if err == nil {
				err = errors.New("invalid JSON")
			}
			return nil, fmt.Errorf("%w: %v", errDecode, err)
		}
		return &envelope{Args: data}, nil // added with Add: its data are its arguments
	}
	return &e, nil
}

// argsOnly returns the arguments of an envelope that holds nothing else,
// as a job's first attempt finds it (`{"args":…}`, as encode writes it),
// without decoding it: the worker's decoding of the arguments checks
// them. Any other form (more fields, spaces) is not ok, for
// json.Unmarshal.
func argsOnly(data []byte) (json.RawMessage, bool) {
	if len(data) == 0 || data[len(data)-1] != '}' {
		return nil, false
	}
	return argsOf(data[:len(data)-1])
}

// argsOf is argsOnly of an envelope without its closing brace (b), as
// trailingPartition leaves one.
func argsOf(b []byte) (json.RawMessage, bool) {
	const prefix = `{"args":`
	if len(b) <= len(prefix) || string(b[:len(prefix)]) != prefix {
		return nil, false
	}
	args := b[len(prefix):]
	// args must be one value: no comma or closing bracket outside strings
	// at its top level, and its brackets balanced.
	depth, inString, escaped := 0, false, false
	for _, b := range args {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
		case b == '}' || b == ']':
			if depth--; depth < 0 {
				return nil, false
			}
		case b == ',' && depth == 0:
			return nil, false
		}
	}
	if depth != 0 || inString || len(args) == 0 || args[0] == ' ' || args[0] == '\t' || args[0] == '\n' || args[0] == '\r' {
		return nil, false
	}
	return json.RawMessage(args), true
}

// trailingPartition splits off the partition that ends a partitioned
// job's envelope (encode writes it last: `{…,"partition":"p"}`) when it is
// plain text (valid UTF-8 with no quote nor backslash, so nothing to
// unescape or replace): rest is the data before it, without the closing
// brace. As a comma followed by a quote cannot be inside a JSON string,
// the key found is a member of the object the last brace closes. Any
// other form is not ok, for json.Unmarshal.
func trailingPartition(data []byte) (rest []byte, partition string, ok bool) {
	const key = `,"partition":"`
	if !bytes.HasSuffix(data, []byte(`"}`)) {
		return nil, "", false
	}
	i := bytes.LastIndex(data, []byte(key))
	if i < 0 {
		return nil, "", false
	}
	p := data[i+len(key) : len(data)-2]
	if bytes.ContainsAny(p, `"\`) || !utf8.Valid(p) {
		return nil, "", false
	}
	return data[:i], string(p), true
}

// failed records a failed attempt's error in e.
func (e *envelope) failed(err error, at time.Time) {
	text := err.Error()
	if len(text) > ErrorTextMax {
		text = text[:ErrorTextMax] + "…"
	}
	e.Attempt++
	e.Errors = append(e.Errors, AttemptError{Attempt: e.Attempt, At: at.UTC(), Error: text})
	if n := len(e.Errors) - ErrorHistoryMax; n > 0 {
		e.Errors = append([]AttemptError(nil), e.Errors[n:]...)
	}
}

func (e *envelope) encode() (json.RawMessage, error) {
	b, err := json.Marshal(e)
	for err == nil && len(b) > MaxDataSize && len(e.Errors) > 0 {
		e.Errors = e.Errors[1:]
		b, err = json.Marshal(e)
	}
	return b, err
}

// JobOutcome reads a runtime job's data (Job, JobData): its outcome
// (OutcomeCompleted, OutcomeDiscarded, or "" while it is not finished),
// its attempts that ended, and its last errors. Data that is no runtime
// job's is ErrInvalidData.
func JobOutcome(data json.RawMessage) (outcome string, attempts int, errs []AttemptError, err error) {
	e, err := decodeEnvelope(data)
	if err != nil {
		return "", 0, nil, fmt.Errorf("%w: %v", ErrInvalidData, err)
	}
	return e.Outcome, e.Attempt, e.Errors, nil
}

// UnmarshalArgs decodes a runtime job's arguments from its data (Job,
// JobData, FoldJobs) into args, a pointer. Data that is no runtime job's
// is ErrInvalidData.
func UnmarshalArgs(data json.RawMessage, args any) error {
	e, err := decodeEnvelope(data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidData, err)
	}
	if err := decodeArgs(e.Args, args); err != nil {
		return fmt.Errorf("%w: arguments: %v", ErrInvalidData, err)
	}
	return nil
}
