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
	db      *DB
	fut     *future[struct{}]
	snap    *snapshot       // the read version's, held until resolved; may be nil
	vs      *future[kv.Key] // the versionstamp's, if it was asked for before Commit

	// Set by the leader before fut is resolved.
	version int64
	stamp   []byte
	err     error
}

// enqueue hands r to the leader, unless writes wait for the disk: then r
// fails at once, not committed.
func (db *DB) enqueue(r *commitReq) {
	if err := db.health.commitRefusal(); err != nil {
		r.finish(err)
		return
	}
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
	db.inflightMu.Lock()
	for _, r := range batch {
		db.inflight[r] = struct{}{}
	}
	db.inflightMu.Unlock()
	return batch, false
}

// refuseCommits runs when writes start waiting for the disk: queued commits
// fail with the refusal (they never reached pebble), commits the leader
// has taken fail with commit_unknown_result (they may still happen once the
// writes complete).
func (db *DB) refuseCommits() {
	err := db.health.commitRefusal()
	if err == nil {
		return // the writes completed meanwhile
	}
	db.failPending(err)
}

// failPending fails the queued commits with err and those in flight with
// commit_unknown_result.
func (db *DB) failPending(err error) {
	db.qmu.Lock()
	queued := db.queue
	db.queue = nil
	db.inflightMu.Lock()
	taken := make([]*commitReq, 0, len(db.inflight))
	for r := range db.inflight {
		taken = append(taken, r)
	}
	db.inflightMu.Unlock()
	db.qmu.Unlock()
	for _, r := range queued {
		r.finish(err)
	}
	for _, r := range taken {
		r.fail(errUnknownResult)
	}
}

// syncQueueDepth is how many written batches may wait for the syncer. With
// none, the leader hands a batch over only when the syncer takes it: while
// one sync runs, the leader resolves and writes the next batch and then
// waits, so the commits arriving meanwhile form one large batch.
const syncQueueDepth = 0

// pending is a batch written to pebble without sync, waiting for the
// syncer to make it durable and publish it.
type pending struct {
	batch   []*commitReq
	snap    *snapshot // the state right after the batch
	touched touchSet
}

// leader is the commit sequencer and resolver: it takes batches of queued
// transactions, resolves them in order, writes the accepted ones to pebble
// without waiting for the WAL sync, and hands the batch to the syncer. It
// runs until Close.
func (db *DB) leader() {
	defer close(db.synced)
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

// syncer makes written batches durable: one WAL sync covers every batch
// waiting, after which their state is published, their watches fire and
// their transactions are acknowledged, in order. Readers never see a batch
// before its sync returns.
func (db *DB) syncer() {
	defer close(db.stopped)
	var group []*pending
	for p := range db.synced {
		group = append(group[:0], p)
	drain:
		for {
			select {
			case q, ok := <-db.synced:
				if !ok {
					break drain
				}
				group = append(group, q)
			default:
				break drain
			}
		}
		err := db.storeFailure()
		if err == nil {
			if err = db.pdb.LogData(nil, pebble.Sync); err != nil {
				db.setFailure(err)
			}
			db.stats.syncs.Add(1)
		}
		if err != nil {
			for _, q := range group {
				q.snap.release()
				failBatch(q.batch)
			}
			continue
		}
		last := group[len(group)-1]
		for _, q := range group[:len(group)-1] {
			q.snap.release()
		}
		db.publish(last.snap)
		var armed []*watch
		var touched touchSet
		for _, q := range group {
			touched.keys = append(touched.keys, q.touched.keys...)
			touched.spans = append(touched.spans, q.touched.spans...)
			for _, r := range q.batch {
				if r.err == nil {
					armed = append(armed, r.watches...)
				}
			}
		}
		db.watches.afterCommit(last.snap, &touched, armed)
		for _, q := range group {
			for _, r := range q.batch {
				r.finish(r.err)
			}
		}
		clear(group)
	}
}

func (db *DB) storeFailure() error {
	db.failMu.Lock()
	defer db.failMu.Unlock()
	if db.failed == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrStoreFailed, db.failed)
}

