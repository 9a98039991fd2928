package embedded

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// mutation is one entry of a transaction's mutation log, replayed in order
// by the commit leader.
type mutation struct {
	op    opType
	key   []byte
	param []byte // value, atomic operand, or end key of a clear range
	pos   int    // versionstamp offset for the versionstamped ops
}

// commitReq is a transaction handed to the commit leader.
type commitReq struct {
	rv      int64
	reads   []span
	writes  []span
	muts    []mutation
	size    int
	atomic  bool // muts hold atomic ops, which need an indexed batch
	watches []*watch
	fut     *future[struct{}]
	vs      *future[kv.Key]

	// Set by the leader before fut is resolved.
	version int64
	stamp   []byte
	err     error
}

// enqueue hands r to the leader.
func (db *DB) enqueue(r *commitReq) {
	db.qmu.Lock()
	if db.qclosed {
		db.qmu.Unlock()
		r.finish(kv.ErrDatabaseClosed)
		return
	}
	db.queue = append(db.queue, r)
	db.qmu.Unlock()
	select {
	case db.qsignal <- struct{}{}:
	default:
	}
}

// take removes the next batch from the queue. closed reports that Close was
// called; the queue is then failed and emptied.
func (db *DB) take() (batch []*commitReq, closed bool) {
	db.qmu.Lock()
	defer db.qmu.Unlock()
	if db.qclosed {
		for _, r := range db.queue {
			r.finish(kv.ErrDatabaseClosed)
		}
		db.queue = nil
		return nil, true
	}
	n, bytes := 0, 0
	for n < len(db.queue) && n < db.opts.MaxBatchTxns {
		if n > 0 && bytes+db.queue[n].size > db.opts.MaxBatchBytes {
			break
		}
		bytes += db.queue[n].size
		n++
	}
	batch = make([]*commitReq, n)
	copy(batch, db.queue[:n])
	rest := copy(db.queue, db.queue[n:])
	clear(db.queue[rest:])
	db.queue = db.queue[:rest]
	return batch, false
}

// leader is the single commit goroutine: it resolves, writes and publishes
// batches of queued transactions until Close.
func (db *DB) leader() {
	defer close(db.stopped)
	for range db.qsignal {
		for {
			batch, closed := db.take()
			if closed {
				return
			}
			if len(batch) == 0 {
				break
			}
			db.commitBatch(batch)
		}
	}
}

// nextVersion returns a commit version: about a million versions per second
// of wall-clock time, as FoundationDB, and always above the last one.
func (db *DB) nextVersion(now time.Time) int64 {
	v := db.baseVersion + now.Sub(db.baseTime).Microseconds()
	if v <= db.lastVersion {
		v = db.lastVersion + 1
	}
	return v
}

// advanceHorizon forgets published versions older than the transaction
// lifetime (plus a second of slack) and lets the resolver drop them.
func (db *DB) advanceHorizon(now time.Time, work int) {
	cutoff := now.Add(-db.opts.TransactionLifetime - time.Second)
	horizon := db.res.horizon
	i := 0
	for i < len(db.published)-1 && db.published[i].at.Before(cutoff) {
		horizon = db.published[i].ver
		i++
	}
	if i > 0 {
		db.published = append(db.published[:0], db.published[i:]...)
	}
	db.res.gc(horizon, work)
}

