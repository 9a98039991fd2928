package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tidwall/btree"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// FoundationDB's client defaults for OnError.
const (
	initialBackoff       = 10 * time.Millisecond
	maxRetryDelayDefault = 1000 // milliseconds
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

// snapRef holds a transaction's snapshot reference; a cleanup releases it
// if the transaction is dropped without Commit, Cancel or Reset.
type snapRef struct {
	s *snapshot
}

// transaction implements kv.Transaction. Its methods lock mu: Cancel may
// come from another goroutine (a context), everything else from the
// transaction's user.
type transaction struct {
	db *DB
	mu sync.Mutex

	// Options, kept by OnError and cleared by Reset.
	timeoutMs     int64
	retryLimit    int64
	maxRetryDelay int64
	start         time.Time
	retries       int64
	backoff       time.Duration

	ref     *snapRef
	grvTime time.Time

	writes     *btree.BTreeG[*wentry]
	clears     *btree.BTreeG[span]
	unreadable []span
	muts       []mutation
	atomic     bool
	size       int
	reads      []span
	wconf      []span
	watches    []*watch
	deferred   error

	cancelled     bool
	commitStarted bool
	readOnlyDone  bool
	commitErr     error // why a commit failed before reaching the leader
	req           *commitReq
	vs            *future[kv.Key]
}

func newTransaction(db *DB) *transaction {
	tr := &transaction{db: db, ref: &snapRef{}}
	tr.resetOptions()
	runtime.AddCleanup(tr, func(r *snapRef) {
		if r.s != nil {
			r.s.release()
		}
	}, tr.ref)
	return tr
}

func (tr *transaction) resetOptions() {
	tr.timeoutMs = 0
	tr.retryLimit = -1
	tr.maxRetryDelay = maxRetryDelayDefault
	tr.start = time.Now()
	tr.retries = 0
	tr.backoff = initialBackoff
}

// resetAttempt drops everything of the current attempt; pending watches
// and the versionstamp fail with err (the attempt's outcome).
func (tr *transaction) resetAttempt(err error) {
	for _, w := range tr.watches {
		w.finish(err)
	}
	if tr.vs != nil {
		tr.vs.fail(err)
	}
	tr.releaseSnapshot()
	tr.writes, tr.clears, tr.unreadable = nil, nil, nil
	tr.muts, tr.atomic, tr.size = nil, false, 0
	tr.reads, tr.wconf, tr.watches = nil, nil, nil
	tr.deferred = nil
	tr.cancelled, tr.commitStarted, tr.readOnlyDone = false, false, false
	tr.req, tr.vs, tr.commitErr = nil, nil, nil
}

func (tr *transaction) releaseSnapshot() {
	if tr.ref.s != nil {
		tr.ref.s.release()
		tr.ref.s = nil
	}
}

func (tr *transaction) timedOut() bool {
	return tr.timeoutMs > 0 && time.Since(tr.start) >= time.Duration(tr.timeoutMs)*time.Millisecond
}

// timedOutLocked reports, for tests, whether the timeout has passed.
func (tr *transaction) timedOutLocked() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.timedOut()
}

// committed reports whether the last Commit succeeded.
func (tr *transaction) committed() bool {
	if tr.readOnlyDone {
		return true
	}
	return tr.req != nil && tr.req.fut.IsReady() && tr.req.err == nil
}

// lockRead locks the transaction for a read and checks that it may read,
// taking a read version if it has none. On success the caller must call
// tr.unlockRead.
func (tr *transaction) lockRead() error {
	tr.mu.Lock()
	tr.db.closeMu.RLock()
	if err := tr.readable(); err != nil {
		tr.unlockRead()
		return err
	}
	return nil
}

func (tr *transaction) unlockRead() {
	tr.db.closeMu.RUnlock()
	tr.mu.Unlock()
}

