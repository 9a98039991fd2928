package subspace

import "errors"

// ErrNotInSubspace is returned by Unpack for a key that does not start with
// the subspace's prefix.
var ErrNotInSubspace = errors.New("subspace: key is not in subspace")