func (db *DB) setFailure(err error) {
	db.failMu.Lock()
	defer db.failMu.Unlock()
	if db.failed == nil {
		db.failed = err
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

// advanceHorizon lets the resolver forget writes that no transaction can
// conflict with any more: those at or below the oldest read version still
// in use. Every transaction holds its snapshot until the leader has
// resolved it, and one without a snapshot reads at the newest version, so
// the history stays as short as the longest-running transaction.
func (db *DB) advanceHorizon(work int) {
	if oldest := db.oldestLive(); oldest >= 0 {
		db.res.gc(oldest, work)
	}
	db.stats.history.Store(int64(db.res.tree.Len()))
}

// commitBatch resolves the transactions of batch in order and writes the
// accepted ones in one pebble batch (not yet synced) for the syncer.
func (db *DB) commitBatch(batch []*commitReq) {
	if err := db.storeFailure(); err != nil {
		for _, r := range batch {
			r.finish(err)
		}
		return
	}
	if db.testHookBatch != nil {
		db.testHookBatch(len(batch))
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
	p := &pending{batch: batch}
	p.touched.keys = make([][]byte, 0, 2*len(batch))
	accepted := 0
	inserted := 0
	for _, r := range batch {
		if len(r.reads) > 0 {
			if r.rv < db.res.horizon {
				r.err = errTooOld
				db.stats.tooOld.Add(1)
				continue
			}
			if db.res.conflicts(r.reads, r.rv) {
				r.err = errNotCommitted
				db.stats.conflicts.Add(1)
				continue
			}
		}
		stamp := make([]byte, 10)
		binary.BigEndian.PutUint64(stamp, uint64(cv))
		binary.BigEndian.PutUint16(stamp[8:], uint16(accepted))
		if err := applyMutations(b, r.muts, stamp, &p.touched); err != nil {
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
	for _, r := range batch {
		r.releaseSnapshot()
	}
	if accepted == 0 {
		for _, r := range batch {
			r.finish(r.err)
		}
		return
	}
	var vb [8]byte
	binary.BigEndian.PutUint64(vb[:], uint64(cv))
	if err := b.Set(versionKey, vb[:], nil); err != nil {
		db.fail(batch, err)
		return
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		db.fail(batch, err)
		return
	}
	db.lastVersion = cv
	db.stats.batches.Add(1)
	db.stats.commits.Add(int64(accepted))
	// Only the leader writes, so the snapshot holds exactly this batch and
	// the ones before it.
	p.snap = db.newSnapshot(cv)
	db.synced <- p
	db.advanceHorizon(2*inserted + 16)
}

// fail gives up on batch after a storage error: the transactions whose
// writes were attempted may or may not be durable.
func (db *DB) fail(batch []*commitReq, err error) {
	db.setFailure(err)
	failBatch(batch)
}

// failBatch finishes a batch that could not be made durable.
func failBatch(batch []*commitReq) {
	for _, r := range batch {
		if r.err == nil {
			r.err = errUnknownResult
		}
		r.finish(r.err)
	}
}

// finish resolves r's futures and fails or leaves its watches: watches of
// a successful commit were armed by the leader already. Futures that fail
// already (see fail) keep their error.
func (r *commitReq) finish(err error) {
	r.err = err
	r.releaseSnapshot()
	if err != nil {
		for _, w := range r.watches {
			w.finish(err)
		}
	}
	if r.vs != nil {
		r.vs.set(r.versionstamp())
	}
	r.fut.set(struct{}{}, err)
	r.db.inflightMu.Lock()
	delete(r.db.inflight, r)
	r.db.inflightMu.Unlock()
}

// fail resolves r's commit and versionstamp futures with err before the
// commit finishes (an operation during the commit, a cancel, a disk that
// stopped taking writes). The commit itself goes on and may still happen;
// its watches follow its real outcome.
func (r *commitReq) fail(err error) {
	if r.vs != nil {
		r.vs.fail(err)
	}
	r.fut.fail(err)
}

// outcome reports whether r's future is resolved, and its error.
func (r *commitReq) outcome() (bool, error) { return r.fut.result() }

func (r *commitReq) releaseSnapshot() {
	if r.snap != nil {
		r.snap.release()
		r.snap = nil
	}
}

func (r *commitReq) versionstamp() (kv.Key, error) {
	if r.err != nil {
		return nil, r.err
	}
	return kv.Key(r.stamp), nil
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