// commitBatch resolves the transactions of batch in order, writes the
// accepted ones in one synced pebble batch, publishes the new state, and
// only then acknowledges them.
func (db *DB) commitBatch(batch []*commitReq) {
	if db.testHookBatch != nil {
		db.testHookBatch(len(batch))
	}
	if db.failed != nil {
		for _, r := range batch {
			r.finish(fmt.Errorf("%w: %v", ErrStoreFailed, db.failed))
		}
		return
	}
	now := time.Now()
	cv := db.nextVersion(now)
	indexed := false
	for _, r := range batch {
		indexed = indexed || r.atomic
	}
	var b *pebble.Batch
	if indexed {
		b = db.pdb.NewIndexedBatch()
	} else {
		b = db.pdb.NewBatch()
	}
	defer b.Close()
	var touched touchSet
	accepted := 0
	inserted := 0
	for _, r := range batch {
		if len(r.reads) > 0 {
			if r.rv < db.res.horizon {
				r.err = errTooOld
				continue
			}
			if db.res.conflicts(r.reads, r.rv) {
				r.err = errNotCommitted
				continue
			}
		}
		stamp := make([]byte, 10)
		binary.BigEndian.PutUint64(stamp, uint64(cv))
		binary.BigEndian.PutUint16(stamp[8:], uint16(accepted))
		if err := applyMutations(b, r.muts, stamp, &touched); err != nil {
			db.fail(batch, err)
			return
		}
		for _, w := range r.writes {
			db.res.insert(w, cv)
		}
		inserted += len(r.writes)
		r.version, r.stamp = cv, stamp
		accepted++
	}
	if accepted > 0 {
		var vb [8]byte
		binary.BigEndian.PutUint64(vb[:], uint64(cv))
		if err := b.Set(versionKey, vb[:], nil); err != nil {
			db.fail(batch, err)
			return
		}
		if err := b.Commit(pebble.Sync); err != nil {
			db.fail(batch, err)
			return
		}
		db.lastVersion = cv
		done := time.Now()
		s := db.newSnapshot(cv)
		db.publish(s, done)
		var armed []*watch
		for _, r := range batch {
			if r.err == nil {
				armed = append(armed, r.watches...)
			}
		}
		db.watches.afterCommit(s, &touched, armed)
		db.advanceHorizon(done, 2*inserted+16)
	}
	for _, r := range batch {
		r.finish(r.err)
	}
}

// fail gives up on batch after a storage error: the transactions whose
// writes were attempted may or may not be durable.
func (db *DB) fail(batch []*commitReq, err error) {
	db.failed = err
	for _, r := range batch {
		if r.err == nil {
			r.err = errUnknownResult
		}
		r.finish(r.err)
	}
}

// finish resolves r's futures and fails or leaves its watches: watches of
// a successful commit were armed by the leader already.
func (r *commitReq) finish(err error) {
	r.err = err
	if err != nil {
		for _, w := range r.watches {
			w.finish(err)
		}
		if r.vs != nil {
			r.vs.fail(err)
		}
	} else if r.vs != nil {
		r.vs.set(kv.Key(r.stamp), nil)
	}
	r.fut.set(struct{}{}, err)
}

// applyMutations replays a transaction's log into b, evaluating atomic ops
// against the state b sees (the store plus earlier writes of the batch).
func applyMutations(b *pebble.Batch, muts []mutation, stamp []byte, touched *touchSet) error {
	for _, m := range muts {
		var err error
		switch m.op {
		case opSet:
			err = b.Set(m.key, m.param, nil)
			touched.addKey(m.key)
		case opClear:
			err = b.Delete(m.key, nil)
			touched.addKey(m.key)
		case opClearRange:
			err = b.DeleteRange(m.key, m.param, nil)
			touched.addSpan(span{m.key, m.param})
		case opVersionstampedKey:
			k := make([]byte, len(m.key))
			copy(k, m.key)
			copy(k[m.pos:], stamp)
			err = b.Set(k, m.param, nil)
			touched.addKey(k)
		case opVersionstampedValue:
			v := make([]byte, len(m.param))
			copy(v, m.param)
			copy(v[m.pos:], stamp)
			err = b.Set(m.key, v, nil)
			touched.addKey(m.key)
		default:
			var old []byte
			present := false
			v, closer, gerr := b.Get(m.key)
			switch {
			case gerr == nil:
				old, present = clone(v), true
				closer.Close()
			case gerr != pebble.ErrNotFound:
				return gerr
			}
			nv, exists := applyAtomic(m.op, old, present, m.param)
			if exists {
				err = b.Set(m.key, nv, nil)
			} else {
				err = b.Delete(m.key, nil)
			}
			touched.addKey(m.key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// touchSet collects what a batch wrote, for watches.
type touchSet struct {
	keys  [][]byte
	spans []span
}

func (t *touchSet) addKey(k []byte) { t.keys = append(t.keys, k) }
func (t *touchSet) addSpan(s span)  { t.spans = append(t.spans, s) }