func (tr *transaction) readable() error {
	switch {
	case tr.db.closed.Load():
		return kv.ErrDatabaseClosed
	case tr.cancelled:
		return errCancelled
	case tr.timedOut():
		return errTimedOut
	case tr.commitStarted:
		return errUsedDuringCommit
	}
	if tr.ref.s == nil {
		tr.ref.s = tr.db.acquire()
		tr.grvTime = time.Now()
	}
	if time.Since(tr.grvTime) > tr.db.opts.TransactionLifetime {
		return errTooOld
	}
	return nil
}

// writable reports whether a write may be buffered; if not, the reason is
// kept for Commit.
func (tr *transaction) writable() bool {
	switch {
	case tr.cancelled:
		return false
	case tr.commitStarted:
		tr.defer_(errUsedDuringCommit)
		return false
	}
	return true
}

func (tr *transaction) defer_(err error) {
	if tr.deferred == nil {
		tr.deferred = err
	}
}

func (tr *transaction) addRead(b, e []byte) {
	tr.reads = append(tr.reads, span{clone(b), clone(e)})
}

// addReadKey adds the read conflict range of the single key k.
func (tr *transaction) addReadKey(k []byte) {
	e := keyAfter(k)
	tr.reads = append(tr.reads, span{e[:len(k):len(k)], e})
}

func (tr *transaction) addWrite(s span) {
	if tr.wconf == nil {
		tr.wconf = make([]span, 0, 4)
	}
	tr.wconf = append(tr.wconf, s)
	tr.size += len(s.begin) + len(s.end)
}

func (tr *transaction) log(m mutation) {
	if tr.muts == nil {
		tr.muts = make([]mutation, 0, 4)
	}
	tr.muts = append(tr.muts, m)
	tr.size += len(m.key) + len(m.param)
	if m.op.isAtomic() {
		tr.atomic = true
	}
}

func (tr *transaction) entry(k []byte) *wentry {
	if tr.writes == nil {
		return nil
	}
	e, ok := tr.writes.Get(&wentry{key: k})
	if !ok {
		return nil
	}
	return e
}

func (tr *transaction) putEntry(e *wentry) {
	if tr.writes == nil {
		tr.writes = btree.NewBTreeGOptions(func(a, b *wentry) bool { return bytes.Compare(a.key, b.key) < 0 },
			btree.Options{NoLocks: true})
	}
	tr.writes.Set(e)
}

// clearAt returns the cleared range of this transaction that holds k.
func (tr *transaction) clearAt(k []byte) (span, bool) {
	if tr.clears == nil {
		return span{}, false
	}
	var found span
	ok := false
	tr.clears.Descend(span{begin: k}, func(s span) bool {
		if bytes.Compare(k, s.end) < 0 {
			found, ok = s, true
		}
		return false
	})
	return found, ok
}

func (tr *transaction) unreadableOverlaps(b, e []byte) bool {
	for _, u := range tr.unreadable {
		if bytes.Compare(u.begin, e) < 0 && bytes.Compare(b, u.end) < 0 {
			return true
		}
	}
	return false
}

func keyAfter(k []byte) []byte {
	out := make([]byte, len(k)+1)
	copy(out, k)
	return out
}

// keyAfterAnd returns keyAfter(k) and a copy of v (never nil) in one
// allocation; neither has room to grow into the other.
func keyAfterAnd(k, v []byte) (ke, vc []byte) {
	buf := make([]byte, len(k)+1+len(v))
	copy(buf, k)
	copy(buf[len(k)+1:], v)
	return buf[: len(k)+1 : len(k)+1], buf[len(k)+1:]
}

func isSystem(k []byte) bool { return bytes.Compare(k, maxReadKey) >= 0 }

// --- reads -------------------------------------------------------------

func (tr *transaction) GetReadVersion() kv.FutureInt64 {
	if err := tr.lockRead(); err != nil {
		return kv.ReadyFuture[int64](0, err)
	}
	defer tr.unlockRead()
	return kv.ReadyFuture(tr.ref.s.version, nil)
}

