package fdbjobs

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Key layout (under Config.Subspace; see doc.go for the table).
const (
	keyData            = 1  // (1, Type, JobID) -> row
	keyPending         = 2  // (2, Type, Shard, STime, JobID) -> row or "" (pendingValue)
	keyWatchesPending  = 3  // (3, Type) -> int64 LE counter
	keyActivityTimeout = 5  // (5, Type) -> (TimeoutMillis)
	keyLeases          = 6  // (6, Type, Shard, Versionstamp, Token) -> (Index, JobID, ...)
	keyTypesVersion    = 8  // (8) -> int64 LE counter
	keyShards          = 9  // (9, Type) -> (Count, High)
	keyLayout          = 10 // (10) -> (LayoutVersion)
	keyPaused          = 11 // (11, Type) -> 0x01 while the type is paused
	keyUnique          = 12 // (12, Type, Key) -> (JobID, Period)
	keyRetain          = 13 // (13, Type, Outcome, FinishedAtMillis, JobID) -> ""
	keyCounts          = 14 // (14, Type, CountState, CountShard) -> int64 LE counter
	keySchedule        = 15 // (15, Name) -> schedule record (JSON)
	keyScheduleDue     = 16 // (16, Kind, NextMillis, Name) -> ""
	keyFeed            = 17 // (17, Kind) -> (KeepMillis)
	keyFeedEvents      = 18 // (18, Kind, Versionstamp) -> (JobID, Event, AtMillis[, Data])
	keyFeedPruned      = 19 // (19, Kind) -> the last pruned event's versionstamp (12 bytes)
	keyLanes           = 20 // (20, Type) -> bit p-1 (fair lane: 3+p) set once a job of priority p was added
	keyLimit           = 21 // (21, Kind) -> (Running)
	keyCapacity        = 22 // (22, Kind, Node) -> (Grant, Want, Versionstamp)
	keyCapacityFence   = 23 // (23, Kind, Node) -> "" while the lease is held
	keyPartLimit       = 24 // (24, Kind) -> (N)
	keyPartRunning     = 25 // (25, Kind, Partition, JobID) -> ""
	keyPartWaiting     = 26 // (26, Kind, Partition, JobID) -> (Looks[, Since])
	keyPartHint        = 27 // (27, Kind, Partition) -> int64 LE counter
	keyPartCount       = 28 // (28, Kind, Partition) -> int64 LE counter of PARTITION_RUNNING entries
	keyPartClaim       = 29 // (29, Kind, Partition): conflict ranges only, never written
	keyPartStarts      = 30 // (30, Kind, Partition) -> int64 LE: the theoretical time of the next start, µs
	keyPartQueue       = 31 // (31, Kind, Partition, Since, JobID) -> "": the waiting jobs in the order they came
	keyFair            = 32 // (32, Kind) -> "": the kind's fair shares are on
	keyPartWeight      = 33 // (33, Kind, Partition) -> (Weight)
	keyPartTag         = 34 // (34, Kind, Partition) -> int64 LE: the partition's last fair tag, ns
	keyLeaseTouched    = 35 // (35, Type, Versionstamp, Token) -> "": a row the lease holds was written, not by an end that knew it
	keyUsage           = 36 // (36, Kind, Partition) -> (Millis, Runs, AtMillis): decayed run time and runs as of AtMillis
	keyCharge          = 37 // (37, Kind, Partition) -> int64 LE: run time charged since the last roll-up, ms
	keyUsagePeriod     = 38 // (38, Kind) -> (AtMillis, IntervalMillis, Coeff, TotalMillis, TotalRuns, Cursor, Token, Cleared): the last roll-up
	keyChargeToken     = 39 // (39, Kind, AtMillis, Token) -> "": a charge page that committed (cleared by a roll-up after chargeTokenKeep)
	keyChargeRuns      = 40 // (40, Kind, Partition) -> int64 LE: runs charged since the last roll-up
	keyPartLeased      = 41 // (41, Kind, Partition, Node) -> int64 LE: the places a Runtime holds (placelease.go)
	keyPartRecall      = 42 // (42, Kind, Node) -> int64 LE counter: bumped by a claim that made a job wait where the Runtime holds places
)

// State is a job's state.
type State int

// Job states. NotFound appears only in events, for a removed job.
const (
	Pending State = iota + 1
	Running
	Finished
	NotFound
)

