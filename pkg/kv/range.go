package kv

// Range is a range of keys given by two selectors: reads return keys k with
// begin <= k < end once both selectors are resolved.
type Range interface {
	FDBRangeKeySelectors() (begin, end Selectable)
}

// ExactRange is a range given by two exact keys, begin inclusive and end
// exclusive. Clears and conflict ranges take an ExactRange.
type ExactRange interface {
	FDBRangeKeys() (begin, end KeyConvertible)
	Range
}

// KeyRange is the ExactRange [Begin, End).
type KeyRange struct {
	Begin, End KeyConvertible
}

// FDBRangeKeys returns the bounds of r.
func (r KeyRange) FDBRangeKeys() (KeyConvertible, KeyConvertible) { return r.Begin, r.End }

// FDBRangeKeySelectors returns selectors for the first key >= Begin and the
// first key >= End.
func (r KeyRange) FDBRangeKeySelectors() (Selectable, Selectable) {
	return FirstGreaterOrEqual(r.Begin), FirstGreaterOrEqual(r.End)
}

// SelectorRange is a Range given by two key selectors.
type SelectorRange struct {
	Begin, End Selectable
}

// FDBRangeKeySelectors returns the selectors of r.
func (r SelectorRange) FDBRangeKeySelectors() (Selectable, Selectable) { return r.Begin, r.End }

// PrefixRange returns the range of every key that starts with prefix. It
// fails when prefix is empty or consists only of 0xff bytes.
func PrefixRange(prefix []byte) (KeyRange, error) {
	end, err := Strinc(prefix)
	if err != nil {
		return KeyRange{}, err
	}
	begin := make(Key, len(prefix))
	copy(begin, prefix)
	return KeyRange{Begin: begin, End: end}, nil
}

// StreamingMode tells a range read how eagerly to fetch batches. Backends
// may ignore it; results do not depend on it.
type StreamingMode int

// Streaming modes, as in FoundationDB.
const (
	StreamingModeIterator StreamingMode = iota // growing batches; the default
	StreamingModeWantAll                       // the whole range at once
	StreamingModeExact                         // exactly Limit rows
	StreamingModeSmall
	StreamingModeMedium
	StreamingModeLarge
	StreamingModeSerial
)

// RowLimitUnlimited is FoundationDB's row limit that means none: a range
// read with Limit -1 returns every row, as one with Limit 0 does.
const RowLimitUnlimited = -1

// RangeOptions tune a range read. The zero value reads every key in order.
type RangeOptions struct {
	// Limit is the maximum number of key-value pairs returned; 0 (or
	// RowLimitUnlimited) means no limit, and a limit below
	// RowLimitUnlimited fails with range_limits_invalid (2012), as on
	// FoundationDB.
	Limit int
	// Mode is a hint for how many rows to fetch per round trip.
	Mode StreamingMode
	// Reverse returns keys in descending order. With a Limit, the keys
	// returned are the last ones of the range.
	Reverse bool
}

// RangeResult is the lazy result of a range read. Nothing is read until one
// of its methods is called.
type RangeResult interface {
	// GetSliceWithError reads the whole result.
	GetSliceWithError() ([]KeyValue, error)
	// GetSliceOrPanic reads the whole result and panics with the error, which
	// a retry loop turns back into an error.
	GetSliceOrPanic() []KeyValue
	// Iterator streams the result in batches, so a large range need not be
	// held in memory.
	Iterator() RangeIterator
}

// RangeIterator streams a range read:
//
//	it := tr.GetRange(r, kv.RangeOptions{}).Iterator()
//	for it.Advance() {
//		kv, err := it.Get()
//		...
//	}
type RangeIterator interface {
	// Advance moves to the next entry and reports whether there is one. It
	// also returns true when the next read failed, so that Get reports the
	// error.
	Advance() bool
	// Get returns the current entry, or the error that stopped the read.
	Get() (KeyValue, error)
	// MustGet is Get that panics on error.
	MustGet() KeyValue
}
