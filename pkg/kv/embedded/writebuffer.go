package embedded

import (
	"bytes"

	"github.com/tidwall/btree"
)

// entryKind is what a transaction knows about a key it wrote.
type entryKind uint8

const (
	entValue      entryKind = iota // set to val
	entAbsent                      // cleared
	entOps                         // atomic ops on top of the stored value
	entUnreadable                  // set to a versionstamped value
)

// wentry is a key in a transaction's write buffer.
type wentry struct {
	key  []byte
	kind entryKind
	val  []byte
	ops  []mutation
}

// resolve returns the value the transaction sees at e's key, given the
// stored value (base, present).
func (e *wentry) resolve(base []byte, present bool) ([]byte, bool, error) {
	switch e.kind {
	case entValue:
		return clone(e.val), true, nil
	case entAbsent:
		return nil, false, nil
	case entUnreadable:
		return nil, false, errUnreadable
	}
	v := base
	for _, m := range e.ops {
		v, present = applyAtomic(m.op, v, present, m.param)
	}
	if !present {
		return nil, false, nil
	}
	return clone(v), true, nil
}

// writeBuffer holds a transaction's uncommitted writes twice over, as
// pebble's indexed Batch and FoundationDB's write map do: as the mutation
// log that the commit leader replays in order, and as an index of what the
// writes do to each key, which reads merge with the snapshot
// (read-your-writes).
//
// The zero value is an empty buffer. A writeBuffer neither validates keys
// nor locks: the transaction does both. It keeps the slices it is given.
type writeBuffer struct {
	entries    *btree.BTreeG[*wentry] // written keys, by key; nil until the first
	clears     *btree.BTreeG[span]    // cleared ranges, disjoint; nil until the first
	unreadable []span                 // where pending versionstamped keys may land
	muts       []mutation             // the mutation log, in order
	atomic     bool                   // muts holds an atomic operation
	size       int                    // bytes of keys and operands in muts
}

// empty reports whether nothing was written.
func (b *writeBuffer) empty() bool { return len(b.muts) == 0 }

// log appends m to the mutation log.
func (b *writeBuffer) log(m mutation) {
	if b.muts == nil {
		b.muts = make([]mutation, 0, 4)
	}
	b.muts = append(b.muts, m)
	b.size += len(m.key) + len(m.param)
	if m.op.isAtomic() {
		b.atomic = true
	}
}

// set records a set of k to v.
func (b *writeBuffer) set(k, v []byte) {
	b.log(mutation{op: opSet, key: k, param: v})
	b.put(&wentry{key: k, kind: entValue, val: v})
}

// clear records a clear of k.
func (b *writeBuffer) clear(k []byte) {
	b.log(mutation{op: opClear, key: k})
	b.put(&wentry{key: k, kind: entAbsent})
}

// clearRange records a clear of [begin, end), which is not empty: it drops
// the entries inside and merges the range with the cleared ranges that
// overlap it or start where it ends.
func (b *writeBuffer) clearRange(begin, end []byte) {
	b.log(mutation{op: opClearRange, key: begin, param: end})
	if b.entries != nil {
		var drop []*wentry
		b.entries.Ascend(&wentry{key: begin}, func(w *wentry) bool {
			if bytes.Compare(w.key, end) >= 0 {
				return false
			}
			drop = append(drop, w)
			return true
		})
		for _, w := range drop {
			b.entries.Delete(w)
		}
	}
	if b.clears == nil {
		b.clears = btree.NewBTreeGOptions(func(x, y span) bool { return bytes.Compare(x.begin, y.begin) < 0 },
			btree.Options{NoLocks: true})
	}
	merged := span{begin, end}
	if c, ok := b.clearAt(begin); ok {
		merged.begin = c.begin
		if bytes.Compare(c.end, merged.end) > 0 {
			merged.end = c.end
		}
	}
	var drop []span
	b.clears.Ascend(span{begin: merged.begin}, func(s span) bool {
		if bytes.Compare(s.begin, merged.end) > 0 {
			return false
		}
		drop = append(drop, s)
		if bytes.Compare(s.end, merged.end) > 0 {
			merged.end = s.end
		}
		return true
	})
	for _, s := range drop {
		b.clears.Delete(s)
	}
	b.clears.Set(merged)
}

