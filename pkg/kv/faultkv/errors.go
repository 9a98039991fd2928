package faultkv

import "errors"

// ErrInvalidOptions is returned (wrapped, with details) for Options that fail
// validation and for a malformed FDBREP_KV_FAULTS.
var ErrInvalidOptions = errors.New("faultkv: invalid options")
