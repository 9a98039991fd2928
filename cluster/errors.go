package cluster

import "errors"

// Sentinel errors; functions wrap them with %w and details.
var (
	// ErrInvalidOptions is returned by New for unusable Options.
	ErrInvalidOptions = errors.New("cluster: invalid options")
	// ErrTooMany is returned by Update when a layer would hold more than
	// SettingsMax settings.
	ErrTooMany = errors.New("cluster: too many runtime settings")
	// ErrTooLarge is returned by Update for a name or value over
	// ValueMaxBytes.
	ErrTooLarge = errors.New("cluster: runtime setting too large")
	// ErrCorrupt is returned for a stored record that does not decode
	// (reported with %v elsewhere, so it never looks retryable).
	ErrCorrupt = errors.New("cluster: corrupt record")
)
