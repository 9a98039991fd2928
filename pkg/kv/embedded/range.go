package embedded

import (
	"bytes"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Batch sizes of a streaming range read in the default (iterator) mode:
// they start small and double, as FoundationDB's do.
const (
	iterFirstBatch = 64
	iterMaxBatch   = 4096
)

// rangeResult is the lazy result of GetRange.
type rangeResult struct {
	tr   *transaction
	snap bool
	r    kv.Range
	opts kv.RangeOptions
}

func (rr *rangeResult) GetSliceWithError() ([]kv.KeyValue, error) {
	it := rr.iter()
	it.whole = true
	var out []kv.KeyValue
	for it.Advance() {
		kv, err := it.Get()
		if err != nil {
			return nil, err
		}
		out = append(out, kv)
	}
	return out, nil
}

func (rr *rangeResult) GetSliceOrPanic() []kv.KeyValue { return kv.Must(rr.GetSliceWithError()) }

func (rr *rangeResult) Iterator() kv.RangeIterator { return rr.iter() }

func (rr *rangeResult) iter() *rangeIter {
	it := &rangeIter{rr: rr, chunk: iterFirstBatch}
	switch rr.opts.Mode {
	case kv.StreamingModeWantAll, kv.StreamingModeExact:
		it.whole = true
	}
	return it
}

// rangeIter streams a range read in batches. Each batch is a limited scan
// of the transaction's current view that adds the read conflict range it
// examined, so the union of the batches' ranges is what FoundationDB adds.
type rangeIter struct {
	rr      *rangeResult
	started bool
	whole   bool // read everything that is left in one batch
	b, e    []byte
	left    int // rows left under the limit; -1: no limit
	chunk   int
	buf     []kv.KeyValue
	pos     int
	done    bool
	err     error
	errSeen bool
	cur     kv.KeyValue
}

func (it *rangeIter) Advance() bool {
	if it.err != nil {
		if it.errSeen {
			return false
		}
		it.errSeen = true
		return true
	}
	if it.pos < len(it.buf) {
		it.cur = it.buf[it.pos]
		it.pos++
		return true
	}
	if it.done {
		return false
	}
	it.fetch()
	if it.err != nil {
		it.errSeen = true
		return true
	}
	if len(it.buf) == 0 {
		return false
	}
	it.cur = it.buf[0]
	it.pos = 1
	return true
}

func (it *rangeIter) Get() (kv.KeyValue, error) {
	if it.err != nil {
		return kv.KeyValue{}, it.err
	}
	return it.cur, nil
}

func (it *rangeIter) MustGet() kv.KeyValue { return kv.Must(it.Get()) }

// fetch reads the next batch into buf; in the latency mode it then waits
// as long as the round trips for the batch would take.
func (it *rangeIter) fetch() {
	if d := it.fetchLocked(); d > 0 {
		time.Sleep(d)
	}
}

// fetchLocked reads the next batch under the transaction's lock and
// returns the batch's latency.
func (it *rangeIter) fetchLocked() time.Duration {
	it.buf, it.pos = nil, 0
	tr := it.rr.tr
	if err := tr.lockRead(); err != nil {
		it.err = err
		return 0
	}
	defer tr.unlockRead()
	n, err := it.fetchBatch()
	if err == nil {
		err = tr.countRead(n)
	}
	if err != nil {
		it.err, it.buf = err, nil
	}
	return tr.readLatency(n)
}

// fetchBatch reads the next batch into buf and returns its size in bytes.
func (it *rangeIter) fetchBatch() (int, error) {
	tr := it.rr.tr
	if !it.started {
		it.started = true
		if err := it.start(); err != nil {
			return 0, err
		}
		if it.done {
			return 0, nil
		}
	}
	n := it.left // 0 < n, or -1
	if !it.whole {
		if n < 0 || n > it.chunk {
			n = it.chunk
		}
		if it.chunk < iterMaxBatch {
			it.chunk *= 2
		}
	}
	if n < 0 {
		n = 0
	}
	reverse := it.rr.opts.Reverse
	kvs, err := tr.scan(it.b, it.e, n, reverse)
	err = tr.noteUnreadable(err)
	if err != nil {
		return 0, err
	}
	full := n > 0 && len(kvs) == n
	if full {
		last := kvs[len(kvs)-1].Key
		if reverse {
			if !it.rr.snap {
				tr.addRead(last, it.e)
			}
			it.e = last
		} else {
			next := keyAfter(last)
			if !it.rr.snap {
				tr.addRead(it.b, next)
			}
			it.b = next
		}
	} else {
		if !it.rr.snap {
			tr.addRead(it.b, it.e)
		}
		it.done = true
	}
	if it.left > 0 {
		it.left -= len(kvs)
		if it.left == 0 {
			it.done = true
		}
	}
	it.buf = kvs
	size := 0
	for _, e := range kvs {
		size += len(e.Key) + len(e.Value)
	}
	return size, nil
}

// start validates the range and resolves its selectors.
func (it *rangeIter) start() error {
	rr := it.rr
	switch {
	case rr.opts.Limit < kv.RowLimitUnlimited:
		return errRangeLimits
	case rr.opts.Limit == kv.RowLimitUnlimited && rr.opts.Mode == kv.StreamingModeExact:
		// FoundationDB's binding reads a limit of 0 as "all" whatever the
		// mode, but passes -1 on, which the client refuses in EXACT mode.
		return errExactMode
	}
	it.left = -1
	if rr.opts.Limit > 0 {
		it.left = rr.opts.Limit
	}
	bs, es := rr.r.FDBRangeKeySelectors()
	bsel, esel := bs.FDBKeySelector(), es.FDBKeySelector()
	bk, ek := bsel.Key.FDBKey(), esel.Key.FDBKey()
	if bytes.Compare(bk, maxReadKey) > 0 || bytes.Compare(ek, maxReadKey) > 0 {
		return errOutsideLegalRange
	}
	// As FoundationDB: or-equal selectors become plain ones on the next
	// key, then a range whose begin is not below its end in both key and
	// offset is empty and adds no conflict range.
	bsel, esel = withoutOrEqual(bsel), withoutOrEqual(esel)
	bk, ek = bsel.Key.FDBKey(), esel.Key.FDBKey()
	if bytes.Compare(bk, ek) >= 0 && bsel.Offset >= esel.Offset {
		it.done = true // empty, and no conflict range, as in FoundationDB
		return nil
	}
	b, err := it.rr.tr.rangePosition(bsel, rr.snap)
	if err != nil {
		return err
	}
	e, err := it.rr.tr.rangePosition(esel, rr.snap)
	if err != nil {
		return err
	}
	if bytes.Compare(b, e) >= 0 {
		it.done = true
		return nil
	}
	it.b, it.e = clone(b), clone(e)
	return nil
}

// withoutOrEqual rewrites an or-equal selector on k as the equivalent plain
// selector on the key after k.
func withoutOrEqual(s kv.KeySelector) kv.KeySelector {
	if !s.OrEqual {
		return s
	}
	return kv.KeySelector{Key: kv.Key(keyAfter(s.Key.FDBKey())), Offset: s.Offset}
}

// rangePosition resolves a selector to the key where a range read starts or
// stops. First-greater-or-equal and first-greater-than selectors need no
// lookup and add no conflict, as in FoundationDB.
func (tr *transaction) rangePosition(s kv.KeySelector, snap bool) ([]byte, error) {
	k := s.Key.FDBKey()
	if bytes.Compare(k, maxReadKey) > 0 {
		k = maxReadKey
	}
	if s.Offset == 1 {
		if s.OrEqual {
			k = keyAfter(k)
			if bytes.Compare(k, maxReadKey) > 0 {
				k = maxReadKey
			}
		}
		return k, nil
	}
	return tr.resolveKey(s, snap)
}

// scan reads up to limit (0: all) entries of the transaction's view of
// [b, e), in order or in reverse: a merge of the snapshot's iterator with
// the write buffer's entries, skipping what the buffer cleared. It adds no
// conflict ranges.
func (tr *transaction) scan(b, e []byte, limit int, reverse bool) ([]kv.KeyValue, error) {
	if bytes.Compare(b, e) >= 0 {
		return nil, nil
	}
	io := &pebble.IterOptions{UpperBound: e}
	if len(b) > 0 {
		io.LowerBound = b // pebble wants nil, not empty, for no bound
	}
	it, err := tr.ref.s.s.NewIter(io)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var bc entryCursor
	bc.init(&tr.buf, b, e, reverse)
	defer bc.release()
	var ok bool
	if reverse {
		ok = it.Last()
	} else {
		ok = it.First()
	}
	step := func() bool {
		if reverse {
			return it.Prev()
		}
		return it.Next()
	}
	var out []kv.KeyValue
	for (limit <= 0 || len(out) < limit) && (ok || bc.ok) {
		var cmp int
		switch {
		case ok && bc.ok:
			cmp = bytes.Compare(it.Key(), bc.entry().key)
			if reverse {
				cmp = -cmp
			}
		case ok:
			cmp = -1
		default:
			cmp = 1
		}
		if cmp < 0 {
			sk := it.Key()
			if c, covered := tr.buf.clearAt(sk); covered {
				if reverse {
					ok = len(c.begin) > 0 && it.SeekLT(c.begin)
				} else {
					ok = it.SeekGE(c.end)
				}
				continue
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return nil, err
			}
			out = append(out, kv.KeyValue{Key: clone(sk), Value: clone(v)})
			ok = step()
			continue
		}
		ent := bc.entry()
		var base []byte
		present := false
		if cmp == 0 {
			v, err := it.ValueAndErr()
			if err != nil {
				return nil, err
			}
			base, present = clone(v), true // the iterator reuses v once it moves
			ok = step()
		}
		v, exists, err := ent.resolve(base, present)
		if err != nil {
			return nil, err
		}
		if exists {
			out = append(out, kv.KeyValue{Key: clone(ent.key), Value: v})
		}
		bc.next()
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	// The part of [b, e) examined must not hold a key a pending
	// SetVersionstampedKey could write: the result would depend on it.
	eb, ee := b, e
	if limit > 0 && len(out) == limit {
		if last := out[len(out)-1].Key; reverse {
			eb = last
		} else {
			ee = keyAfter(last)
		}
	}
	if tr.buf.unreadableOverlaps(eb, ee) {
		return nil, errUnreadable
	}
	return out, nil
}
