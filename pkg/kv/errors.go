package kv

import (
	"errors"
	"fmt"
	"slices"
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
	CodeOperationFailed          = 1000 // operation_failed
	CodeTimedOut                 = 1004 // timed_out
	CodeTransactionTooOld        = 1007 // transaction_too_old
	CodeFutureVersion            = 1009 // future_version
	CodeNotCommitted             = 1020 // not_committed
	CodeCommitUnknownResult      = 1021 // commit_unknown_result
	CodeTransactionCancelled     = 1025 // transaction_cancelled
	CodeWatchCancelled           = 1029 // watch_cancelled (handled inside FDB's client; never returned)
	CodeTransactionTimedOut      = 1031 // transaction_timed_out
	CodeTooManyWatches           = 1032 // too_many_watches
	CodeAccessedUnreadable       = 1036 // accessed_unreadable
	CodeProcessBehind            = 1037 // process_behind
	CodeDatabaseLocked           = 1038 // database_locked
	CodeClusterVersionChanged    = 1039 // cluster_version_changed
	CodeProxyMemoryLimit         = 1042 // commit_proxy_memory_limit_exceeded
	CodeBatchTransactionThrottl  = 1051 // batch_transaction_throttled
	CodeGRVProxyMemoryLimit      = 1078 // grv_proxy_memory_limit_exceeded
	CodeBlobGranuleRequest       = 1079 // blob_granule_request_failed
	CodeOperationCancelled       = 1101 // operation_cancelled
	CodeFutureReleased           = 1102 // future_released
	CodeTagThrottled             = 1213 // tag_throttled
	CodeProxyTagThrottled        = 1223 // proxy_tag_throttled
	CodeIOError                  = 1510 // io_error
	CodeClientInvalidOperation   = 2000 // client_invalid_operation
	CodeKeyOutsideLegalRange     = 2004 // key_outside_legal_range
	CodeInvertedRange            = 2005 // inverted_range
	CodeInvalidOptionValue       = 2006 // invalid_option_value
	CodeInvalidOption            = 2007 // invalid_option
	CodeRangeLimitsInvalid       = 2012 // range_limits_invalid
	CodeUsedDuringCommit         = 2017 // used_during_commit
	CodeInvalidMutationType      = 2018 // invalid_mutation_type
	CodeNoCommitVersion          = 2021 // no_commit_version
	CodeTransactionTooLarge      = 2101 // transaction_too_large
	CodeKeyTooLarge              = 2102 // key_too_large
	CodeValueTooLarge            = 2103 // value_too_large
	CodeSpecialKeysWriteDisabled = 2114 // special_keys_write_disabled
	CodeTenantNotFound           = 2131 // tenant_not_found
	CodeTenantAlreadyExists      = 2132 // tenant_already_exists
	CodeTenantNotEmpty           = 2133 // tenant_not_empty
	CodeTenantsDisabled          = 2136 // tenants_disabled
	CodeExactModeWithoutLimits   = 2210 // exact_mode_without_limits
	CodeUnknownError             = 4000 // unknown_error
	CodeInternalError            = 4100 // internal_error
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
	// The other errors a client of FoundationDB 7.3 may see, so that none
	// reads as "Unknown error".
	1001:                         {"wrong_shard_server", "Shard is not available from this server"},
	1006:                         {"all_alternatives_failed", "All alternatives failed"},
	1022:                         {"commit_unknown_result_fatal", "Idempotency id for transaction may have expired, so the commit status of the transaction cannot be determined"},
	1026:                         {"connection_failed", "Network connection failed"},
	1027:                         {"coordinators_changed", "Coordination servers have changed"},
	1030:                         {"request_maybe_delivered", "Request may or may not have been delivered"},
	1033:                         {"locality_information_unavailable", "Locality information not available"},
	1034:                         {"watches_disabled", "Watches cannot be set if read your writes is disabled"},
	1040:                         {"external_client_already_loaded", "External client has already been loaded"},
	1041:                         {"lookup_failed", "DNS lookup failed"},
	1043:                         {"shutdown_in_progress", "Operation no longer supported due to shutdown"},
	1054:                         {"wrong_connection_file", "Connection file mismatch"},
	1100:                         {"broken_promise", "Broken promise"},
	1211:                         {"server_overloaded", "Server is under too much load and cannot respond"},
	1511:                         {"file_not_found", "File not found"},
	1513:                         {"file_not_readable", "File could not be read"},
	1515:                         {"no_cluster_file_found", "No cluster file found in current directory or default location"},
	2008:                         {"network_not_setup", "Action not possible before the network is configured"},
	2009:                         {"network_already_setup", "Network can be configured only once"},
	2010:                         {"read_version_already_set", "Transaction already has a read version set"},
	2011:                         {"version_invalid", "Version not valid"},
	2015:                         {"future_not_set", "Future not ready"},
	2016:                         {"future_not_error", "Future not an error"},
	2020:                         {"transaction_invalid_version", "Transaction does not have a valid commit version"},
	2023:                         {"transaction_read_only", "Attempted to commit a transaction specified as read-only"},
	2100:                         {"incompatible_protocol_version", "Incompatible protocol version"},
	2104:                         {"connection_string_invalid", "Connection string invalid"},
	2107:                         {"tls_error", "TLS error"},
	2108:                         {"unsupported_operation", "Operation is not supported"},
	2109:                         {"too_many_tags", "Too many tags set on transaction"},
	2110:                         {"tag_too_long", "Tag set on transaction is too long"},
	2112:                         {"special_keys_cross_module_read", "Special key space range read crosses modules. Refer to the `special_key_space_relaxed' transaction option for more details."},
	2113:                         {"special_keys_no_module_found", "Special key space range read does not intersect a module. Refer to the `special_key_space_relaxed' transaction option for more details."},
	CodeSpecialKeysWriteDisabled: {"special_keys_write_disabled", "Special Key space is not allowed to write by default. Refer to the `special_key_space_enable_writes` transaction option for more details."},
	2115:                         {"special_keys_no_write_module_found", "Special key space key or keyrange in set or clear does not intersect a module"},
	2116:                         {"special_keys_cross_module_clear", "Special key space clear crosses modules"},
	2117:                         {"special_keys_api_failure", "Api call through special keys failed. For more information, call get on special key 0xff0xff/error_message to get a json string of the error message."},
	2125:                         {"incompatible_client", "None of the available clients match the protocol version of the cluster."},
	2130:                         {"tenant_name_required", "Tenant name must be specified to access data in the cluster"},
	CodeTenantNotFound:           {"tenant_not_found", "Tenant does not exist"},
	CodeTenantAlreadyExists:      {"tenant_already_exists", "A tenant with the given name already exists"},
	CodeTenantNotEmpty:           {"tenant_not_empty", "Cannot delete a non-empty tenant"},
	2134:                         {"invalid_tenant_name", "Tenant name cannot begin with \\xff"},
	2135:                         {"tenant_prefix_allocator_conflict", "The database already has keys stored at the prefix allocated for the tenant"},
	CodeTenantsDisabled:          {"tenants_disabled", "Tenants have been disabled in the cluster"},
	2138:                         {"illegal_tenant_access", "Illegal tenant access"},
	2142:                         {"tenant_removed", "The tenant was removed"},
	2143:                         {"invalid_tenant_state", "Operation cannot be applied to tenant in its current state"},
	2144:                         {"tenant_locked", "Tenant is locked"},
	2200:                         {"api_version_unset", "API version is not set"},
	2201:                         {"api_version_already_set", "API version may be set only once"},
	2202:                         {"api_version_invalid", "API version not valid"},
	2203:                         {"api_version_not_supported", "API version not supported"},
	2204:                         {"api_function_missing", "Failed to load a required FDB API function."},
	4200:                         {"not_implemented", "Not implemented yet"},
	6000:                         {"permission_denied", "Client tried to access unauthorized data"},
	CodeUnknownError:             {"unknown_error", "An unknown error occurred"},
	CodeInternalError:            {"internal_error", "An internal error occurred"},
}

// Codes returns, in increasing order, the codes whose FoundationDB name
// and message kv knows.
func Codes() []int {
	codes := make([]int, 0, len(errorInfos))
	for c := range errorInfos {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return codes
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
