/*
 * fdbrep compile-only stand-in for libfdb_c.
 *
 * Compile-only stand-in, never used at run time; link against the real
 * libfdb_c from FoundationDB's client package in production.
 *
 * Every function declared in include/foundationdb/fdb_c.h is defined here so
 * that cgo can link fdbrep's FoundationDB backend. Each one prints which
 * function was called and aborts the process.
 */
#define FDB_API_VERSION 730
#include <foundationdb/fdb_c.h>

#include <stdio.h>
#include <stdlib.h>

__attribute__((noreturn)) static void fdbstub_abort(const char* fn) {
	fprintf(stderr,
	        "fdbstub: %s called: this libfdb_c is fdbrep's compile-only stand-in and is never "
	        "used at run time; link against the real libfdb_c from FoundationDB's client package\n",
	        fn);
	abort();
}

#define STUB fdbstub_abort(__func__)

const char* fdb_get_error(fdb_error_t code) { (void)code; STUB; }
fdb_bool_t fdb_error_predicate(int predicate_test, fdb_error_t code) { (void)predicate_test; (void)code; STUB; }
fdb_error_t fdb_select_api_version_impl(int runtime_version, int header_version) {
	(void)runtime_version; (void)header_version; STUB;
}
int fdb_get_max_api_version(void) { STUB; }
const char* fdb_get_client_version(void) { STUB; }

fdb_error_t fdb_network_set_option(FDBNetworkOption option, uint8_t const* value, int value_length) {
	(void)option; (void)value; (void)value_length; STUB;
}
fdb_error_t fdb_setup_network(void) { STUB; }
fdb_error_t fdb_run_network(void) { STUB; }
fdb_error_t fdb_stop_network(void) { STUB; }
fdb_error_t fdb_add_network_thread_completion_hook(void (*hook)(void*), void* hook_parameter) {
	(void)hook; (void)hook_parameter; STUB;
}

void fdb_future_cancel(FDBFuture* f) { (void)f; STUB; }
void fdb_future_release_memory(FDBFuture* f) { (void)f; STUB; }
void fdb_future_destroy(FDBFuture* f) { (void)f; STUB; }
fdb_error_t fdb_future_block_until_ready(FDBFuture* f) { (void)f; STUB; }
fdb_bool_t fdb_future_is_ready(FDBFuture* f) { (void)f; STUB; }
fdb_error_t fdb_future_set_callback(FDBFuture* f, FDBCallback callback, void* callback_parameter) {
	(void)f; (void)callback; (void)callback_parameter; STUB;
}
fdb_error_t fdb_future_get_error(FDBFuture* f) { (void)f; STUB; }
fdb_error_t fdb_future_get_int64(FDBFuture* f, int64_t* out) { (void)f; (void)out; STUB; }
fdb_error_t fdb_future_get_uint64(FDBFuture* f, uint64_t* out) { (void)f; (void)out; STUB; }
fdb_error_t fdb_future_get_bool(FDBFuture* f, fdb_bool_t* out) { (void)f; (void)out; STUB; }
fdb_error_t fdb_future_get_key(FDBFuture* f, uint8_t const** out_key, int* out_key_length) {
	(void)f; (void)out_key; (void)out_key_length; STUB;
}
fdb_error_t fdb_future_get_value(FDBFuture* f, fdb_bool_t* out_present, uint8_t const** out_value, int* out_value_length) {
	(void)f; (void)out_present; (void)out_value; (void)out_value_length; STUB;
}
fdb_error_t fdb_future_get_keyvalue_array(FDBFuture* f, FDBKeyValue const** out_kv, int* out_count, fdb_bool_t* out_more) {
	(void)f; (void)out_kv; (void)out_count; (void)out_more; STUB;
}
fdb_error_t fdb_future_get_key_array(FDBFuture* f, FDBKey const** out_key_array, int* out_count) {
	(void)f; (void)out_key_array; (void)out_count; STUB;
}
fdb_error_t fdb_future_get_string_array(FDBFuture* f, const char*** out_strings, int* out_count) {
	(void)f; (void)out_strings; (void)out_count; STUB;
}

fdb_error_t fdb_create_database(const char* cluster_file_path, FDBDatabase** out_database) {
	(void)cluster_file_path; (void)out_database; STUB;
}
fdb_error_t fdb_create_database_from_connection_string(const char* connection_string, FDBDatabase** out_database) {
	(void)connection_string; (void)out_database; STUB;
}
void fdb_database_destroy(FDBDatabase* d) { (void)d; STUB; }
fdb_error_t fdb_database_set_option(FDBDatabase* d, FDBDatabaseOption option, uint8_t const* value, int value_length) {
	(void)d; (void)option; (void)value; (void)value_length; STUB;
}
fdb_error_t fdb_database_open_tenant(FDBDatabase* d, uint8_t const* tenant_name, int tenant_name_length, FDBTenant** out_tenant) {
	(void)d; (void)tenant_name; (void)tenant_name_length; (void)out_tenant; STUB;
}
fdb_error_t fdb_database_create_transaction(FDBDatabase* d, FDBTransaction** out_transaction) {
	(void)d; (void)out_transaction; STUB;
}
FDBFuture* fdb_database_reboot_worker(FDBDatabase* db, uint8_t const* address, int address_length, fdb_bool_t check, int duration) {
	(void)db; (void)address; (void)address_length; (void)check; (void)duration; STUB;
}
FDBFuture* fdb_database_get_client_status(FDBDatabase* db) { (void)db; STUB; }
fdb_error_t fdb_tenant_create_transaction(FDBTenant* tenant, FDBTransaction** out_transaction) {
	(void)tenant; (void)out_transaction; STUB;
}
void fdb_tenant_destroy(FDBTenant* tenant) { (void)tenant; STUB; }