func (tr *transaction) Get(key kv.KeyConvertible) kv.FutureByteSlice { return tr.get(key, false) }

func (tr *transaction) get(key kv.KeyConvertible, snap bool) kv.FutureByteSlice {
	k := key.FDBKey()
	if err := tr.lockRead(); err != nil {
		return kv.ReadyFuture[[]byte](nil, err)
	}
	defer tr.unlockRead()
	if isSystem(k) {
		return kv.ReadyFuture[[]byte](nil, errOutsideLegalRange)
	}
	if len(k) > kv.MaxKeySize {
		return kv.ReadyFuture[[]byte](nil, nil) // cannot exist, as in FoundationDB
	}
	v, err := tr.getLocked(k, snap)
	return kv.ReadyFuture(v, err)
}

func (tr *transaction) getLocked(k []byte, snap bool) ([]byte, error) {
	if tr.unreadableOverlaps(k, keyAfter(k)) {
		return nil, errUnreadable
	}
	e := tr.entry(k)
	if e != nil && e.kind != entOps {
		v, _, err := e.resolve(nil, false)
		return v, err
	}
	if e == nil {
		if _, ok := tr.clearAt(k); ok {
			return nil, nil
		}
	}
	if !snap {
		tr.addReadKey(k)
	}
	base, present, err := tr.storedGet(k)
	if err != nil {
		return nil, err
	}
	if e != nil {
		v, _, err := e.resolve(base, present)
		return v, err
	}
	return base, nil
}

// storedGet reads k at the transaction's read version.
func (tr *transaction) storedGet(k []byte) ([]byte, bool, error) {
	v, closer, err := tr.ref.s.s.Get(k)
	if err != nil {
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, false, nil
		}
		return nil, false, err
	}
	out := clone(v)
	closer.Close()
	return out, true, nil
}

func (tr *transaction) GetKey(sel kv.Selectable) kv.FutureKey { return tr.getKey(sel, false) }

func (tr *transaction) getKey(sel kv.Selectable, snap bool) kv.FutureKey {
	s := sel.FDBKeySelector()
	if err := tr.lockRead(); err != nil {
		return kv.ReadyFuture[kv.Key](nil, err)
	}
	defer tr.unlockRead()
	if isSystem(s.Key.FDBKey()) && !bytes.Equal(s.Key.FDBKey(), maxReadKey) {
		return kv.ReadyFuture[kv.Key](nil, errOutsideLegalRange)
	}
	k, err := tr.resolveKey(s, snap)
	return kv.ReadyFuture(kv.Key(k), err)
}

