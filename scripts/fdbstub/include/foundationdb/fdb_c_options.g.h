/*
 * fdbrep compile-only stand-in for FoundationDB's generated option header.
 *
 * Compile-only stand-in, never used at run time; link against the real
 * libfdb_c from FoundationDB's client package in production.
 *
 * The real header is generated from FoundationDB's fdb.options and lists
 * every option. The Go binding generates its own option constants from the
 * same source and passes their numeric codes through these enum types, so
 * only the types are needed to compile it. The few members listed are the
 * documented codes fdbrep relies on, for reference.
 */
#ifndef FDBREP_FDBSTUB_FDB_C_OPTIONS_G_H
#define FDBREP_FDBSTUB_FDB_C_OPTIONS_G_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	FDB_NET_OPTION_TRACE_ENABLE = 30
} FDBNetworkOption;

typedef enum {
	FDB_DB_OPTION_TRANSACTION_TIMEOUT = 500,
	FDB_DB_OPTION_TRANSACTION_RETRY_LIMIT = 501,
	FDB_DB_OPTION_TRANSACTION_MAX_RETRY_DELAY = 502
} FDBDatabaseOption;

typedef enum {
	FDB_TR_OPTION_TIMEOUT = 500,
	FDB_TR_OPTION_RETRY_LIMIT = 501,
	FDB_TR_OPTION_MAX_RETRY_DELAY = 502
} FDBTransactionOption;

/* The binding passes its StreamingMode minus one. */
typedef enum {
	FDB_STREAMING_MODE_WANT_ALL = -2,
	FDB_STREAMING_MODE_ITERATOR = -1,
	FDB_STREAMING_MODE_EXACT = 0,
	FDB_STREAMING_MODE_SMALL = 1,
	FDB_STREAMING_MODE_MEDIUM = 2,
	FDB_STREAMING_MODE_LARGE = 3,
	FDB_STREAMING_MODE_SERIAL = 4
} FDBStreamingMode;

typedef enum {
	FDB_MUTATION_TYPE_ADD = 2,
	FDB_MUTATION_TYPE_BIT_AND = 6,
	FDB_MUTATION_TYPE_BIT_OR = 7,
	FDB_MUTATION_TYPE_BIT_XOR = 8,
	FDB_MUTATION_TYPE_MAX = 12,
	FDB_MUTATION_TYPE_MIN = 13,
	FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_KEY = 14,
	FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_VALUE = 15,
	FDB_MUTATION_TYPE_BYTE_MIN = 16,
	FDB_MUTATION_TYPE_BYTE_MAX = 17,
	FDB_MUTATION_TYPE_COMPARE_AND_CLEAR = 20
} FDBMutationType;

typedef enum {
	FDB_CONFLICT_RANGE_TYPE_READ = 0,
	FDB_CONFLICT_RANGE_TYPE_WRITE = 1
} FDBConflictRangeType;

typedef enum {
	FDB_ERROR_PREDICATE_RETRYABLE = 50000,
	FDB_ERROR_PREDICATE_MAYBE_COMMITTED = 50001,
	FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED = 50002
} FDBErrorPredicate;

#ifdef __cplusplus
}
#endif

#endif /* FDBREP_FDBSTUB_FDB_C_OPTIONS_G_H */
