// Package config loads fdbrep's configuration: CouchDB-style ini files
// (sections [chttpd], [chttpd_auth], [admins], [replicator],
// [replicator.shares], [couch_jobs], [fdb], [log], [node], and the fdbrep
// extensions [users] and [user_roles]) with environment overrides.
//
// # Precedence
//
// Load merges, key by key: the defaults in Registry, then each file in the
// order given (later files win, as CouchDB's default.ini and local.ini),
// then environment variables named FDBREP_<SECTION>__<KEY> (upper case,
// dots in section names become single underscores):
//
//	FDBREP_REPLICATOR__MAX_JOBS=100
//	FDBREP_CHTTPD__PORT=5984
//	FDBREP_ADMINS__ADMIN=secret      (user names from the environment are lower case)
//	FDBREP_REPLICATOR_SHARES___REPLICATOR=200
//
// # Validation
//
// Every value of a key in Registry is checked when loading (type, range,
// allowed words), so a typo in a number or a role fails at startup with an
// error naming the section, key, value and where it came from, wrapping
// ErrInvalidValue. Values of secret keys are never echoed. CouchDB's own
// sections and keys that fdbrep does not use are ignored and listed by
// Warnings, so that a CouchDB local.ini can be used as it is; a section or
// key that is neither fdbrep's nor CouchDB's (a typo, most likely) is
// refused with ErrUnknownKey and a suggestion ("did you mean [replicator]
// checkpoint_interval?").
//
// The getters (String, Int, Bool, Float, List) take a registered section
// and key and return the validated value or its default; they panic for a
// key missing from Registry, which is a programming error that the package
// tests catch. docs/CONFIG.md is generated from Registry by
// WriteReference and a test keeps the two in step.
//
// Passwords in [admins] and [users] are returned as written; package
// frontend hashes plaintext ones in memory when it loads them (it does not
// rewrite the file, unlike CouchDB).
package config
