package kv

import (
	"errors"
	"fmt"
)

// Error is an error from the storage layer carrying FoundationDB's error
// code. Both backends return exactly this type, so code can classify errors
// the same way on either:
//
//	var e kv.Error
//	if errors.As(err, &e) && e.Code == kv.CodeNotCommitted { ... }
//
// Inside a transaction function, return Errors unwrapped so that the retry
// loop recognises them.
type Error struct {
	Code int
}

// FoundationDB error codes used by fdbrep. The names are FoundationDB's.
const (
	CodeOperationFailed         = 1000 // operation_failed
	CodeTimedOut                = 1004 // timed_out
	CodeTransactionTooOld       = 1007 // transaction_too_old
	CodeFutureVersion           = 1009 // future_version
	CodeNotCommitted            = 1020 // not_committed
	CodeCommitUnknownResult     = 1021 // commit_unknown_result
	CodeTransactionCancelled    = 1025 // transaction_cancelled
	CodeTransactionTimedOut     = 1031 // transaction_timed_out
	CodeTooManyWatches          = 1032 // too_many_watches
	CodeAccessedUnreadable      = 1036 // accessed_unreadable
	CodeProcessBehind           = 1037 // process_behind
	CodeDatabaseLocked          = 1038 // database_locked
	CodeClusterVersionChanged   = 1039 // cluster_version_changed
	CodeProxyMemoryLimit        = 1042 // proxy_memory_limit_exceeded
	CodeBatchTransactionThrottl = 1051 // batch_transaction_throttled
	CodeOperationCancelled      = 1101 // operation_cancelled
	CodeFutureReleased          = 1102 // future_released
	CodeTagThrottled            = 1213 // tag_throttled
	CodeClientInvalidOperation  = 2000 // client_invalid_operation
	CodeKeyOutsideLegalRange    = 2004 // key_outside_legal_range
	CodeInvertedRange           = 2005 // inverted_range
	CodeInvalidOptionValue      = 2006 // invalid_option_value
	CodeInvalidOption           = 2007 // invalid_option
	CodeUsedDuringCommit        = 2017 // used_during_commit
	CodeInvalidMutationType     = 2018 // invalid_mutation_type
	CodeTransactionTooLarge     = 2101 // transaction_too_large
	CodeKeyTooLarge             = 2102 // key_too_large
	CodeValueTooLarge           = 2103 // value_too_large
	CodeUnknownError            = 4000 // unknown_error
	CodeInternalError           = 4100 // internal_error
)

// FoundationDB's limits, enforced by the embedded backend exactly as
// FoundationDB enforces them.
const (
	// MaxKeySize is the largest key a transaction may write (key_too_large).
	MaxKeySize = 10_000
	// MaxValueSize is the largest value a transaction may write
	// (value_too_large).
	MaxValueSize = 100_000
	// MaxTransactionSize is the largest a transaction's mutations and write
	// conflict ranges may be, in bytes (transaction_too_large).
	MaxTransactionSize = 10_000_000
	// MaxTransactionLifetimeMillis is how long after its read version a
	// transaction can still read or commit (transaction_too_old).
	MaxTransactionLifetimeMillis = 5_000
)

var errorMessages = map[int]string{
	CodeOperationFailed:         "Operation failed",
	CodeTimedOut:                "Operation timed out",
	CodeTransactionTooOld:       "Transaction is too old to perform reads or be committed",
	CodeFutureVersion:           "Request for future version",
	CodeNotCommitted:            "Transaction not committed due to conflict with another transaction",
	CodeCommitUnknownResult:     "Transaction may or may not have committed",
	CodeTransactionCancelled:    "Operation aborted because the transaction was cancelled",
	CodeTransactionTimedOut:     "Operation aborted because the transaction timed out",
	CodeTooManyWatches:          "Too many watches currently set",
	CodeAccessedUnreadable:      "Read or wrote an unreadable key",
	CodeProcessBehind:           "Storage process does not have recent mutations",
	CodeDatabaseLocked:          "Database is locked",
	CodeClusterVersionChanged:   "The protocol version of the cluster has changed",
	CodeProxyMemoryLimit:        "Proxy commit memory limit exceeded",
	CodeBatchTransactionThrottl: "Batch GRV request rate limit exceeded",
	CodeOperationCancelled:      "Asynchronous operation cancelled",
	CodeFutureReleased:          "Future has been released",
	CodeTagThrottled:            "Transaction tag is being throttled",
	CodeClientInvalidOperation:  "Invalid API call",
	CodeKeyOutsideLegalRange:    "Key outside legal range",
	CodeInvertedRange:           "Range begin key larger than end key",
	CodeInvalidOptionValue:      "Option set with an invalid value",
	CodeInvalidOption:           "Option not valid in this context",
	CodeUsedDuringCommit:        "Operation issued while a commit was outstanding",
	CodeInvalidMutationType:     "Unrecognized atomic mutation type",
	CodeTransactionTooLarge:     "Transaction exceeds byte limit",
	CodeKeyTooLarge:             "Key length exceeds limit",
	CodeValueTooLarge:           "Value length exceeds limit",
	CodeUnknownError:            "An unknown error occurred",
	CodeInternalError:           "An internal error occurred",
}

