package embedded

import (
	"bytes"
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Point reads and key selectors. Each merges the transaction's snapshot
// with its write buffer and adds the read conflict ranges of what it
// examined, unless it is a snapshot read. Range reads are in range.go.

func (tr *transaction) GetReadVersion() kv.FutureInt64 {
	if err := tr.lockRead(); err != nil {
		return kv.ReadyFuture[int64](0, err)
	}
	defer tr.unlockRead()
	var d time.Duration
	if tr.grvNow {
		d = tr.db.opts.Latency.GRV
	}
	return readyAfter(d, tr.ref.s.version, nil)
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
	err = tr.noteUnreadable(err)
	if err == nil {
		if err = tr.countRead(len(k) + len(v)); err != nil {
			v = nil
		}
	}
	return readyAfter(tr.readLatency(len(v)), v, err)
}

// getLocked reads k as the transaction sees it. A key the transaction set
// or cleared is answered from the buffer without a read conflict range.
func (tr *transaction) getLocked(k []byte, snap bool) ([]byte, error) {
	if tr.buf.unreadableOverlaps(k, keyAfter(k)) {
		return nil, errUnreadable
	}
	e := tr.buf.entry(k)
	if e != nil && e.kind != entOps {
		v, _, err := e.resolve(nil, false)
		return v, err
	}
	if e == nil {
		if _, ok := tr.buf.clearAt(k); ok {
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
	if err == nil {
		if err = tr.countRead(len(k)); err != nil {
			k = nil
		}
	}
	return readyAfter(tr.readLatency(len(k)), kv.Key(k), err)
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
		err = tr.noteUnreadable(err)
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
	err = tr.noteUnreadable(err)
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

func (tr *transaction) GetRange(r kv.Range, options kv.RangeOptions) kv.RangeResult {
	return &rangeResult{tr: tr, r: r, opts: options}
}