// String returns the state's name as couch_jobs spells it.
func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Running:
		return "running"
	case Finished:
		return "finished"
	case NotFound:
		return "not_found"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// lock identifies one claim of a job: the random token of the Accept call
// and the job's index within that call's batch. The zero lock (nil token)
// means "not held".
type lock struct {
	token []byte
	index int64
}

func (l lock) held() bool { return l.token != nil }

func (l lock) equal(o lock) bool {
	return l.held() && o.held() && l.index == o.index && bytes.Equal(l.token, o.token)
}

// row is a decoded DATA value.
type row struct {
	state    State
	seq      tuple.Versionstamp // running only: versionstamp of its lease
	seqNew   bool               // seq is to be filled in by this commit
	lock     lock               // running only
	stime    int64
	resubmit bool // running only: re-enqueue at finish
	prev     lock // lock of the last Finish, to recognise a retried Finish
	data     []byte
	// addToken is the token of the last Add or Resubmit call that changed
	// the row, to recognise its retry after commit_unknown_result.
	addToken []byte
	// shard is the shard of the job's pending key, drawn when the job was
	// created and kept for its life (see doc.go, "Shards").
	shard int64
	// stored and storedData are the state and data the store holds for
	// the row (stored 0: none, a row this transaction creates): what its
	// counter is (counts.go). decodeRow sets them, writeRow and clearRow
	// move the row's count from them to what they write.
	stored     State
	storedData []byte
	// storedSeq and storedToken name the lease of a row stored running
	// (its seq and lock token; nil token: none known): writeRow and
	// clearRow mark it touched (touchKey) unless its holder ends the run
	// (holder).
	storedSeq   tuple.Versionstamp
	storedToken []byte
	// holder marks a row an end took as its Accept wrote it (batchWith,
	// Job.known), or a claim read and sends back (sendBack), after which
	// no end takes it as known: a write of it that ends the run touches
	// nothing.
	holder bool
}

type keys struct {
	root     subspace.Subspace
	data     subspace.Subspace
	pending  subspace.Subspace
	leases   subspace.Subspace
	timeouts subspace.Subspace
	// feed is the Client's state for writing its feeds' events (nil:
	// none written, for keys of no Client).
	feed *feedState
}

func newKeys(root subspace.Subspace) keys {
	return keys{
		root:     root,
		data:     root.Sub(keyData),
		pending:  root.Sub(keyPending),
		leases:   root.Sub(keyLeases),
		timeouts: root.Sub(keyActivityTimeout),
	}
}

// dataKey is k.data.Pack(tuple.Tuple{typ, id}), in one allocation: it is
// built several times in each job's life.
func (k keys) dataKey(typ, id string) kv.Key {
	p := k.data.Bytes()
	b := append(make(kv.Key, 0, len(p)+len(typ)+len(id)+4), p...)
	return tuple.AppendString(tuple.AppendString(b, typ), id)
}

func (k keys) pendingKey(typ string, shard, stime int64, id string) kv.Key {
	return k.pending.Pack(tuple.Tuple{typ, shard, stime, id})
}

// pendingRange is the range of the pending keys of typ in shard with a
// scheduled time of at most max.
func (k keys) pendingRange(typ string, shard, max int64) kv.KeyRange {
	return kv.KeyRange{
		Begin: k.pending.Pack(tuple.Tuple{typ, shard}),
		End:   k.pending.Pack(tuple.Tuple{typ, shard, max + 1}),
	}
}

// touchKey marks the lease of typ keyed by versionstamp vs and token as
// touched: a row it holds was written other than by an end that took it
// as known (by Cancel, Resubmit, Remove, the activity monitor, an Update,
// an end that read it; not by a claim that sends its job back to the
// queue, sendBack, after which no end takes that row as known). Until a
// lease is touched, its holder knows its jobs' rows as its Accept wrote
// them, and ends them without reading them (batchWith). It is cleared
// with the lease.
func (k keys) touchKey(typ string, vs tuple.Versionstamp, token []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyLeaseTouched, typ, vs, token})
}

func (k keys) shardsKey(typ string) kv.Key { return k.root.Pack(tuple.Tuple{keyShards, typ}) }

func (k keys) layout() kv.Key { return k.root.Pack(tuple.Tuple{keyLayout}) }

func (k keys) pausedKey(typ string) kv.Key { return k.root.Pack(tuple.Tuple{keyPaused, typ}) }

