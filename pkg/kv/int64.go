package kv

import "encoding/binary"

// Int64 encodes v as the 8-byte little-endian integer that Add and the
// other atomic operations take and produce.
func Int64(v int64) []byte {
	return binary.LittleEndian.AppendUint64(make([]byte, 0, 8), uint64(v))
}

// DecodeInt64 decodes a value written with Int64 or by Add; a missing or
// malformed value (not 8 bytes) counts as 0, as Add counts an absent one.
func DecodeInt64(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(b))
}
