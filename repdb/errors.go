package repdb

import "errors"

// Sentinel errors. Functions wrap them with %w; test with errors.Is.
var (
	// ErrDBNotFound: the database does not exist.
	ErrDBNotFound = errors.New("repdb: database does not exist")
	// ErrDBExists: the database to create exists.
	ErrDBExists = errors.New("repdb: database already exists")
	// ErrDocNotFound: the document never existed (or has no such revision).
	ErrDocNotFound = errors.New("repdb: document missing")
	// ErrDocDeleted: the document's current revision is a deletion.
	ErrDocDeleted = errors.New("repdb: document deleted")
	// ErrConflict: the write's base revision is not a leaf of the
	// document (or a live document is written without one).
	ErrConflict = errors.New("repdb: document update conflict")
	// ErrNotOwner: a user wrote another user's _local document.
	ErrNotOwner = errors.New("repdb: the document belongs to another user")
	// ErrTooLarge: the document, or its revision tree, does not fit in
	// one stored value.
	ErrTooLarge = errors.New("repdb: document too large")
	// ErrBadSequence: a since value that is not one of this store's
	// sequences.
	ErrBadSequence = errors.New("repdb: malformed sequence")
	// ErrBadDoc: a document body that cannot be encoded, an invalid
	// revision path, a replicated _local document, or a state the
	// replicator does not write.
	ErrBadDoc = errors.New("repdb: invalid document")
	// ErrStop, returned by an emit callback of AllDocs or Feed, ends the
	// read without error.
	ErrStop = errors.New("repdb: stop reading")
)