func (k keys) uniqueKey(typ string, key []byte) kv.Key {
	return k.root.Pack(tuple.Tuple{keyUnique, typ, key})
}

func (k keys) watchesPending(typ string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyWatchesPending, typ})
}

func (k keys) timeoutKey(typ string) kv.Key { return k.timeouts.Pack(tuple.Tuple{typ}) }

func (k keys) typesVersion() kv.Key { return k.root.Pack(tuple.Tuple{keyTypesVersion}) }

func (k keys) leaseKey(typ string, shard int64, vs tuple.Versionstamp, token []byte) kv.Key {
	return k.leases.Pack(tuple.Tuple{typ, shard, vs, token})
}

// leaseRange is the range of the leases of typ in shard written by commits
// after version since and at or before version until.
func (k keys) leaseRange(typ string, shard, since, until int64) kv.KeyRange {
	return kv.KeyRange{
		Begin: k.leases.Pack(tuple.Tuple{typ, shard, versionstampAt(since + 1)}),
		End:   k.leases.Pack(tuple.Tuple{typ, shard, versionstampAt(until + 1)}),
	}
}

// versionstampAt is the first versionstamp of a commit at version.
func versionstampAt(version int64) tuple.Versionstamp {
	var vs tuple.Versionstamp
	binary.BigEndian.PutUint64(vs.TransactionVersion[:8], uint64(version))
	return vs
}

// writeLease writes, in tr, the lease of the jobs ids (at lock indexes
// idx) held under token, keyed by this commit's versionstamp (the rows
// written with a new seq in the same commit carry the same one) under a
// shard of the jobs' (leases are spread as pending keys are: no tail
// that every accept of a type appends to).
func (k keys) writeLease(tr kv.Transaction, typ string, shard int64, token []byte, idx []int64, ids []string) {
	key, err := k.leases.PackWithVersionstamp(tuple.Tuple{typ, shard, tuple.IncompleteVersionstamp(0), token})
	if err != nil {
		panic(err)
	}
	v := make(tuple.Tuple, 0, 2*len(ids))
	for i, id := range ids {
		v = append(v, idx[i], id)
	}
	tr.SetVersionstampedKey(key, v.Pack())
}

// leaseEntry is one job of a lease.
type leaseEntry struct {
	index int64
	id    string
}

// decodeLease decodes a lease key and value.
func (k keys) decodeLease(key kv.Key, value []byte) (vs tuple.Versionstamp, token []byte, entries []leaseEntry, err error) {
	t, err := k.leases.Unpack(key)
	if err != nil || len(t) != 4 {
		return vs, nil, nil, fmt.Errorf("fdbjobs: bad lease key %x", key)
	}
	vs, ok1 := t[2].(tuple.Versionstamp)
	token, ok2 := t[3].([]byte)
	v, err := tuple.Unpack(value)
	if !ok1 || !ok2 || err != nil || len(v)%2 != 0 {
		return vs, nil, nil, fmt.Errorf("fdbjobs: bad lease %x", key)
	}
	for i := 0; i < len(v); i += 2 {
		idx, ok1 := intElem(v[i])
		id, ok2 := v[i+1].(string)
		if !ok1 || !ok2 {
			return vs, nil, nil, fmt.Errorf("fdbjobs: bad lease %x", key)
		}
		entries = append(entries, leaseEntry{idx, id})
	}
	return vs, token, entries, nil
}

// prefixRange is the range of every key whose tuple under ss extends t
// with more elements: (packed t)+0x00 to (packed t)+0xff, as a tuple
// subspace's range. (Not the packed bytes' Strinc: that range also holds
// the keys of a longer string or bytes element, "p\x00" beside "p", whose
// packing extends "p"'s.)
func prefixRange(ss subspace.Subspace, t tuple.Tuple) kv.KeyRange {
	p := ss.Pack(t)
	return kv.KeyRange{Begin: append(p[:len(p):len(p)], 0x00), End: append(p[:len(p):len(p)], 0xff)}
}

var one = kv.Int64(1)

// bumpPending wakes acceptors blocked on the type's pending watch: once in
// every transaction that enqueues jobs of typ.
func (k keys) bumpPending(tr kv.Transaction, typ string) { tr.Add(k.watchesPending(typ), one) }

