package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// countingDB counts what the read-write transactions run through it cost
// the store: their attempts (retries included) and commits, and the
// mutations and conflict ranges of the attempts that committed, as
// FoundationDB's commit proxies and resolvers see them (a write conflict
// range per mutation, a read conflict range per conflicting read or
// explicit read conflict). Read-only transactions are not counted.
type countingDB struct {
	kv.Database
	attempts, commits                  atomic.Int64
	mutations, readRanges, writeRanges atomic.Int64
	// reads counts the read-only transactions' attempts (the cost of
	// an idle store: schedules).
	reads atomic.Int64
}

// ReadTransact counts the attempts of f.
func (d *countingDB) ReadTransact(ctx context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return d.Database.ReadTransact(ctx, func(tr kv.ReadTransaction) (any, error) {
		d.reads.Add(1)
		return f(tr)
	})
}

// txCounts are one attempt's counters.
type txCounts struct{ mutations, readRanges, writeRanges int64 }

// Transact counts the attempts of f and, once it committed, the last
// attempt's mutations and conflict ranges.
func (d *countingDB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	var last txCounts
	v, err := d.Database.Transact(ctx, func(tr kv.Transaction) (any, error) {
		d.attempts.Add(1)
		ct := &countingTx{Transaction: tr}
		v, err := f(ct)
		last = ct.n
		return v, err
	})
	if err == nil {
		d.commits.Add(1)
		d.mutations.Add(last.mutations)
		d.readRanges.Add(last.readRanges)
		d.writeRanges.Add(last.writeRanges)
	}
	return v, err
}

// kvCost is a snapshot of a countingDB's counters.
type kvCost struct{ attempts, commits, mutations, readRanges, writeRanges int64 }

func (d *countingDB) cost() kvCost {
	return kvCost{d.attempts.Load(), d.commits.Load(), d.mutations.Load(), d.readRanges.Load(), d.writeRanges.Load()}
}

// sub is c less an earlier snapshot.
func (c kvCost) sub(o kvCost) kvCost {
	return kvCost{c.attempts - o.attempts, c.commits - o.commits, c.mutations - o.mutations, c.readRanges - o.readRanges, c.writeRanges - o.writeRanges}
}

func (c kvCost) add(o kvCost) kvCost {
	return kvCost{c.attempts + o.attempts, c.commits + o.commits, c.mutations + o.mutations, c.readRanges + o.readRanges, c.writeRanges + o.writeRanges}
}

// MarshalJSON and UnmarshalJSON carry a kvCost from a jobs-node process
// to its parent.
func (c kvCost) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]int64{"attempts": c.attempts, "commits": c.commits, "mutations": c.mutations,
		"read_ranges": c.readRanges, "write_ranges": c.writeRanges})
}

func (c *kvCost) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*c = kvCost{m["attempts"], m["commits"], m["mutations"], m["read_ranges"], m["write_ranges"]}
	return nil
}

// perJob prints the cost of jobs jobs: attempts per committed
// transaction, mutations and conflict ranges per job.
func (c kvCost) perJob(jobs int64) string {
	if c.commits == 0 || jobs == 0 {
		return "no transactions"
	}
	j := float64(jobs)
	return fmt.Sprintf("%.2f attempts/tx, %.2f mutations/job, conflict ranges/job %.2f read + %.2f write",
		float64(c.attempts)/float64(c.commits), float64(c.mutations)/j, float64(c.readRanges)/j, float64(c.writeRanges)/j)
}

// countingTx counts one attempt's mutations and conflict ranges.
type countingTx struct {
	kv.Transaction
	n txCounts
}

func (t *countingTx) write()                            { t.n.mutations++; t.n.writeRanges++ }
func (t *countingTx) Set(k kv.KeyConvertible, v []byte) { t.write(); t.Transaction.Set(k, v) }
func (t *countingTx) Clear(k kv.KeyConvertible)         { t.write(); t.Transaction.Clear(k) }
func (t *countingTx) ClearRange(r kv.ExactRange)        { t.write(); t.Transaction.ClearRange(r) }
func (t *countingTx) Add(k kv.KeyConvertible, p []byte) { t.write(); t.Transaction.Add(k, p) }
func (t *countingTx) Max(k kv.KeyConvertible, p []byte) { t.write(); t.Transaction.Max(k, p) }
func (t *countingTx) Min(k kv.KeyConvertible, p []byte) { t.write(); t.Transaction.Min(k, p) }
func (t *countingTx) BitAnd(k kv.KeyConvertible, p []byte) {
	t.write()
	t.Transaction.BitAnd(k, p)
}
func (t *countingTx) BitOr(k kv.KeyConvertible, p []byte) { t.write(); t.Transaction.BitOr(k, p) }
func (t *countingTx) BitXor(k kv.KeyConvertible, p []byte) {
	t.write()
	t.Transaction.BitXor(k, p)
}
func (t *countingTx) ByteMax(k kv.KeyConvertible, p []byte) {
	t.write()
	t.Transaction.ByteMax(k, p)
}
func (t *countingTx) ByteMin(k kv.KeyConvertible, p []byte) {
	t.write()
	t.Transaction.ByteMin(k, p)
}
func (t *countingTx) CompareAndClear(k kv.KeyConvertible, p []byte) {
	t.write()
	t.Transaction.CompareAndClear(k, p)
}
func (t *countingTx) SetVersionstampedKey(k kv.KeyConvertible, v []byte) {
	t.write()
	t.Transaction.SetVersionstampedKey(k, v)
}
func (t *countingTx) SetVersionstampedValue(k kv.KeyConvertible, v []byte) {
	t.write()
	t.Transaction.SetVersionstampedValue(k, v)
}

func (t *countingTx) Get(k kv.KeyConvertible) kv.FutureByteSlice {
	t.n.readRanges++
	return t.Transaction.Get(k)
}

func (t *countingTx) GetKey(sel kv.Selectable) kv.FutureKey {
	t.n.readRanges++
	return t.Transaction.GetKey(sel)
}

func (t *countingTx) GetRange(r kv.Range, o kv.RangeOptions) kv.RangeResult {
	t.n.readRanges++
	return t.Transaction.GetRange(r, o)
}

func (t *countingTx) AddReadConflictKey(k kv.KeyConvertible) error {
	t.n.readRanges++
	return t.Transaction.AddReadConflictKey(k)
}

func (t *countingTx) AddReadConflictRange(r kv.ExactRange) error {
	t.n.readRanges++
	return t.Transaction.AddReadConflictRange(r)
}

func (t *countingTx) AddWriteConflictKey(k kv.KeyConvertible) error {
	t.n.writeRanges++
	return t.Transaction.AddWriteConflictKey(k)
}

func (t *countingTx) AddWriteConflictRange(r kv.ExactRange) error {
	t.n.writeRanges++
	return t.Transaction.AddWriteConflictRange(r)
}

// Transact and ReadTransact run f in this attempt, counted.
func (t *countingTx) Transact(_ context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return f(t)
}

func (t *countingTx) ReadTransact(_ context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return f(t)
}
