package embedded

import (
	"bytes"
	"slices"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Conflict ranges: the read conflict ranges that reads add (unless they
// are snapshot reads), the write conflict ranges that writes add, and the
// explicit ones of the Add…Conflict… methods. Commit coalesces both sets
// and hands them to the resolver.

func (tr *transaction) AddReadConflictKey(key kv.KeyConvertible) error {
	k := key.FDBKey()
	return tr.addConflictRange(kv.KeyRange{Begin: kv.Key(k), End: kv.Key(keyAfter(k))}, false)
}

func (tr *transaction) AddReadConflictRange(r kv.ExactRange) error {
	return tr.addConflictRange(r, false)
}

func (tr *transaction) AddWriteConflictKey(key kv.KeyConvertible) error {
	k := key.FDBKey()
	return tr.addConflictRange(kv.KeyRange{Begin: kv.Key(k), End: kv.Key(keyAfter(k))}, true)
}

func (tr *transaction) AddWriteConflictRange(r kv.ExactRange) error {
	return tr.addConflictRange(r, true)
}

// addConflictRange adds r to the read or the write conflict ranges; an
// empty range adds nothing.
func (tr *transaction) addConflictRange(r kv.ExactRange, write bool) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err := tr.usable(false); err != nil {
		return err
	}
	b, e, err := exactRange(r)
	if err != nil || bytes.Compare(b, e) >= 0 {
		return err
	}
	if write {
		tr.addWrite(span{b, e})
	} else {
		tr.reads = append(tr.reads, span{b, e})
	}
	return nil
}

// addRead adds the read conflict range [b, e), copying its keys.
func (tr *transaction) addRead(b, e []byte) {
	tr.reads = append(tr.reads, span{clone(b), clone(e)})
}

// addReadKey adds the read conflict range of the single key k.
func (tr *transaction) addReadKey(k []byte) {
	e := keyAfter(k)
	tr.reads = append(tr.reads, span{e[:len(k):len(k)], e})
}

// addWrite adds the write conflict range s, whose keys it keeps.
func (tr *transaction) addWrite(s span) {
	if tr.wconf == nil {
		tr.wconf = make([]span, 0, 4)
	}
	tr.wconf = append(tr.wconf, s)
}

// coalesce sorts spans and merges those that overlap or touch.
func coalesce(in []span) []span {
	if len(in) <= 1 {
		return in
	}
	slices.SortFunc(in, func(a, b span) int { return bytes.Compare(a.begin, b.begin) })
	out := in[:1]
	for _, s := range in[1:] {
		last := &out[len(out)-1]
		if bytes.Compare(s.begin, last.end) <= 0 {
			if bytes.Compare(s.end, last.end) > 0 {
				last.end = s.end
			}
			continue
		}
		out = append(out, s)
	}
	return out
}