// encodeRow packs r. For a running row whose seq is new, the value holds an
// incomplete versionstamp and versionstamped is true.
func encodeRow(r *row) (value []byte, versionstamped bool) {
	b := make([]byte, 0, 80+len(r.data)+len(r.lock.token)+len(r.prev.token)+len(r.addToken))
	vsAt := -1
	switch r.state {
	case Pending:
		b = tuple.AppendInt(b, 0)
	case Finished:
		b = tuple.AppendNil(b)
	case Running:
		if r.seqNew {
			vsAt = len(b) + 1
			b = tuple.AppendVersionstamp(b, tuple.IncompleteVersionstamp(0))
		} else {
			b = tuple.AppendVersionstamp(b, r.seq)
		}
	}
	b = appendToken(b, r.lock.token, r.lock.held())
	b = tuple.AppendInt(b, r.lock.index)
	b = tuple.AppendInt(b, r.stime)
	b = tuple.AppendBool(b, r.resubmit)
	b = appendToken(b, r.prev.token, r.prev.held())
	b = tuple.AppendInt(b, r.prev.index)
	b = tuple.AppendBytes(b, r.data)
	b = appendToken(b, r.addToken, r.addToken != nil)
	b = tuple.AppendInt(b, r.shard)
	if vsAt >= 0 {
		return binary.LittleEndian.AppendUint32(b, uint32(vsAt)), true
	}
	return b, false
}

// appendToken appends token, or nil when not set.
func appendToken(b, token []byte, set bool) []byte {
	if !set {
		return tuple.AppendNil(b)
	}
	return tuple.AppendBytes(b, token)
}

// decodeRow reads a row that encodeRow wrote: a tuple of (state and seq,
// lock token, lock index, stime, resubmit, previous lock token and index,
// data, add token, shard).
func decodeRow(v []byte) (*row, error) {
	bad := func(what string) error { return fmt.Errorf("fdbjobs: bad job row: %s", what) }
	rd := tuple.NewReader(v)
	r := &row{}
	var ok bool
	switch {
	case rd.Nil():
		r.state = Finished
	default:
		if r.seq, ok = rd.Versionstamp(); ok {
			r.state = Running
		} else if rd.Skip() {
			r.state = Pending
		} else {
			return nil, bad("state")
		}
	}
	if r.lock.token, ok = readToken(&rd); !ok {
		return nil, bad("token")
	}
	if r.lock.index, ok = rd.Int(); !ok {
		return nil, bad("index")
	}
	if r.stime, ok = rd.Int(); !ok {
		return nil, bad("stime")
	}
	if r.resubmit, ok = rd.Bool(); !ok {
		return nil, bad("resubmit")
	}
	if r.prev.token, ok = readToken(&rd); !ok {
		return nil, bad("prev token")
	}
	if r.prev.index, ok = rd.Int(); !ok {
		return nil, bad("prev index")
	}
	if r.data, ok = rd.Bytes(); !ok {
		return nil, bad("data")
	}
	if r.addToken, ok = readToken(&rd); !ok {
		return nil, bad("add token")
	}
	if r.shard, ok = rd.Int(); !ok {
		return nil, bad("shard")
	}
	if !rd.Done() {
		return nil, bad("more than 10 elements")
	}
	if r.state == Running && !r.lock.held() {
		return nil, bad("running without lock")
	}
	r.stored, r.storedData = r.state, r.data
	if r.state == Running {
		r.storedSeq, r.storedToken = r.seq, r.lock.token
	}
	return r, nil
}

// readToken reads a token, or nil.
func readToken(rd *tuple.Reader) ([]byte, bool) {
	if rd.Nil() {
		return nil, true
	}
	return rd.Bytes()
}

func intElem(e tuple.TupleElement) (int64, bool) {
	switch v := e.(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case uint64:
		if v <= 1<<63-1 {
			return int64(v), true
		}
	}
	return 0, false
}

// readRow reads a job's row with a conflicting read; nil when absent.
func (k keys) readRow(tr kv.ReadTransaction, typ, id string) (*row, error) {
	v, err := tr.Get(k.dataKey(typ, id)).Get()
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	return decodeRow(v)
}

