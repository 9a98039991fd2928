package fdbjobs

// Counts of a type's jobs per state, kept in the store.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// countShards is how many keys each (type, state) count is spread over,
// chosen by the job's queue shard (drawn from its id's hash: see doc.go,
// "Shards"): every transaction that moves a job from one state to another
// adds -1 and +1 to the keys of that job's count shard (atomic adds, which
// conflict with nothing), so no key is written by every transaction of a
// type, and Counts reads them all in one range. The jobs an Accept takes
// from one queue shard share their count keys, so that its transaction
// (and the Finish of them) adds to two keys, not two per job
// (coalesceAdds).
const countShards = 8

// JobCounts are the jobs of a type in each state, as Counts reads them.
// Pending counts every pending job: due now (available), due later
// (scheduled), and waiting for a retry (retrying). A finished job without
// a runtime outcome (the lower-level Finish, AddFinished) counts as
// completed.
type JobCounts struct {
	Pending   int64 `json:"pending"`
	Running   int64 `json:"running"`
	Completed int64 `json:"completed"`
	Cancelled int64 `json:"cancelled"`
	Discarded int64 `json:"discarded"`
}

// field is the count of state (a countState), nil for another.
func (n *JobCounts) field(state string) *int64 {
	switch state {
	case StatePending:
		return &n.Pending
	case StateRunning:
		return &n.Running
	case OutcomeCompleted:
		return &n.Completed
	case OutcomeCancelled:
		return &n.Cancelled
	case OutcomeDiscarded:
		return &n.Discarded
	}
	return nil
}

// countStates are the states counted, in JobCounts' order.
var countStates = []string{StatePending, StateRunning, OutcomeCompleted, OutcomeCancelled, OutcomeDiscarded}

// Counts returns how many jobs of kind (any type, also one of the
// lower-level API) are in each state, from the counts the store keeps:
// one range of a few dozen keys read as a snapshot (it never makes a
// caller's transaction conflict), whatever the number of jobs. Every
// transaction that creates, moves or removes a job updates them in the
// same commit. A store whose jobs an earlier layout wrote is counted by
// Migrate (see LayoutVersion).
func (c *Client) Counts(ctx context.Context, tx kv.ReadTransactor, kind string) (JobCounts, error) {
	if err := checkName("kind", kind); err != nil {
		return JobCounts{}, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (JobCounts, error) {
		kvs, err := tr.Snapshot().GetRange(prefixRange(c.k.root, tuple.Tuple{keyCounts, kind}), kv.RangeOptions{}).GetSliceWithError()
		if err != nil {
			return JobCounts{}, err
		}
		var n JobCounts
		for _, e := range kvs {
			t, err := c.k.root.Unpack(e.Key)
			if err != nil || len(t) != 4 {
				return JobCounts{}, fmt.Errorf("fdbjobs: bad count key %s", e.Key)
			}
			state, _ := t[2].(string)
			if f := n.field(state); f != nil {
				*f += kv.DecodeInt64(e.Value)
			}
		}
		return n, nil
	})
}

func (k keys) countKey(typ, state string, shard int64) kv.Key {
	return k.root.Pack(tuple.Tuple{keyCounts, typ, state, shard})
}

// recount moves the count of a job of queue shard shard from the state
// (and data) the store held to the one written (0: none), in tr, and
// returns the count states it moved from and to ("" for none; equal when
// it moved nothing).
func (k keys) recount(tr kv.Transaction, typ string, shard int64, from State, fromData []byte, to State, toData []byte) (was, is string) {
	if from == to && (to != Finished || bytes.Equal(fromData, toData)) {
		return "", "" // the outcome, in a finished row's data, is all that can differ
	}
	if from != 0 {
		was = countState(from, fromData)
	}
	if to != 0 {
		is = countState(to, toData)
	}
	if was == is {
		return was, is
	}
	at, _ := tr.(*addTx)
	for _, c := range [...]struct {
		state string
		delta int64
	}{{was, -1}, {is, 1}} {
		if c.state == "" {
			continue
		}
		id := countID{typ, c.state, shard % countShards}
		if at == nil || !at.count(k, id, c.delta) { // packed once, at flush
			tr.Add(k.countKey(id.typ, id.state, id.shard), kv.Int64(c.delta))
		}
	}
	return was, is
}