// resolveKey resolves a key selector against the transaction's view,
// adding a read conflict on the keys it examined unless snap.
func (tr *transaction) resolveKey(s kv.KeySelector, snap bool) ([]byte, error) {
	k := s.Key.FDBKey()
	if bytes.Compare(k, maxReadKey) > 0 {
		k = maxReadKey // an or-equal selector rewritten past the last key
	}
	if s.Offset >= 1 {
		from := k
		if s.OrEqual {
			from = keyAfter(k)
		}
		kvs, err := tr.scan(from, maxReadKey, s.Offset, false)
		if err != nil {
			return nil, err
		}
		// As FoundationDB: the conflict range runs from the first key the
		// selector could pick to its result.
		if len(kvs) == s.Offset {
			r := kvs[len(kvs)-1].Key
			if !snap {
				tr.addRead(from, keyAfter(r))
			}
			return r, nil
		}
		if !snap && bytes.Compare(from, maxReadKey) < 0 {
			tr.addRead(from, maxReadKey)
		}
		return clone(maxReadKey), nil
	}
	to := k
	if s.OrEqual {
		to = keyAfter(k)
		if bytes.Compare(to, maxReadKey) > 0 {
			to = maxReadKey
		}
	}
	n := 1 - s.Offset
	kvs, err := tr.scan(nil, to, n, true)
	if err != nil {
		return nil, err
	}
	if len(kvs) == n {
		r := kvs[len(kvs)-1].Key
		if !snap {
			tr.addRead(r, to)
		}
		return r, nil
	}
	if !snap && len(to) > 0 {
		tr.addRead(nil, to)
	}
	return []byte{}, nil
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
// [b, e), in order or in reverse. It adds no conflict ranges.
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
	var bi btree.IterG[*wentry]
	bok := false
	if tr.writes != nil {
		bi = tr.writes.Iter()
		defer bi.Release()
		if reverse {
			if bi.Seek(&wentry{key: e}) {
				bok = bi.Prev()
			} else {
				bok = bi.Last()
			}
			bok = bok && bytes.Compare(bi.Item().key, b) >= 0
		} else {
			bok = bi.Seek(&wentry{key: b}) && bytes.Compare(bi.Item().key, e) < 0
		}
	}
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
	bstep := func() bool {
		if reverse {
			return bi.Prev() && bytes.Compare(bi.Item().key, b) >= 0
		}
		return bi.Next() && bytes.Compare(bi.Item().key, e) < 0
	}
	var out []kv.KeyValue
	for (limit <= 0 || len(out) < limit) && (ok || bok) {
		var cmp int
		switch {
		case ok && bok:
			cmp = bytes.Compare(it.Key(), bi.Item().key)
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
			if c, covered := tr.clearAt(sk); covered {
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
		ent := bi.Item()
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
		bok = bstep()
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
	if tr.unreadableOverlaps(eb, ee) {
		return nil, errUnreadable
	}
	return out, nil
}

func (tr *transaction) GetRange(r kv.Range, options kv.RangeOptions) kv.RangeResult {
	return &rangeResult{tr: tr, r: r, opts: options}
}

// --- writes ------------------------------------------------------------

// checkKey returns the error FoundationDB gives a write or watch of k:
// key_outside_legal_range for the system key space, key_too_large past
// kv.MaxKeySize.
func checkKey(k []byte) error {
	switch {
	case isSystem(k):
		return errOutsideLegalRange
	case len(k) > kv.MaxKeySize:
		return errKeyTooLarge
	}
	return nil
}

// checkWrite is checkKey, then value_too_large for a value (or atomic
// operand) past kv.MaxValueSize.
func checkWrite(k, v []byte) error {
	if err := checkKey(k); err != nil {
		return err
	}
	if len(v) > kv.MaxValueSize {
		return errValueTooLarge
	}
	return nil
}

func (tr *transaction) Set(key kv.KeyConvertible, value []byte) {
	k := key.FDBKey()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	if err := checkWrite(k, value); err != nil {
		tr.defer_(err)
		return
	}
	ke, vc := keyAfterAnd(k, value)
	kc := ke[:len(k):len(k)]
	tr.log(mutation{op: opSet, key: kc, param: vc})
	tr.addWrite(span{kc, ke})
	tr.putEntry(&wentry{key: kc, kind: entValue, val: vc})
}

func (tr *transaction) Clear(key kv.KeyConvertible) {
	k := key.FDBKey()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	if isSystem(k) {
		tr.defer_(errOutsideLegalRange)
		return
	}
	if len(k) > kv.MaxKeySize {
		return // cannot exist
	}
	ke := keyAfter(k)
	kc := ke[:len(k):len(k)]
	tr.log(mutation{op: opClear, key: kc})
	tr.addWrite(span{kc, ke})
	tr.putEntry(&wentry{key: kc, kind: entAbsent})
}

// exactRange validates an exact range for a write or a conflict range.
func exactRange(r kv.ExactRange) (b, e []byte, err error) {
	bk, ek := r.FDBRangeKeys()
	b, e = bk.FDBKey(), ek.FDBKey()
	if bytes.Compare(b, e) > 0 {
		return nil, nil, errInvertedRange
	}
	if bytes.Compare(b, maxReadKey) > 0 || bytes.Compare(e, maxReadKey) > 0 {
		return nil, nil, errOutsideLegalRange
	}
	return clone(b), clone(e), nil
}

func (tr *transaction) ClearRange(r kv.ExactRange) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	b, e, err := exactRange(r)
	if err != nil {
		tr.defer_(err)
		return
	}
	if bytes.Equal(b, e) {
		return
	}
	tr.log(mutation{op: opClearRange, key: b, param: e})
	tr.addWrite(span{b, e})
	if tr.writes != nil {
		var drop []*wentry
		tr.writes.Ascend(&wentry{key: b}, func(w *wentry) bool {
			if bytes.Compare(w.key, e) >= 0 {
				return false
			}
			drop = append(drop, w)
			return true
		})
		for _, w := range drop {
			tr.writes.Delete(w)
		}
	}
	if tr.clears == nil {
		tr.clears = btree.NewBTreeGOptions(func(x, y span) bool { return bytes.Compare(x.begin, y.begin) < 0 },
			btree.Options{NoLocks: true})
	}
	// Merge with the cleared ranges that overlap or touch [b, e).
	merged := span{b, e}
	if c, ok := tr.clearAt(b); ok {
		merged.begin = c.begin
		if bytes.Compare(c.end, merged.end) > 0 {
			merged.end = c.end
		}
	}
	var drop []span
	tr.clears.Ascend(span{begin: merged.begin}, func(s span) bool {
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
		tr.clears.Delete(s)
	}
	tr.clears.Set(merged)
}

func (tr *transaction) atomicOp(op opType, key kv.KeyConvertible, param []byte) {
	k := key.FDBKey()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	if err := checkWrite(k, param); err != nil {
		tr.defer_(err)
		return
	}
	ke, pc := keyAfterAnd(k, param)
	kc := ke[:len(k):len(k)]
	m := mutation{op: op, key: kc, param: pc}
	tr.log(m)
	tr.addWrite(span{kc, ke})
	e := tr.entry(kc)
	if e == nil {
		if _, ok := tr.clearAt(kc); ok {
			e = &wentry{key: kc, kind: entAbsent}
		} else {
			e = &wentry{key: kc, kind: entOps}
		}
		tr.putEntry(e)
	}
	switch e.kind {
	case entValue, entAbsent:
		v, exists := applyAtomic(op, e.val, e.kind == entValue, pc)
		if exists {
			e.kind, e.val = entValue, v
		} else {
			e.kind, e.val = entAbsent, nil
		}
	case entOps:
		e.ops = append(e.ops, m)
	}
}

func (tr *transaction) Add(key kv.KeyConvertible, param []byte)    { tr.atomicOp(opAdd, key, param) }
func (tr *transaction) BitAnd(key kv.KeyConvertible, param []byte) { tr.atomicOp(opBitAnd, key, param) }
func (tr *transaction) BitOr(key kv.KeyConvertible, param []byte)  { tr.atomicOp(opBitOr, key, param) }
func (tr *transaction) BitXor(key kv.KeyConvertible, param []byte) { tr.atomicOp(opBitXor, key, param) }
func (tr *transaction) Max(key kv.KeyConvertible, param []byte)    { tr.atomicOp(opMax, key, param) }
func (tr *transaction) Min(key kv.KeyConvertible, param []byte)    { tr.atomicOp(opMin, key, param) }
func (tr *transaction) ByteMax(key kv.KeyConvertible, param []byte) {
	tr.atomicOp(opByteMax, key, param)
}
func (tr *transaction) ByteMin(key kv.KeyConvertible, param []byte) {
	tr.atomicOp(opByteMin, key, param)
}
func (tr *transaction) CompareAndClear(key kv.KeyConvertible, param []byte) {
	tr.atomicOp(opCompareAndClear, key, param)
}

// versionstampOffset splits the 4-byte little-endian offset off b and
// checks that 10 bytes fit there.
func versionstampOffset(b []byte) ([]byte, int, error) {
	if len(b) < 4 {
		return nil, 0, errInvalidOperation
	}
	pos := int32(binary.LittleEndian.Uint32(b[len(b)-4:]))
	rest := b[:len(b)-4]
	if pos < 0 || int(pos)+10 > len(rest) {
		return nil, 0, errInvalidOperation
	}
	return rest, int(pos), nil
}

func (tr *transaction) SetVersionstampedKey(key kv.KeyConvertible, value []byte) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	k, pos, err := versionstampOffset(key.FDBKey())
	switch {
	case err != nil:
		tr.defer_(err)
		return
	case len(k) > kv.MaxKeySize:
		tr.defer_(errKeyTooLarge)
		return
	case len(value) > kv.MaxValueSize:
		tr.defer_(errValueTooLarge)
		return
	}
	// The key lands somewhere in [k with the read version's stamp, k with
	// 0xff...): that range is unreadable and write-conflicting, as in
	// FoundationDB.
	var rv int64
	if tr.ref.s != nil {
		rv = tr.ref.s.version
	}
	begin := clone(k)
	binary.BigEndian.PutUint64(begin[pos:], uint64(rv))
	begin[pos+8], begin[pos+9] = 0, 0
	end := keyAfter(k)
	for i := pos; i < pos+10; i++ {
		end[i] = 0xff
	}
	if isSystem(begin) {
		tr.defer_(errOutsideLegalRange)
		return
	}
	if bytes.Compare(end, maxReadKey) > 0 {
		end = clone(maxReadKey)
	}
	tr.unreadable = append(tr.unreadable, span{begin, end})
	tr.addWrite(span{begin, end})
	tr.log(mutation{op: opVersionstampedKey, key: clone(k), param: clone(value), pos: pos})
}

func (tr *transaction) SetVersionstampedValue(key kv.KeyConvertible, value []byte) {
	k := key.FDBKey()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.writable() {
		return
	}
	v, pos, err := versionstampOffset(value)
	if err := checkKey(k); err != nil {
		tr.defer_(err)
		return
	}
	if err == nil {
		err = checkWrite(k, v)
	}
	if err != nil {
		tr.defer_(err)
		return
	}
	kc := clone(k)
	tr.log(mutation{op: opVersionstampedValue, key: kc, param: clone(v), pos: pos})
	tr.addWrite(span{kc, keyAfter(kc)})
	tr.putEntry(&wentry{key: kc, kind: entUnreadable})
}

// --- conflict ranges ---------------------------------------------------

func (tr *transaction) conflictCheck() error {
	switch {
	case tr.db.closed.Load():
		return kv.ErrDatabaseClosed
	case tr.cancelled:
		return errCancelled
	case tr.commitStarted:
		return errUsedDuringCommit
	}
	return nil
}

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
	if err := tr.conflictCheck(); err != nil {
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

// --- watches -----------------------------------------------------------

func (tr *transaction) Watch(key kv.KeyConvertible) kv.FutureNil {
	k := key.FDBKey()
	fut := newFuture[struct{}]()
	if err := tr.lockRead(); err != nil {
		fut.fail(err)
		return fut
	}
	defer tr.unlockRead()
	if err := checkKey(k); err != nil {
		fut.fail(err)
		return fut
	}
	v, err := tr.getLocked(k, true)
	if err != nil {
		fut.fail(err)
		return fut
	}
	if err := tr.db.watches.reserve(tr.db.opts.MaxWatches); err != nil {
		fut.fail(err)
		return fut
	}
	w := &watch{reg: tr.db.watches, key: clone(k), initial: v, present: v != nil, fut: fut}
	fut.onCancel = func() { w.reg.release(w) }
	if tr.timeoutMs > 0 {
		left := time.Until(tr.start.Add(time.Duration(tr.timeoutMs) * time.Millisecond))
		w.reg.mu.Lock()
		w.timer = time.AfterFunc(left, func() { w.finish(errTimedOut) })
		w.reg.mu.Unlock()
	}
	tr.watches = append(tr.watches, w)
	return fut
}

// --- commit ------------------------------------------------------------

func (tr *transaction) GetVersionstamp() kv.FutureKey {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	switch {
	case tr.vs != nil:
		return tr.vs
	case tr.req != nil:
		return tr.req.versionstampFuture()
	case tr.readOnlyDone:
		return kv.ReadyFuture[kv.Key](nil, errNoCommitVersion)
	case tr.commitErr != nil:
		return kv.ReadyFuture[kv.Key](nil, tr.commitErr)
	case tr.cancelled:
		return kv.ReadyFuture[kv.Key](nil, errCancelled)
	}
	tr.vs = newFuture[kv.Key]()
	return tr.vs
}

func (tr *transaction) GetCommittedVersion() (int64, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.req != nil && tr.req.fut.IsReady() && tr.req.err == nil {
		return tr.req.version, nil
	}
	return -1, nil
}

func (tr *transaction) Commit() kv.FutureNil {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.db.closeMu.RLock()
	defer tr.db.closeMu.RUnlock()
	switch {
	case tr.commitStarted:
		return kv.ReadyFuture(struct{}{}, errUsedDuringCommit)
	case tr.cancelled:
		return kv.ReadyFuture(struct{}{}, errCancelled)
	}
	tr.commitStarted = true
	fail := func(err error) kv.FutureNil {
		for _, w := range tr.watches {
			w.finish(err)
		}
		tr.watches = nil
		tr.commitErr = err
		if tr.vs != nil {
			tr.vs.fail(err)
		}
		tr.releaseSnapshot()
		return kv.ReadyFuture(struct{}{}, err)
	}
	switch {
	case tr.db.closed.Load():
		return fail(kv.ErrDatabaseClosed)
	case tr.timedOut():
		return fail(errTimedOut)
	case tr.deferred != nil:
		return fail(tr.deferred)
	}
	if len(tr.muts) == 0 && len(tr.wconf) == 0 {
		// Read-only: nothing to resolve; watches arm at the newest state.
		tr.readOnlyDone = true
		if len(tr.watches) > 0 {
			tr.db.armReadOnly(tr.watches)
			tr.watches = nil
		}
		if tr.vs != nil {
			tr.vs.fail(errNoCommitVersion)
		}
		tr.releaseSnapshot()
		return kv.ReadyFuture(struct{}{}, nil)
	}
	if len(tr.reads) > 0 && tr.ref.s != nil && time.Since(tr.grvTime) > tr.db.opts.TransactionLifetime {
		return fail(errTooOld)
	}
	if tr.size > kv.MaxTransactionSize {
		return fail(errTooLarge)
	}
	req := &commitReq{
		reads:   coalesce(tr.reads),
		writes:  coalesce(tr.wconf),
		muts:    tr.muts,
		size:    tr.size,
		atomic:  tr.atomic,
		watches: tr.watches,
		fut:     newFuture[struct{}](),
		vs:      tr.vs,
	}
	tr.vs = nil // the request owns it now
	if tr.ref.s != nil {
		// The request keeps the snapshot until the leader has resolved it,
		// which holds back the resolver's horizon.
		req.rv, req.snap = tr.ref.s.version, tr.ref.s
		tr.ref.s = nil
	} else {
		// No read version yet: read at the newest, as FoundationDB takes one
		// at commit. Explicit read conflict ranges are checked against it.
		req.snap = tr.db.acquire()
		req.rv = req.snap.version
	}
	tr.watches = nil
	tr.writes, tr.clears, tr.muts, tr.reads, tr.wconf = nil, nil, nil, nil, nil
	tr.req = req
	tr.db.enqueue(req)
	return req.fut
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

func (tr *transaction) OnError(e kv.Error) kv.FutureNil {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.cancelled {
		return kv.ReadyFuture(struct{}{}, errCancelled)
	}
	if !e.Retryable() || (tr.retryLimit >= 0 && tr.retries >= tr.retryLimit) {
		return kv.ReadyFuture[struct{}](struct{}{}, e)
	}
	if tr.timedOut() {
		return kv.ReadyFuture(struct{}{}, errTimedOut)
	}
	tr.retries++
	delay := time.Duration(rand.Float64() * float64(tr.backoff))
	tr.backoff *= 2
	if limit := time.Duration(tr.maxRetryDelay) * time.Millisecond; tr.backoff > limit {
		tr.backoff = limit
	}
	tr.resetAttempt(errCancelled)
	fut := newFuture[struct{}]()
	start, timeout := tr.start, tr.timeoutMs
	t := time.AfterFunc(delay, func() {
		if timeout > 0 && time.Since(start) >= time.Duration(timeout)*time.Millisecond {
			fut.fail(errTimedOut)
			return
		}
		fut.set(struct{}{}, nil)
	})
	fut.onCancel = func() { t.Stop() }
	return fut
}

func (tr *transaction) Reset() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.resetAttempt(errCancelled)
	tr.resetOptions()
}

func (tr *transaction) Cancel() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.committed() {
		return
	}
	tr.resetAttempt(errCancelled)
	tr.cancelled = true
}

func (tr *transaction) Options() kv.TransactionOptions { return txnOptions{tr} }

func (tr *transaction) Snapshot() kv.ReadTransaction { return snapshotView{tr} }

// Transact runs f once in this transaction, without committing; a panic
// with an error (as MustGet raises) is returned as the error.
func (tr *transaction) Transact(_ context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(tr) })
}

