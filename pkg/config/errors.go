package config

import "errors"

// Sentinel errors. Load and the getters wrap them with %w and the section,
// key and offending value (never the value of a secret: see Secret).
var (
	// ErrInvalidValue is returned for a value that does not parse as its
	// key's type or lies outside the key's range.
	ErrInvalidValue = errors.New("config: invalid value")
	// ErrUnknownKey is returned by the getters for a key that is not in the
	// registry (a programming error), and by Load for an environment
	// override naming an unknown section.
	ErrUnknownKey = errors.New("config: unknown key")
	// ErrFile is returned when a config file cannot be read or parsed.
	ErrFile = errors.New("config: cannot read file")
)

// Errors of changes made at run time (CheckRuntimeKey).
var (
	// ErrRestartOnly is returned for a key that is read at start-up only
	// and so cannot be changed through the _config API.
	ErrRestartOnly = errors.New("config: read at start-up only")
	// ErrNotUsed is returned for a CouchDB section or key that fdbrep does
	// not use.
	ErrNotUsed = errors.New("config: not used by fdbrep")
)
