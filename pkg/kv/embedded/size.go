package embedded

import (
	"bytes"

	"github.com/tidwall/btree"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// The size of a transaction, for transaction_too_large, counted exactly as
// FoundationDB 7.3's client counts it when it commits
// (Transaction::getSize in NativeAPI): the mutations, read conflict ranges
// and write conflict ranges of the commit request, each entry with its
// in-memory overhead (kv.MutationOverhead, kv.ConflictRangeOverhead) plus
// its keys and parameter.
//
// The mutations are not the calls the transaction made but what
// FoundationDB's read-your-writes layer sends (writeRangeToNativeTransaction
// over its WriteMap): one clear per maximal cleared range (point clears
// included, adjacent clears merged), then for each written key its
// operation stack, in which a set replaces what came before, an atomic
// operation on a known value becomes a set, and consecutive atomic
// operations of one kind merge (WriteMap::coalesceOver). sizeModel replays
// the mutation log into that shape. A commit counts it only near a limit:
// below, transactionSizeAtMost's bound stands for it (the exact size
// matters only where it decides a failure).

// fop is one operation of a key's stack: a set (present false: a clear
// of the key), an atomic operation, or a versionstamped value.
type fop struct {
	op      opType
	param   []byte
	present bool
}

type fkey struct {
	key        []byte
	stack      []fop
	unreadable bool   // a versionstamped value: later writes stack up
	first      [1]fop // stack's first backing array: one allocation per key
}

// newFkey is the entry of key with the one operation o.
func newFkey(key []byte, o fop, unreadable bool) *fkey {
	f := &fkey{key: key, unreadable: unreadable, first: [1]fop{o}}
	f.stack = f.first[:]
	return f
}

type sizeModel struct {
	keys   *btree.BTreeG[*fkey]
	clears *btree.BTreeG[span] // cleared ranges by begin, disjoint and not touching
	extra  int                 // versionstamped keys, which FoundationDB sends as they are
	probe  fkey                // the search key of lookups, reused
}

// get returns key's entry, if any.
func (m *sizeModel) get(key []byte) (*fkey, bool) {
	m.probe.key = key
	e, ok := m.keys.Get(&m.probe)
	m.probe.key = nil
	return e, ok
}

// transactionSize returns the size FoundationDB counts for a commit of muts
// with the given coalesced read and write conflict ranges.
func transactionSize(muts []mutation, reads, writes []span) int {
	return conflictRangesSize(reads, writes) + mutationsSize(muts)
}

// conflictRangesSize is the conflict ranges' part of transactionSize.
func conflictRangesSize(reads, writes []span) int {
	size := 0
	for _, ranges := range [2][]span{reads, writes} {
		for _, r := range ranges {
			size += kv.ConflictRangeOverhead + len(r.begin) + len(r.end)
		}
	}
	return size
}

// transactionSizeAtMost is at least transactionSize(muts, reads, writes)
// without replaying the mutations: each counted as if it did not coalesce,
// its key twice (a clear of [key, key\x00)) and its operand whole (a
// coalesced operand is no longer than its operands together). A commit
// whose bound is under every limit needs no exact size.
func transactionSizeAtMost(muts []mutation, reads, writes []span) int {
	size := conflictRangesSize(reads, writes)
	for _, mu := range muts {
		size += kv.MutationOverhead + 2*len(mu.key) + len(mu.param) + 4
	}
	return size
}

// mutationsSize is the mutations' part of transactionSize.
func mutationsSize(muts []mutation) int {
	if len(muts) == 0 {
		return 0
	}
	m := &sizeModel{
		keys: btree.NewBTreeGOptions(func(a, b *fkey) bool { return bytes.Compare(a.key, b.key) < 0 },
			btree.Options{NoLocks: true}),
		clears: btree.NewBTreeGOptions(func(a, b span) bool { return bytes.Compare(a.begin, b.begin) < 0 },
			btree.Options{NoLocks: true}),
	}
	for _, mu := range muts {
		m.apply(mu)
	}
	size := m.extra
	m.clears.Scan(func(c span) bool {
		size += kv.MutationOverhead + len(c.begin) + len(c.end)
		return true
	})
	m.keys.Scan(func(e *fkey) bool {
		for _, o := range e.stack {
			switch {
			case o.op == opSet && !o.present:
				size += kv.MutationOverhead + 2*len(e.key) + 1 // clear of [key, key\x00)
			case o.op == opVersionstampedValue:
				size += kv.MutationOverhead + len(e.key) + len(o.param) + 4 // the offset is sent
			default:
				size += kv.MutationOverhead + len(e.key) + len(o.param)
			}
		}
		return true
	})
	return size
}

func (m *sizeModel) apply(mu mutation) {
	switch mu.op {
	case opSet, opVersionstampedValue:
		e, ok := m.get(mu.key)
		o := fop{op: mu.op, param: mu.param, present: true}
		if ok && e.unreadable {
			e.stack = append(e.stack, o)
			return
		}
		m.keys.Set(newFkey(mu.key, o, mu.op == opVersionstampedValue))
	case opClear:
		m.clear(mu.key, keyAfter(mu.key))
	case opClearRange:
		m.clear(mu.key, mu.param)
	case opVersionstampedKey:
		m.extra += kv.MutationOverhead + len(mu.key) + 4 + len(mu.param)
	default:
		m.atomic(mu)
	}
}

// atomic stacks an atomic operation as WriteMap::mutate does.
func (m *sizeModel) atomic(mu mutation) {
	o := fop{op: mu.op, param: mu.param, present: true}
	e, ok := m.get(mu.key)
	switch {
	case !ok && m.cleared(mu.key):
		m.keys.Set(newFkey(mu.key, coalesceOps(fop{op: opSet}, o), false))
	case !ok:
		m.keys.Set(newFkey(mu.key, o, false))
	case e.unreadable:
		e.stack = append(e.stack, o)
	default:
		e.stack = coalesceOver(e.stack, o)
	}
}

// nonAssociative are the operations FoundationDB does not merge when the
// operands differ in length (MutationRef::NON_ASSOCIATIVE_MASK; the
// embedded store's Min is FoundationDB's MinV2).
func nonAssociative(op opType) bool {
	switch op {
	case opAdd, opBitOr, opBitXor, opMax, opMin, opCompareAndClear, opVersionstampedKey, opVersionstampedValue:
		return true
	}
	return false
}

// stackAtomic reports whether op counts as atomic in a stack: versionstamped
// values do (MutationRef::ATOMIC_MASK).
func stackAtomic(op opType) bool { return op.isAtomic() || op == opVersionstampedValue }

// coalesceOver puts o on a stack as WriteMap::coalesceOver does.
func coalesceOver(stack []fop, o fop) []fop {
	top := stack[len(stack)-1]
	switch {
	case top.op == o.op && o.op != opCompareAndClear:
		if nonAssociative(o.op) && len(top.param) != len(o.param) {
			return append(stack, o)
		}
	case stackAtomic(o.op) && stackAtomic(top.op):
		return append(stack, o)
	}
	stack[len(stack)-1] = coalesceOps(top, o)
	return stack
}

// coalesceOps merges o into the operation before it (WriteMap::coalesce): on
// a set it computes the new value; on the same operation it merges the
// operands.
func coalesceOps(prev, o fop) fop {
	if prev.op == opSet {
		v, exists := applyAtomic(o.op, prev.param, prev.present, o.param)
		return fop{op: opSet, param: v, present: exists}
	}
	v, _ := applyAtomic(o.op, prev.param, true, o.param)
	return fop{op: o.op, param: v, present: true}
}

// cleared reports whether k lies in a cleared range.
func (m *sizeModel) cleared(k []byte) bool {
	found := false
	m.clears.Descend(span{begin: k}, func(c span) bool {
		found = bytes.Compare(k, c.end) < 0
		return false
	})
	return found
}

// clear records a clear of [b, e): the keys inside lose their stacks and
// the range merges with the cleared ranges it overlaps or touches.
func (m *sizeModel) clear(b, e []byte) {
	var drop []*fkey
	m.keys.Ascend(&fkey{key: b}, func(k *fkey) bool {
		if bytes.Compare(k.key, e) >= 0 {
			return false
		}
		drop = append(drop, k)
		return true
	})
	for _, k := range drop {
		m.keys.Delete(k)
	}
	merged := span{b, e}
	m.clears.Descend(span{begin: b}, func(c span) bool {
		if bytes.Compare(c.end, b) >= 0 { // overlaps or touches from the left
			merged.begin = c.begin
			if bytes.Compare(c.end, merged.end) > 0 {
				merged.end = c.end
			}
		}
		return false
	})
	var gone []span
	m.clears.Ascend(span{begin: merged.begin}, func(c span) bool {
		if bytes.Compare(c.begin, merged.end) > 0 {
			return false
		}
		gone = append(gone, c)
		if bytes.Compare(c.end, merged.end) > 0 {
			merged.end = c.end
		}
		return true
	})
	for _, c := range gone {
		m.clears.Delete(c)
	}
	m.clears.Set(merged)
}