// ReadTransact runs f once in this transaction.
func (tr *transaction) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(tr) })
}

// txnOptions implements kv.TransactionOptions.
type txnOptions struct{ tr *transaction }

func (o txnOptions) SetTimeout(ms int64) error {
	if ms < 0 {
		return errInvalidOption
	}
	o.tr.mu.Lock()
	o.tr.timeoutMs = ms
	o.tr.mu.Unlock()
	return nil
}

func (o txnOptions) SetRetryLimit(limit int64) error {
	if limit < -1 {
		return errInvalidOption
	}
	o.tr.mu.Lock()
	o.tr.retryLimit = limit
	o.tr.mu.Unlock()
	return nil
}

func (o txnOptions) SetMaxRetryDelay(ms int64) error {
	if ms < 0 {
		return errInvalidOption
	}
	o.tr.mu.Lock()
	o.tr.maxRetryDelay = ms
	if limit := time.Duration(ms) * time.Millisecond; o.tr.backoff > limit {
		o.tr.backoff = limit
	}
	o.tr.mu.Unlock()
	return nil
}

// snapshotView is a transaction's snapshot-read view: the same reads, no
// read conflict ranges.
type snapshotView struct{ tr *transaction }

func (s snapshotView) Get(key kv.KeyConvertible) kv.FutureByteSlice { return s.tr.get(key, true) }
func (s snapshotView) GetKey(sel kv.Selectable) kv.FutureKey        { return s.tr.getKey(sel, true) }
func (s snapshotView) GetRange(r kv.Range, o kv.RangeOptions) kv.RangeResult {
	return &rangeResult{tr: s.tr, snap: true, r: r, opts: o}
}
func (s snapshotView) GetReadVersion() kv.FutureInt64 { return s.tr.GetReadVersion() }
func (s snapshotView) Snapshot() kv.ReadTransaction   { return s }
func (s snapshotView) Cancel()                        { s.tr.Cancel() }
func (s snapshotView) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.Guard(func() (any, error) { return f(s) })
}

var (
	_ kv.Transaction     = (*transaction)(nil)
	_ kv.ReadTransaction = snapshotView{}
)