// writeRow stores r. A running row with a new seq gets this commit's
// versionstamp, which the caller gives its lease too (writeLease). Every
// write of a row goes through it (and every clear through clearRow), so
// that the counts per state move with the row in the same commit, and a
// pending row's PENDING key, at its shard and scheduled time, is written
// with it (pendingValue; see doc.go, "Pending keys"). Moving a pending
// row to another key or out of the pending state clears the old key: the
// caller's part.
func (k keys) writeRow(tr kv.Transaction, typ, id string, r *row) {
	v, vs := encodeRow(r)
	if vs {
		tr.SetVersionstampedValue(k.dataKey(typ, id), v)
	} else {
		tr.Set(k.dataKey(typ, id), v)
	}
	if r.state == Pending {
		tr.Set(k.pendingKey(typ, r.shard, r.stime, id), pendingValue(v))
	}
	k.touch(tr, typ, r, r.state != Running)
	was, is := k.recount(tr, typ, r.shard, r.stored, r.storedData, r.state, r.data)
	k.feedEvent(tr, typ, id, was, is)
	r.stored, r.storedData = r.state, r.data
	r.storedSeq, r.storedToken = tuple.Versionstamp{}, nil
	if r.state == Running && !r.seqNew {
		r.storedSeq, r.storedToken = r.seq, r.lock.token
	}
}

// touch marks the lease of r's stored row touched (touchKey) unless no
// lease holds it or its holder ends the run (holder and ends: an end that
// took the row as known, or a claim's sendBack), which no other end of
// the lease's need hear of.
func (k keys) touch(tr kv.Transaction, typ string, r *row, ends bool) {
	if r.stored != Running || r.storedToken == nil || (r.holder && ends) {
		return
	}
	tr.Set(k.touchKey(typ, r.storedSeq, r.storedToken), nil)
}

// inlineRowMax bounds the rows a PENDING key's value holds (pendingValue):
// an Accept reading several shards at once reads the values of keys it
// does not take too.
const inlineRowMax = 256

// pendingValue is the value of a pending job's PENDING key, given its
// row's: the row itself when it has at most inlineRowMax bytes, so that
// Accept reads it with the key and not with a read of its own; otherwise
// nothing, and Accept reads the row.
func pendingValue(row []byte) []byte {
	if len(row) > inlineRowMax {
		return nil
	}
	return row
}

// clearRow deletes the row r of job id (read in this transaction).
func (k keys) clearRow(tr kv.Transaction, typ, id string, r *row) {
	tr.Clear(k.dataKey(typ, id))
	k.touch(tr, typ, r, true)
	was, is := k.recount(tr, typ, r.shard, r.stored, r.storedData, 0, nil)
	k.feedEvent(tr, typ, id, was, is)
	r.stored, r.storedData, r.storedSeq, r.storedToken = 0, nil, tuple.Versionstamp{}, nil
}

// enqueue makes r pending at stime and writes its pending key, in the
// row's shard. The caller wakes the type's acceptors with bumpPending,
// once per transaction.
func (k keys) enqueue(tr kv.Transaction, typ, id string, r *row, stime int64) {
	if isFairLane(r.shard) {
		// Enqueued again (retried, snoozed, handed back, resubmitted), a
		// job waits for its time as others do, not for its fair place.
		r.shard = queueShard(shardBase(r.shard), shardPriority(r.shard))
	}
	k.enqueueIn(tr, typ, id, r, stime)
}

// enqueueIn is enqueue in r's queue shard, a fair lane too.
func (k keys) enqueueIn(tr kv.Transaction, typ, id string, r *row, stime int64) {
	r.state, r.seq, r.seqNew, r.lock, r.resubmit, r.stime = Pending, tuple.Versionstamp{}, false, lock{}, false, stime
	k.writeRow(tr, typ, id, r)
}

// jobInfo decodes e, a DATA row of typ read from a range; ok is false for
// a key that is not a job's row.
func (k keys) jobInfo(typ string, e kv.KeyValue) (j JobInfo, ok bool, err error) {
	t, err := k.data.Unpack(e.Key)
	if err != nil || len(t) != 2 {
		return JobInfo{}, false, nil
	}
	id, _ := t[1].(string)
	r, err := decodeRow(e.Value)
	if err != nil {
		return JobInfo{}, false, err
	}
	return JobInfo{Type: typ, ID: id, State: r.state, ScheduledTime: r.stime, Priority: shardPriority(r.shard), Data: r.data}, true, nil
}

// decodeRows waits for the DATA reads futs and decodes them, in order;
// a job that does not exist gives nil.
func decodeRows(futs []kv.FutureByteSlice) ([]*row, error) {
	out := make([]*row, len(futs))
	for i, f := range futs {
		v, err := f.Get()
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		if out[i], err = decodeRow(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}