void fdb_transaction_destroy(FDBTransaction* tr) { (void)tr; STUB; }
void fdb_transaction_cancel(FDBTransaction* tr) { (void)tr; STUB; }
fdb_error_t fdb_transaction_set_option(FDBTransaction* tr, FDBTransactionOption option, uint8_t const* value, int value_length) {
	(void)tr; (void)option; (void)value; (void)value_length; STUB;
}
void fdb_transaction_set_read_version(FDBTransaction* tr, int64_t version) { (void)tr; (void)version; STUB; }
FDBFuture* fdb_transaction_get_read_version(FDBTransaction* tr) { (void)tr; STUB; }
FDBFuture* fdb_transaction_get(FDBTransaction* tr, uint8_t const* key_name, int key_name_length, fdb_bool_t snapshot) {
	(void)tr; (void)key_name; (void)key_name_length; (void)snapshot; STUB;
}
FDBFuture* fdb_transaction_get_key(FDBTransaction* tr, uint8_t const* key_name, int key_name_length, fdb_bool_t or_equal, int offset, fdb_bool_t snapshot) {
	(void)tr; (void)key_name; (void)key_name_length; (void)or_equal; (void)offset; (void)snapshot; STUB;
}
FDBFuture* fdb_transaction_get_addresses_for_key(FDBTransaction* tr, uint8_t const* key_name, int key_name_length) {
	(void)tr; (void)key_name; (void)key_name_length; STUB;
}
FDBFuture* fdb_transaction_get_range(FDBTransaction* tr,
                                     uint8_t const* begin_key_name, int begin_key_name_length,
                                     fdb_bool_t begin_or_equal, int begin_offset,
                                     uint8_t const* end_key_name, int end_key_name_length,
                                     fdb_bool_t end_or_equal, int end_offset,
                                     int limit, int target_bytes, FDBStreamingMode mode, int iteration,
                                     fdb_bool_t snapshot, fdb_bool_t reverse) {
	(void)tr; (void)begin_key_name; (void)begin_key_name_length; (void)begin_or_equal; (void)begin_offset;
	(void)end_key_name; (void)end_key_name_length; (void)end_or_equal; (void)end_offset;
	(void)limit; (void)target_bytes; (void)mode; (void)iteration; (void)snapshot; (void)reverse;
	STUB;
}
FDBFuture* fdb_transaction_get_estimated_range_size_bytes(FDBTransaction* tr,
                                                          uint8_t const* begin_key_name, int begin_key_name_length,
                                                          uint8_t const* end_key_name, int end_key_name_length) {
	(void)tr; (void)begin_key_name; (void)begin_key_name_length; (void)end_key_name; (void)end_key_name_length;
	STUB;
}
FDBFuture* fdb_transaction_get_range_split_points(FDBTransaction* tr,
                                                  uint8_t const* begin_key_name, int begin_key_name_length,
                                                  uint8_t const* end_key_name, int end_key_name_length,
                                                  int64_t chunk_size) {
	(void)tr; (void)begin_key_name; (void)begin_key_name_length; (void)end_key_name; (void)end_key_name_length;
	(void)chunk_size;
	STUB;
}
void fdb_transaction_set(FDBTransaction* tr, uint8_t const* key_name, int key_name_length, uint8_t const* value, int value_length) {
	(void)tr; (void)key_name; (void)key_name_length; (void)value; (void)value_length; STUB;
}
void fdb_transaction_atomic_op(FDBTransaction* tr, uint8_t const* key_name, int key_name_length,
                               uint8_t const* param, int param_length, FDBMutationType operation_type) {
	(void)tr; (void)key_name; (void)key_name_length; (void)param; (void)param_length; (void)operation_type; STUB;
}
void fdb_transaction_clear(FDBTransaction* tr, uint8_t const* key_name, int key_name_length) {
	(void)tr; (void)key_name; (void)key_name_length; STUB;
}
void fdb_transaction_clear_range(FDBTransaction* tr, uint8_t const* begin_key_name, int begin_key_name_length,
                                 uint8_t const* end_key_name, int end_key_name_length) {
	(void)tr; (void)begin_key_name; (void)begin_key_name_length; (void)end_key_name; (void)end_key_name_length; STUB;
}
FDBFuture* fdb_transaction_watch(FDBTransaction* tr, uint8_t const* key_name, int key_name_length) {
	(void)tr; (void)key_name; (void)key_name_length; STUB;
}
FDBFuture* fdb_transaction_commit(FDBTransaction* tr) { (void)tr; STUB; }
fdb_error_t fdb_transaction_get_committed_version(FDBTransaction* tr, int64_t* out_version) {
	(void)tr; (void)out_version; STUB;
}
FDBFuture* fdb_transaction_get_approximate_size(FDBTransaction* tr) { (void)tr; STUB; }
FDBFuture* fdb_transaction_get_versionstamp(FDBTransaction* tr) { (void)tr; STUB; }
FDBFuture* fdb_transaction_on_error(FDBTransaction* tr, fdb_error_t error) { (void)tr; (void)error; STUB; }
void fdb_transaction_reset(FDBTransaction* tr) { (void)tr; STUB; }
fdb_error_t fdb_transaction_add_conflict_range(FDBTransaction* tr, uint8_t const* begin_key_name, int begin_key_name_length,
                                               uint8_t const* end_key_name, int end_key_name_length, FDBConflictRangeType type) {
	(void)tr; (void)begin_key_name; (void)begin_key_name_length; (void)end_key_name; (void)end_key_name_length; (void)type;
	STUB;
}
