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
	CodeWatchCancelled          = 1029 // watch_cancelled (handled inside FDB's client; never returned)
	CodeTransactionTimedOut     = 1031 // transaction_timed_out
	CodeTooManyWatches          = 1032 // too_many_watches
	CodeAccessedUnreadable      = 1036 // accessed_unreadable
	CodeProcessBehind           = 1037 // process_behind
	CodeDatabaseLocked          = 1038 // database_locked
	CodeClusterVersionChanged   = 1039 // cluster_version_changed
	CodeProxyMemoryLimit        = 1042 // commit_proxy_memory_limit_exceeded
	CodeBatchTransactionThrottl = 1051 // batch_transaction_throttled
	CodeGRVProxyMemoryLimit     = 1078 // grv_proxy_memory_limit_exceeded
	CodeBlobGranuleRequest      = 1079 // blob_granule_request_failed
	CodeOperationCancelled      = 1101 // operation_cancelled
	CodeFutureReleased          = 1102 // future_released
	CodeTagThrottled            = 1213 // tag_throttled
	CodeProxyTagThrottled       = 1223 // proxy_tag_throttled
	CodeIOError                 = 1510 // io_error
	CodeClientInvalidOperation  = 2000 // client_invalid_operation
	CodeKeyOutsideLegalRange    = 2004 // key_outside_legal_range
	CodeInvertedRange           = 2005 // inverted_range
	CodeInvalidOptionValue      = 2006 // invalid_option_value
	CodeInvalidOption           = 2007 // invalid_option
	CodeRangeLimitsInvalid      = 2012 // range_limits_invalid
	CodeUsedDuringCommit        = 2017 // used_during_commit
	CodeInvalidMutationType     = 2018 // invalid_mutation_type
	CodeNoCommitVersion         = 2021 // no_commit_version
	CodeTransactionTooLarge     = 2101 // transaction_too_large
	CodeKeyTooLarge             = 2102 // key_too_large
	CodeValueTooLarge           = 2103 // value_too_large
	CodeExactModeWithoutLimits  = 2210 // exact_mode_without_limits
	CodeUnknownError            = 4000 // unknown_error
	CodeInternalError           = 4100 // internal_error
)

// FoundationDB's limits. The embedded backend enforces them where and as
// FoundationDB 7.3 does (see package kv/embedded for how the transaction
// size is counted).
const (
	// MaxKeySize is the largest key a transaction may write (key_too_large).
	MaxKeySize = 10_000
	// MaxValueSize is the largest value a transaction may write
	// (value_too_large).
	MaxValueSize = 100_000
	// MaxTransactionSize is the largest a transaction may be when it
	// commits, in bytes (transaction_too_large), counted as FoundationDB's
	// client counts it: the mutations, the read conflict ranges and the
	// write conflict ranges it sends to the commit proxy, each entry with
	// its in-memory overhead (MutationOverhead, ConflictRangeOverhead).
	MaxTransactionSize = 10_000_000
	// MutationOverhead is what FoundationDB 7.3 counts for each mutation on
	// top of its key and parameter: sizeof(MutationRef) on 64-bit platforms.
	MutationOverhead = 56
	// ConflictRangeOverhead is what FoundationDB counts for each read or
	// write conflict range on top of its two keys: sizeof(KeyRangeRef).
	ConflictRangeOverhead = 32
	// MaxTransactionLifetimeMillis is how long after its read version a
	// transaction can still read or commit (transaction_too_old).
	MaxTransactionLifetimeMillis = 5_000
)

// CodeCommitProxyMemoryLimit is CodeProxyMemoryLimit under its FoundationDB
// 7.x name.
const CodeCommitProxyMemoryLimit = CodeProxyMemoryLimit

// errorInfo is FoundationDB 7.3's name and message for a code
// (flow/error_definitions.h).
type errorInfo struct{ name, message string }

