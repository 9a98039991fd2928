/*
 * fdbrep compile-only stand-in for FoundationDB's C client header.
 *
 * Compile-only stand-in, never used at run time; link against the real
 * libfdb_c from FoundationDB's client package in production.
 *
 * Opaque handle types and plain data types of the FoundationDB C API
 * (https://apple.github.io/foundationdb/api-c.html), written for fdbrep from
 * that documentation and from what the Go binding's cgo calls need.
 */
#ifndef FDBREP_FDBSTUB_FDB_C_TYPES_H
#define FDBREP_FDBSTUB_FDB_C_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes are plain ints; 0 means success. */
typedef int fdb_error_t;
/* Booleans cross the C API as ints: 0 false, anything else true. */
typedef int fdb_bool_t;

/* Opaque handles owned by the client library. */
typedef struct FDBRepStubFuture FDBFuture;
typedef struct FDBRepStubResult FDBResult;
typedef struct FDBRepStubDatabase FDBDatabase;
typedef struct FDBRepStubTenant FDBTenant;
typedef struct FDBRepStubTransaction FDBTransaction;

/* Called once a future is ready, on the network thread. */
typedef void (*FDBCallback)(FDBFuture* future, void* callback_parameter);

/*
 * Key and key-value records in arrays returned by futures. The documented
 * ABI packs them on 4-byte boundaries (12 and 24 bytes on 64-bit
 * platforms); the Go binding reads the arrays with those strides.
 */
#pragma pack(push, 4)
typedef struct {
	const uint8_t* key;
	int key_length;
} FDBKey;

typedef struct {
	const uint8_t* key;
	int key_length;
	const uint8_t* value;
	int value_length;
} FDBKeyValue;
#pragma pack(pop)

#ifdef __cplusplus
}
#endif

#endif /* FDBREP_FDBSTUB_FDB_C_TYPES_H */
