package faultkv

import (
	"context"
	"errors"
	"sync/atomic"

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
	cut atomic.Bool
}

// NewCuttable wraps db.
func NewCuttable(db kv.Database) *Cuttable { return &Cuttable{Database: db} }

// Cut cuts the database off for good.
func (d *Cuttable) Cut() { d.cut.Store(true) }

// Transact implements kv.Database.
func (d *Cuttable) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
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
