package kv

import (
	"context"
	"errors"
	"fmt"
)

// Run is FoundationDB's retry loop, shared by the backends and wrappers:
// create a transaction, run f, commit, and on an Error let tr.OnError decide
// whether to retry. See Transactor.Transact for its contract.
func Run(ctx context.Context, create func() (Transaction, error), f func(Transaction) (any, error)) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tr, err := create()
	if err != nil {
		return nil, err
	}
	// Cancelling a committed transaction would cancel the watches it set, so
	// the transaction is cancelled only when the loop ends without a commit
	// or ctx ends while it runs.
	stop := context.AfterFunc(ctx, tr.Cancel)
	committed := false
	defer func() {
		stop()
		if !committed {
			tr.Cancel()
		}
	}()
	for {
		ret, err := Guard(func() (any, error) { return f(tr) })
		if err == nil {
			_, err = tr.Commit().Get()
			if err == nil {
				committed = true
				tr.Locals().Committed()
				return ret, nil
			}
		}
		tr.Locals().Failed(err)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		var e Error
		if !errors.As(err, &e) {
			return nil, err
		}
		if _, oerr := tr.OnError(e).Get(); oerr != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			// As the binding's retry loop: when OnError gives the error
			// back, the caller gets its own (possibly wrapped) error.
			if HasCode(oerr, e.Code) {
				return nil, err
			}
			return nil, oerr
		}
	}
}

// RunRead is Run for read-only functions. The transaction is committed
// like any other: a read-only commit costs nothing on either backend (no
// commit version, nothing sent), and it arms the watches f set.
func RunRead(ctx context.Context, create func() (Transaction, error), f func(ReadTransaction) (any, error)) (any, error) {
	return Run(ctx, create, func(tr Transaction) (any, error) { return f(tr) })
}

// Guard runs f and turns a panic with an error (as MustGet raises) into a
// returned error; panics with anything else are re-raised. Every backend's
// Transact and ReadTransact run their function through it, as the FDB
// binding's panicToError does.
func Guard(f func() (any, error)) (ret any, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(error)
			if !ok {
				panic(r)
			}
			ret, err = nil, e
		}
	}()
	return f()
}

// Transact is Transactor.Transact with a typed result.
func Transact[T any](ctx context.Context, t Transactor, f func(Transaction) (T, error)) (T, error) {
	return typedResult[T](t.Transact(ctx, func(tr Transaction) (any, error) { return f(tr) }))
}

// ReadTransact is ReadTransactor.ReadTransact with a typed result.
func ReadTransact[T any](ctx context.Context, t ReadTransactor, f func(ReadTransaction) (T, error)) (T, error) {
	return typedResult[T](t.ReadTransact(ctx, func(tr ReadTransaction) (any, error) { return f(tr) }))
}

// typedResult returns a retry loop's result as a T: the zero T on an error
// or a nil result.
func typedResult[T any](ret any, err error) (T, error) {
	var zero T
	if err != nil || ret == nil {
		return zero, err
	}
	v, ok := ret.(T)
	if !ok {
		return zero, fmt.Errorf("kv: transaction result is %T, not %T", ret, zero)
	}
	return v, nil
}
