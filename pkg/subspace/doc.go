// Package subspace divides the key space into regions named by tuple
// prefixes, with the API of the FoundationDB Go binding's package
// bindings/go/src/fdb/subspace.
//
// A Subspace is a raw byte prefix. Keys inside it are the prefix followed by
// a packed tuple, so a Subspace is also a kv.ExactRange holding every such
// key ([prefix+0x00, prefix+0xff)), ready for GetRange and ClearRange:
//
//	jobs := subspace.Sub("fdbrep", "jobs")
//	tr.Set(jobs.Pack(tuple.Tuple{"replication", id}), data)
//	rows := tr.GetRange(jobs.Sub("replication"), kv.RangeOptions{})
//
// Sub and Pack panic, as tuple.Tuple.Pack does, for elements the tuple layer
// cannot encode. Unpack returns an error wrapping ErrNotInSubspace for a key
// outside the subspace, or tuple.ErrMalformed for a key whose suffix is not
// a tuple.
//
// The range of a subspace does not hold the prefix itself, nor keys that
// extend it with a byte 0xff; AllKeys, whose prefix is empty, therefore
// covers the user key space below 0xff and no system key.
package subspace
