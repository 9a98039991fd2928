// Package tuple is FoundationDB's tuple layer: it encodes ordered lists of
// typed values as keys whose byte order is the order of the values, so that
// a range read over a tuple prefix returns every key below it, in order.
//
// The encoding is byte-for-byte FoundationDB's (the format every FDB
// binding shares, checked against the Go binding's golden vectors), and the
// API has the shape of the FDB Go binding's package
// bindings/go/src/fdb/tuple, so keys written by fdbrep on the embedded
// backend are the keys FDB tools and other bindings expect:
//
//	key := tuple.Tuple{"jobs", "replication", int64(42)}.Pack()
//	t, err := tuple.Unpack(key) // Tuple{"jobs", "replication", int64(42)}
//
// # Types
//
// Pack accepts these element types, with FDB's type codes:
//
//   - nil (0x00)
//   - []byte (0x01), and any kv.KeyConvertible other than Tuple, such as
//     kv.Key, packed as its key bytes
//   - string (0x02), packed as its bytes; it is not checked for UTF-8
//   - Tuple, nested (0x05)
//   - int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
//     *big.Int and big.Int (0x0b to 0x1d): integers of any size up to 255
//     bytes of magnitude, all ordered numerically whatever their Go type
//   - float32 (0x20) and float64 (0x21), in FDB's order-preserving encoding:
//     -NaN < -Inf < negative < -0 < +0 < positive < +Inf < NaN
//   - bool (0x26 false, 0x27 true)
//   - UUID (0x30)
//   - Versionstamp (0x33), complete or incomplete
//
// Elements of different types order by type code in the list above. Within
// a type, byte strings and strings order bytewise, a nested tuple orders as
// a tuple, and a tuple orders before every tuple it is a proper prefix of.
//
// Unpack normalizes types as the FDB binding does: integers come back as
// int64 when they fit, as uint64 when they are positive and fit in it, and
// as *big.Int otherwise; byte strings as []byte; strings as string.
//
// # Failures
//
// Pack, FDBKey and the range methods panic, as FDB's Pack does, when an
// element has an unsupported type, an integer is too large, or the tuple
// holds an incomplete versionstamp; use TryPack to get an error instead.
// Unpack returns an error wrapping ErrMalformed for bytes that are not a
// valid encoding and never panics.
//
// # Versionstamps
//
// A tuple holding one IncompleteVersionstamp is packed with
// PackWithVersionstamp, which appends the 4-byte little-endian offset of the
// versionstamp (FDB API version 520 and later) for
// kv.Transaction.SetVersionstampedKey; the commit fills in the transaction
// version.
//
// # Known layouts
//
// For a record whose layout the caller knows and reads or writes in a hot
// path, the Append functions (AppendInt, AppendBytes, AppendString, ...)
// write its elements one by one into a buffer, and a Reader reads them
// back, each as the type expected, without building a Tuple or boxing its
// elements: the bytes are Pack's. AppendPack packs a Tuple after a prefix
// in one allocation.
package tuple