var errorInfos = map[int]errorInfo{
	CodeOperationFailed:         {"operation_failed", "Operation failed"},
	CodeTimedOut:                {"timed_out", "Operation timed out"},
	CodeTransactionTooOld:       {"transaction_too_old", "Transaction is too old to perform reads or be committed"},
	CodeFutureVersion:           {"future_version", "Request for future version"},
	CodeNotCommitted:            {"not_committed", "Transaction not committed due to conflict with another transaction"},
	CodeCommitUnknownResult:     {"commit_unknown_result", "Transaction may or may not have committed"},
	CodeTransactionCancelled:    {"transaction_cancelled", "Operation aborted because the transaction was cancelled"},
	CodeWatchCancelled:          {"watch_cancelled", "Watch cancelled because storage server watch limit exceeded"},
	CodeTransactionTimedOut:     {"transaction_timed_out", "Operation aborted because the transaction timed out"},
	CodeTooManyWatches:          {"too_many_watches", "Too many watches currently set"},
	CodeAccessedUnreadable:      {"accessed_unreadable", "Read or wrote an unreadable key"},
	CodeProcessBehind:           {"process_behind", "Storage process does not have recent mutations"},
	CodeDatabaseLocked:          {"database_locked", "Database is locked"},
	CodeClusterVersionChanged:   {"cluster_version_changed", "The protocol version of the cluster has changed"},
	CodeProxyMemoryLimit:        {"commit_proxy_memory_limit_exceeded", "CommitProxy commit memory limit exceeded"},
	CodeBatchTransactionThrottl: {"batch_transaction_throttled", "Batch GRV request rate limit exceeded"},
	CodeGRVProxyMemoryLimit:     {"grv_proxy_memory_limit_exceeded", "GetReadVersion proxy memory limit exceeded"},
	CodeBlobGranuleRequest:      {"blob_granule_request_failed", "BlobGranule request failed"},
	CodeOperationCancelled:      {"operation_cancelled", "Asynchronous operation cancelled"},
	CodeFutureReleased:          {"future_released", "Future has been released"},
	CodeTagThrottled:            {"tag_throttled", "Transaction tag is being throttled"},
	CodeProxyTagThrottled:       {"proxy_tag_throttled", "Exceeded maximum proxy tag throttling duration"},
	CodeIOError:                 {"io_error", "Disk i/o operation failed"},
	CodeClientInvalidOperation:  {"client_invalid_operation", "Invalid API call"},
	CodeKeyOutsideLegalRange:    {"key_outside_legal_range", "Key outside legal range"},
	CodeInvertedRange:           {"inverted_range", "Range begin key larger than end key"},
	CodeInvalidOptionValue:      {"invalid_option_value", "Option set with an invalid value"},
	CodeInvalidOption:           {"invalid_option", "Option not valid in this context"},
	CodeRangeLimitsInvalid:      {"range_limits_invalid", "Range limits not valid"},
	CodeUsedDuringCommit:        {"used_during_commit", "Operation issued while a commit was outstanding"},
	CodeInvalidMutationType:     {"invalid_mutation_type", "Unrecognized atomic mutation type"},
	CodeNoCommitVersion:         {"no_commit_version", "Transaction is read-only and therefore does not have a commit version"},
	CodeTransactionTooLarge:     {"transaction_too_large", "Transaction exceeds byte limit"},
	CodeKeyTooLarge:             {"key_too_large", "Key length exceeds limit"},
	CodeValueTooLarge:           {"value_too_large", "Value length exceeds limit"},
	CodeExactModeWithoutLimits:  {"exact_mode_without_limits", "EXACT streaming mode requires limits, but none were given"},
	CodeUnknownError:            {"unknown_error", "An unknown error occurred"},
	CodeInternalError:           {"internal_error", "An internal error occurred"},
}

// Error renders the code and FoundationDB's message for it exactly as
// FoundationDB's Go binding renders an fdb.Error, so that errors read the
// same on every backend: "FoundationDB error code 1020 (Transaction not
// committed due to conflict with another transaction)".
func (e Error) Error() string {
	msg := "Unknown error"
	if info, ok := errorInfos[e.Code]; ok {
		msg = info.message
	}
	return fmt.Sprintf("FoundationDB error code %d (%s)", e.Code, msg)
}

// Name returns FoundationDB's name for the code ("not_committed"), or
// "unknown_error_<code>".
func (e Error) Name() string {
	if info, ok := errorInfos[e.Code]; ok {
		return info.name
	}
	return fmt.Sprintf("unknown_error_%d", e.Code)
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
// not commit and may be retried (FoundationDB 7.3's
// "retryable_not_committed", fdb_error_predicate in bindings/c/fdb_c.cpp).
func (e Error) RetryableNotCommitted() bool {
	switch e.Code {
	case CodeNotCommitted, CodeTransactionTooOld, CodeFutureVersion, CodeDatabaseLocked,
		CodeGRVProxyMemoryLimit, CodeProxyMemoryLimit, CodeBatchTransactionThrottl,
		CodeProcessBehind, CodeTagThrottled, CodeProxyTagThrottled:
		return true
	}
	return false
}

// Retryable reports whether a retry loop retries e (FoundationDB's
// "retryable" predicate): it is either maybe-committed or
// retryable-not-committed. Every other error is fatal to the transaction.
// (FoundationDB's OnError also retries blob_granule_request_failed, 1079,
// which the predicate leaves out; Backoff follows OnError.)
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

// ErrStorageFull is wrapped, together with Error{Code: CodeIOError}, by the
// error of a commit that a store refused because its disk is full, and by
// its Health while the disk stays full. The transaction did not commit and
// the error is not retryable: an HTTP layer should answer 507 Insufficient
// Storage for it, and 503 for other io_error (1510) failures.
var ErrStorageFull = errors.New("kv: storage full")

// Healther is implemented by databases that can tell whether they can
// currently commit (the embedded store; wrappers pass it through). Health
// returns nil when the store is healthy, or why it is not (an error
// wrapping ErrStorageFull and Error{Code: CodeIOError} when the disk is
// full, kv.ErrDatabaseClosed once closed).
type Healther interface {
	Health() error
}

// Health returns db's Health if it is a Healther, and nil otherwise
// (FoundationDB reports trouble through its operations instead).
func Health(db any) error {
	if h, ok := db.(Healther); ok {
		return h.Health()
	}
	return nil
}
