package tuple

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them with
// details; test with errors.Is.
var (
	// ErrUnsupportedType is returned (or raised by Pack) for an element of a
	// type the tuple layer cannot encode.
	ErrUnsupportedType = errors.New("tuple: unsupported element type")
	// ErrIntegerTooLarge is returned for an integer whose magnitude needs
	// more than 255 bytes.
	ErrIntegerTooLarge = errors.New("tuple: integer magnitude exceeds 255 bytes")
	// ErrIncompleteVersionstamp is returned by TryPack (and raised by Pack)
	// for a tuple holding an incomplete versionstamp; pack it with
	// PackWithVersionstamp.
	ErrIncompleteVersionstamp = errors.New("tuple: incomplete versionstamp in a plain pack; use PackWithVersionstamp")
	// ErrNoIncompleteVersionstamp is returned by PackWithVersionstamp for a
	// tuple without an incomplete versionstamp.
	ErrNoIncompleteVersionstamp = errors.New("tuple: no incomplete versionstamp in a pack with versionstamp")
	// ErrMultipleVersionstamps is returned for a tuple holding more than one
	// incomplete versionstamp.
	ErrMultipleVersionstamps = errors.New("tuple: more than one incomplete versionstamp")
	// ErrMalformed is returned by Unpack for bytes that are not a valid
	// tuple encoding.
	ErrMalformed = errors.New("tuple: malformed encoding")
)