// atomicOp records the atomic operation op on k with param. On a key whose
// value the buffer knows (set or cleared) it computes the new value at
// once; otherwise it stacks the operation on the stored value.
func (b *writeBuffer) atomicOp(op opType, k, param []byte) {
	m := mutation{op: op, key: k, param: param}
	b.log(m)
	e := b.entry(k)
	if e == nil {
		if _, ok := b.clearAt(k); ok {
			e = &wentry{key: k, kind: entAbsent}
		} else {
			e = &wentry{key: k, kind: entOps}
		}
		b.put(e)
	}
	switch e.kind {
	case entValue, entAbsent:
		v, exists := applyAtomic(op, e.val, e.kind == entValue, param)
		if exists {
			e.kind, e.val = entValue, v
		} else {
			e.kind, e.val = entAbsent, nil
		}
	case entOps:
		e.ops = append(e.ops, m)
	}
}

// setVersionstampedKey records a SetVersionstampedKey of k (the operand
// without its offset; the stamp goes at pos) to value. Its final key lands
// somewhere in lands, which becomes unreadable.
func (b *writeBuffer) setVersionstampedKey(k, value []byte, pos int, lands span) {
	b.unreadable = append(b.unreadable, lands)
	b.log(mutation{op: opVersionstampedKey, key: k, param: value, pos: pos})
}

// setVersionstampedValue records a SetVersionstampedValue of k to v (the
// operand without its offset; the stamp goes at pos). k becomes unreadable.
func (b *writeBuffer) setVersionstampedValue(k, v []byte, pos int) {
	b.log(mutation{op: opVersionstampedValue, key: k, param: v, pos: pos})
	b.put(&wentry{key: k, kind: entUnreadable})
}

// entry returns the entry of k, or nil.
func (b *writeBuffer) entry(k []byte) *wentry {
	if b.entries == nil {
		return nil
	}
	e, ok := b.entries.Get(&wentry{key: k})
	if !ok {
		return nil
	}
	return e
}

func (b *writeBuffer) put(e *wentry) {
	if b.entries == nil {
		b.entries = btree.NewBTreeGOptions(func(x, y *wentry) bool { return bytes.Compare(x.key, y.key) < 0 },
			btree.Options{NoLocks: true})
	}
	b.entries.Set(e)
}

// clearAt returns the cleared range that holds k.
func (b *writeBuffer) clearAt(k []byte) (span, bool) {
	if b.clears == nil {
		return span{}, false
	}
	var found span
	ok := false
	b.clears.Descend(span{begin: k}, func(s span) bool {
		if bytes.Compare(k, s.end) < 0 {
			found, ok = s, true
		}
		return false
	})
	return found, ok
}

// unreadableOverlaps reports whether a pending versionstamped key may land
// in [begin, end).
func (b *writeBuffer) unreadableOverlaps(begin, end []byte) bool {
	for _, u := range b.unreadable {
		if bytes.Compare(u.begin, end) < 0 && bytes.Compare(begin, u.end) < 0 {
			return true
		}
	}
	return false
}

// entryCursor walks the entries of a writeBuffer in [begin, end), in order
// or in reverse. It must not be copied once initialized.
type entryCursor struct {
	it         btree.IterG[*wentry]
	begin, end []byte
	reverse    bool
	ok         bool // the cursor is at an entry of the range
}

// init positions c at the first entry of [begin, end) of b in c's
// direction. The caller must call release.
func (c *entryCursor) init(b *writeBuffer, begin, end []byte, reverse bool) {
	c.begin, c.end, c.reverse = begin, end, reverse
	if b.entries == nil {
		return
	}
	c.it = b.entries.Iter()
	if reverse {
		if c.it.Seek(&wentry{key: end}) {
			c.ok = c.it.Prev()
		} else {
			c.ok = c.it.Last()
		}
		c.ok = c.ok && bytes.Compare(c.it.Item().key, begin) >= 0
		return
	}
	c.ok = c.it.Seek(&wentry{key: begin}) && bytes.Compare(c.it.Item().key, end) < 0
}

// entry returns the entry c is at; c.ok must be true.
func (c *entryCursor) entry() *wentry { return c.it.Item() }

// next moves c to the next entry of its range in its direction.
func (c *entryCursor) next() {
	if c.reverse {
		c.ok = c.it.Prev() && bytes.Compare(c.it.Item().key, c.begin) >= 0
		return
	}
	c.ok = c.it.Next() && bytes.Compare(c.it.Item().key, c.end) < 0
}

func (c *entryCursor) release() { c.it.Release() }
