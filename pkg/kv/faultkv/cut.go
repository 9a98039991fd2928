package faultkv

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// ErrCut is what a cut-off database answers: not a FoundationDB error, so
// no retry loop retries it.
var ErrCut = errors.New("faultkv: the database is cut off")

// Cuttable is a database that a test can cut off from its store, as a
// process that dies is: from Cut on, every transaction fails with ErrCut
// at its start and at every call of the function it runs (a commit in
// flight may still land, as when a process dies). Everything else passes
// through.
type Cuttable struct {
	kv.Database
	cut  atomic.Bool
	hang atomic.Int64 // how long a transaction hangs, in nanoseconds; 0: no hang
}

// NewCuttable wraps db.
func NewCuttable(db kv.Database) *Cuttable { return &Cuttable{Database: db} }

// Cut cuts the database off for good.
func (d *Cuttable) Cut() { d.cut.Store(true) }

// Hang cuts the database off for good as a firewall rule does to a
// FoundationDB client: from Hang on, every transaction of Transact and
// ReadTransact waits, answering nothing, until its context ends or
// timeout passes (a real client's transaction timeout), and then fails
// with ErrCut.
func (d *Cuttable) Hang(timeout time.Duration) { d.hang.Store(int64(max(timeout, 1))) }

// hung waits as a hung transaction does (Hang); false when not hung.
func (d *Cuttable) hung(ctx context.Context) (bool, error) {
	timeout := time.Duration(d.hang.Load())
	if timeout == 0 {
		return false, nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true, ctx.Err()
	case <-t.C:
		return true, ErrCut
	}
}

// Transact implements kv.Database.
func (d *Cuttable) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	if hung, err := d.hung(ctx); hung {
		return nil, err
	}
	if d.cut.Load() {
		return nil, ErrCut
	}
	return d.Database.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if d.cut.Load() {
			return nil, ErrCut
		}
		return f(tr)
	})
}

// ReadTransact implements kv.Database.
func (d *Cuttable) ReadTransact(ctx context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	if hung, err := d.hung(ctx); hung {
		return nil, err
	}
	if d.cut.Load() {
		return nil, ErrCut
	}
	return d.Database.ReadTransact(ctx, func(tr kv.ReadTransaction) (any, error) {
		if d.cut.Load() {
			return nil, ErrCut
		}
		return f(tr)
	})
}

// CreateTransaction implements kv.Database.
func (d *Cuttable) CreateTransaction() (kv.Transaction, error) {
	if d.cut.Load() {
		return nil, ErrCut
	}
	return d.Database.CreateTransaction()
}
