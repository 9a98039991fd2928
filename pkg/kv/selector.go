package kv

// Selectable is anything that can be resolved to a KeySelector.
type Selectable interface {
	FDBKeySelector() KeySelector
}

// KeySelector selects a key relative to a reference key, as FoundationDB's
// key selectors do: first the last key that is less than Key (or less than
// or equal to it when OrEqual is set) is found, then Offset moves forward
// (positive) or backward (zero or negative) from it. The four constructors
// below cover every common case.
type KeySelector struct {
	Key     KeyConvertible
	OrEqual bool
	Offset  int
}

// FDBKeySelector returns s itself.
func (s KeySelector) FDBKeySelector() KeySelector { return s }

// Add returns s moved by offset keys.
func (s KeySelector) Add(offset int) KeySelector {
	s.Offset += offset
	return s
}

// FirstGreaterOrEqual selects the first key greater than or equal to key.
func FirstGreaterOrEqual(key KeyConvertible) KeySelector {
	return KeySelector{Key: key, OrEqual: false, Offset: 1}
}

// FirstGreaterThan selects the first key greater than key.
func FirstGreaterThan(key KeyConvertible) KeySelector {
	return KeySelector{Key: key, OrEqual: true, Offset: 1}
}

// LastLessOrEqual selects the last key less than or equal to key.
func LastLessOrEqual(key KeyConvertible) KeySelector {
	return KeySelector{Key: key, OrEqual: true, Offset: 0}
}

// LastLessThan selects the last key less than key.
func LastLessThan(key KeyConvertible) KeySelector {
	return KeySelector{Key: key, OrEqual: false, Offset: 0}
}