// countState is the state a row of state s with data is counted in (and
// UniqueOpts.ByState names): StatePending, StateRunning, or for a finished
// job its outcome, OutcomeCompleted when its data has none (a job of the
// lower-level API).
func countState(s State, data []byte) string {
	switch s {
	case Pending:
		return StatePending
	case Running:
		return StateRunning
	}
	if o, ok := envelopeOutcome(data); ok {
		return o
	}
	return decodedOutcome(data)
}

// decodedOutcome is the count state of a finished row's data, decoded.
func decodedOutcome(data []byte) string {
	// Only a runtime envelope written with an outcome other than
	// completed needs decoding: the others have no "outcome" key.
	if bytes.Contains(data, []byte(`"outcome"`)) {
		var e struct {
			Args    json.RawMessage `json:"args"`
			Outcome string          `json:"outcome"`
		}
		if json.Unmarshal(data, &e) == nil && e.Args != nil && (e.Outcome == OutcomeCancelled || e.Outcome == OutcomeDiscarded) {
			return e.Outcome
		}
	}
	return OutcomeCompleted
}

// envelopeOutcome reads the outcome of a finished row's data as
// countState's decoding would, without decoding, when data ends as the
// Runtime's envelope does (its outcome and finish time are its last
// fields, but for a partitioned job's partition): {"args":…,"outcome":"o"}
// or {"args":…,"outcome":"o","finished_at":n}, then ,"partition":"p".
// Valid JSON (what the store holds) cannot end so inside a string: the
// quote before outcome follows a comma. ok is false for other data,
// which countState decodes.
func envelopeOutcome(data []byte) (string, bool) {
	const prefix, key, at = `{"args":`, `,"outcome":"`, `","finished_at":`
	if !bytes.HasPrefix(data, []byte(prefix)) || !bytes.HasSuffix(data, []byte("}")) {
		return "", false
	}
	rest := data[:len(data)-1]
	if r, _, ok := trailingPartition(data); ok {
		rest = r // a partitioned job's: its partition follows
	}
	if i := bytes.LastIndex(rest, []byte(at)); i >= 0 && isDigits(rest[i+len(at):]) {
		rest = rest[:i+1] // up to the outcome's closing quote
	}
	if !bytes.HasSuffix(rest, []byte(`"`)) {
		return "", false
	}
	rest = rest[:len(rest)-1]
	i := bytes.LastIndex(rest, []byte(key))
	if i < len(prefix) {
		return "", false
	}
	switch o := string(rest[i+len(key):]); o {
	case OutcomeCancelled, OutcomeDiscarded:
		return o, true
	case OutcomeCompleted:
		return OutcomeCompleted, true
	}
	return "", false
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// countType sets typ's counts to those of a full read of its rows, in
// pages, unless the store is in LayoutVersion already (see Migrate: no
// Client writes jobs meanwhile, and once the layout is recorded, Clients
// keep the counts themselves).
func (c *Client) countType(ctx context.Context, typ string) error {
	var n JobCounts
	err := kv.ReadPages(ctx, c.db, prefixRange(c.k.data, tuple.Tuple{typ}), migratePage, func(page []kv.KeyValue) (bool, error) {
		for _, e := range page {
			r, err := decodeRow(e.Value)
			if err != nil {
				return false, fmt.Errorf("job row %s: %w", e.Key, err)
			}
			*n.field(countState(r.state, r.data))++
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	_, err = kv.Transact(ctx, c.db, func(tr kv.Transaction) (any, error) {
		v, err := tr.Get(c.k.layout()).Get()
		if err != nil {
			return nil, err
		}
		if v != nil && bytes.Equal(v, layoutValue(LayoutVersion)) {
			return nil, nil // another Migrate finished first: Clients may be counting
		}
		tr.ClearRange(prefixRange(c.k.root, tuple.Tuple{keyCounts, typ}))
		for _, s := range countStates {
			if v := *n.field(s); v != 0 {
				tr.Set(c.k.countKey(typ, s, 0), kv.Int64(v))
			}
		}
		return nil, nil
	})
	return err
}

// addTx is a transaction whose 8-byte atomic adds are summed per key until
// flush writes one add per key: a transaction that moves many jobs adds
// once to each count key it touches (each atomic operation costs its own
// read where the store applies it).
type addTx struct {
	kv.Transaction
	sums map[string]int64
	keys []string // in the order first added
	// counts are recount's adds, by count key not yet packed.
	counts  map[countID]int64
	countIn []countID // in the order first added
	ck      keys
	// events are the feeds' events of the transaction, by kind (in the
	// order of kinds first met), written together at flush (putEvents)
	// with ek and eft, the keys and the attempt that met them.
	events map[string][]tuple.Tuple
	kinds  []string
	ek     keys
	eft    *feedTx
}

// countID names a count key: countKey(typ, state, shard).
type countID struct {
	typ, state string
	shard      int64
}

// count adds delta to the count id of k, unless the transaction's counts
// are another root's (false: the caller adds it itself).
func (t *addTx) count(k keys, id countID, delta int64) bool {
	if t.counts == nil {
		t.counts, t.ck = map[countID]int64{}, k
	} else if !bytes.Equal(t.ck.root.Bytes(), k.root.Bytes()) {
		return false
	}
	if _, ok := t.counts[id]; !ok {
		t.countIn = append(t.countIn, id)
	}
	t.counts[id] += delta
	return true
}

// event keeps e, an event of kind's feed, for flush, unless the
// transaction's events are another root's or another attempt's (false:
// the caller writes it itself).
func (t *addTx) event(k keys, ft *feedTx, kind string, e tuple.Tuple) bool {
	if t.events == nil {
		t.events, t.ek, t.eft = map[string][]tuple.Tuple{}, k, ft
	} else if t.eft != ft || !bytes.Equal(t.ek.root.Bytes(), k.root.Bytes()) {
		return false
	}
	if _, ok := t.events[kind]; !ok {
		t.kinds = append(t.kinds, kind)
	}
	t.events[kind] = append(t.events[kind], e)
	return true
}

func (t *addTx) Add(key kv.KeyConvertible, param []byte) {
	if len(param) != 8 {
		t.Transaction.Add(key, param)
		return
	}
	k := string(key.FDBKey())
	if _, ok := t.sums[k]; !ok {
		t.keys = append(t.keys, k)
	}
	t.sums[k] += kv.DecodeInt64(param)
}

// Set writes key after the adds to it so far, which it supersedes (they
// are not written at flush: an exact count set after adds of the same
// transaction stays exact).
func (t *addTx) Set(key kv.KeyConvertible, value []byte) {
	t.drop(key)
	t.Transaction.Set(key, value)
}

// Clear clears key, superseding the adds to it so far.
func (t *addTx) Clear(key kv.KeyConvertible) {
	t.drop(key)
	t.Transaction.Clear(key)
}

// ClearRange clears r, superseding the adds so far to the keys in it.
func (t *addTx) ClearRange(r kv.ExactRange) {
	if len(t.keys) > 0 {
		b, e := r.FDBRangeKeys()
		begin, end := string(b.FDBKey()), string(e.FDBKey())
		for _, k := range t.keys {
			if k >= begin && k < end {
				t.sums[k] = 0
			}
		}
	}
	t.Transaction.ClearRange(r)
}

// Get reads key with the adds to it so far (written now, not at flush).
func (t *addTx) Get(key kv.KeyConvertible) kv.FutureByteSlice {
	if len(t.sums) > 0 {
		if b := key.FDBKey(); t.sums[string(b)] != 0 {
			t.Transaction.Add(key, kv.Int64(t.sums[string(b)]))
			t.sums[string(b)] = 0
		}
	}
	return t.Transaction.Get(key)
}

// drop forgets the adds to key so far.
func (t *addTx) drop(key kv.KeyConvertible) {
	if len(t.sums) == 0 {
		return
	}
	if b := key.FDBKey(); t.sums[string(b)] != 0 { // (no string allocated for the look-up)
		t.sums[string(b)] = 0
	}
}

// coalesceAdds returns tr summing its adds, and the function that writes
// them, to call before the transaction body returns. Reads and writes of a
// key through it see the adds to it before them; reads through its
// Snapshot, and range reads, do not (no caller reads a key it added to
// so).
func coalesceAdds(tr kv.Transaction) (kv.Transaction, func()) {
	t := &addTx{Transaction: tr, sums: map[string]int64{}}
	return t, func() {
		for _, kind := range t.kinds {
			t.ek.putEvents(t.Transaction, t.eft, kind, t.events[kind])
		}
		t.events, t.kinds, t.eft = nil, nil, nil
		for _, id := range t.countIn {
			if v := t.counts[id]; v != 0 {
				t.Add(t.ck.countKey(id.typ, id.state, id.shard), kv.Int64(v))
			}
		}
		for _, k := range t.keys {
			if v := t.sums[k]; v != 0 {
				t.Transaction.Add(kv.Key(k), kv.Int64(v))
			}
		}
		t.keys, t.sums = nil, map[string]int64{}
		t.countIn, t.counts = nil, nil
	}
}