// Error renders the code and FoundationDB's message for it, in the format of
// FoundationDB's Go binding.
func (e Error) Error() string {
	msg, ok := errorMessages[e.Code]
	if !ok {
		msg = "Unknown error"
	}
	return fmt.Sprintf("%s (%d)", msg, e.Code)
}

// Name returns FoundationDB's name for the code ("not_committed"), or
// "unknown_error_<code>".
func (e Error) Name() string {
	if n, ok := errorNames[e.Code]; ok {
		return n
	}
	return fmt.Sprintf("unknown_error_%d", e.Code)
}

var errorNames = map[int]string{
	CodeOperationFailed: "operation_failed", CodeTimedOut: "timed_out",
	CodeTransactionTooOld: "transaction_too_old", CodeFutureVersion: "future_version",
	CodeNotCommitted: "not_committed", CodeCommitUnknownResult: "commit_unknown_result",
	CodeTransactionCancelled: "transaction_cancelled", CodeTransactionTimedOut: "transaction_timed_out",
	CodeTooManyWatches: "too_many_watches", CodeAccessedUnreadable: "accessed_unreadable",
	CodeProcessBehind: "process_behind", CodeDatabaseLocked: "database_locked",
	CodeClusterVersionChanged: "cluster_version_changed", CodeProxyMemoryLimit: "proxy_memory_limit_exceeded",
	CodeBatchTransactionThrottl: "batch_transaction_throttled", CodeOperationCancelled: "operation_cancelled",
	CodeFutureReleased: "future_released", CodeTagThrottled: "tag_throttled",
	CodeClientInvalidOperation: "client_invalid_operation", CodeKeyOutsideLegalRange: "key_outside_legal_range",
	CodeInvertedRange: "inverted_range", CodeInvalidOptionValue: "invalid_option_value",
	CodeInvalidOption: "invalid_option", CodeUsedDuringCommit: "used_during_commit",
	CodeInvalidMutationType: "invalid_mutation_type", CodeTransactionTooLarge: "transaction_too_large",
	CodeKeyTooLarge: "key_too_large", CodeValueTooLarge: "value_too_large",
	CodeUnknownError: "unknown_error", CodeInternalError: "internal_error",
}

// MaybeCommitted reports whether the transaction that failed with e may have
// committed nonetheless (FoundationDB's "maybe_committed" predicate). A retry
// loop runs the function again after such an error, which is why transaction
// functions must be idempotent.
func (e Error) MaybeCommitted() bool {
	switch e.Code {
	case CodeCommitUnknownResult, CodeClusterVersionChanged:
		return true
	}
	return false
}

// RetryableNotCommitted reports whether e means the transaction certainly did
// not commit and may be retried (FoundationDB's "retryable_not_committed").
func (e Error) RetryableNotCommitted() bool {
	switch e.Code {
	case CodeTransactionTooOld, CodeFutureVersion, CodeNotCommitted, CodeProcessBehind,
		CodeDatabaseLocked, CodeProxyMemoryLimit, CodeBatchTransactionThrottl, CodeTagThrottled:
		return true
	}
	return false
}

// Retryable reports whether a retry loop retries e (FoundationDB's
// "retryable" predicate): it is either maybe-committed or
// retryable-not-committed. Every other error is fatal to the transaction.
func (e Error) Retryable() bool {
	return e.MaybeCommitted() || e.RetryableNotCommitted()
}

// IsRetryable reports whether err is, or wraps, a retryable Error.
func IsRetryable(err error) bool {
	var e Error
	return errors.As(err, &e) && e.Retryable()
}

// IsMaybeCommitted reports whether err is, or wraps, an Error after which the
// transaction may have committed.
func IsMaybeCommitted(err error) bool {
	var e Error
	return errors.As(err, &e) && e.MaybeCommitted()
}

// HasCode reports whether err is, or wraps, an Error with the given code.
func HasCode(err error, code int) bool {
	var e Error
	return errors.As(err, &e) && e.Code == code
}

// ErrDatabaseClosed is returned by operations on a closed Database.
var ErrDatabaseClosed = errors.New("kv: database closed")
