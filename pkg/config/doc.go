// Package config loads fdbrep's configuration: CouchDB-style ini files
// (sections [chttpd], [chttpd_auth], [jwt_auth], [jwt_keys], [admins],
// [replicator], [replicator.shares], [couch_jobs], [fdb], [log], [node],
// and the fdbrep extensions [users] and [user_roles]) with environment
// overrides. Only '=' separates a key from its value ([jwt_keys] keys
// hold ':'), and a line "key= = value" has a key holding '=', as in
// CouchDB 3.3+.
//
// # Precedence
//
// Load merges, key by key: the registered keys' defaults, then each file in the
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
// Every value of a registered key is checked when loading (type, range,
// allowed words), so a typo in a number or a role fails at startup with an
// error naming the section, key, value and where it came from, wrapping
// ErrInvalidValue. Values of secret keys are never echoed. CouchDB's own
// sections and keys that fdbrep does not use are ignored and listed by
// Warnings, so that a CouchDB local.ini can be used as it is (the keys of
// CouchDB 3.5's [replicator] that fdbrep knows and does not implement,
// NotImplementedKeys, with the reason); CouchDB's "infinity" is read as
// no limit by the keys that take it (OrInfinity). A section or
// key that is neither fdbrep's nor CouchDB's (a typo, most likely) is
// refused with ErrUnknownKey and a suggestion ("did you mean [replicator]
// checkpoint_interval?").
//
// # Declaring a key
//
// A key is declared once, by the package that owns the setting it fills,
// at package initialization: RegisterInt, RegisterDuration, RegisterFloat,
// RegisterBool, RegisterString and RegisterList take its section and name,
// its default (the package's Go constant), its range or words, its doc
// and options (Live for keys changeable at run time, AliasOf, Secret), and
// return a typed setting whose Get reads it from a Config. RegisterCheck
// adds a rule between keys. A declaration that contradicts itself (a
// default out of its range) panics when the package initializes. The
// registry freezes when first read (Keys, Load): a key registered later
// panics too. So a program loads a configuration only with the packages
// that declare its keys linked in; a node's binary links them all
// (cmd/internal/node), and package tests that load other packages' keys
// import those packages for their declarations. This package declares the
// keys it reads itself ([chttpd] bind_address and port, [fdb], [log],
// [node]).
//
// The getters (String, Int, Bool, Float, List, Duration) take a
// registered section and key and return the validated value or its
// default; they panic for a key not registered, which is a programming
// error that the tests catch. docs/CONFIG.md is generated from Keys by
// WriteReference and a test of cmd/internal/node keeps the two in step.
//
// Passwords in [admins] and [users] are returned as written; package
// frontend hashes plaintext ones in memory when it loads them (it does not
// rewrite the file, unlike CouchDB).
package config
