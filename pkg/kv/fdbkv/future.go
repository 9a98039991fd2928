//go:build fdb

package fdbkv

import (
	"sync"

	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// future adapts one of the binding's futures to kv.Future. get reads the
// result from the binding (blocking until it is ready) with errors already
// converted.
type future[T any] struct {
	f    fdb.Future
	get  func() (T, error)
	once sync.Once
	done chan struct{}
}

func newFuture[T any](f fdb.Future, get func() (T, error)) *future[T] {
	return &future[T]{f: f, get: get}
}

func (f *future[T]) Get() (T, error) { return f.get() }

func (f *future[T]) MustGet() T { return kv.Must(f.get()) }

func (f *future[T]) IsReady() bool { return f.f.IsReady() }

// Done starts, on its first call, a goroutine that waits for the binding's
// future and closes the channel; an already ready future needs none.
func (f *future[T]) Done() <-chan struct{} {
	f.once.Do(func() {
		f.done = make(chan struct{})
		if f.f.IsReady() {
			close(f.done)
			return
		}
		go func() {
			f.f.BlockUntilReady()
			close(f.done)
		}()
	})
	return f.done
}

func (f *future[T]) Cancel() { f.f.Cancel() }

func byteSliceFuture(f fdb.FutureByteSlice) kv.FutureByteSlice {
	return newFuture(f, func() ([]byte, error) {
		v, err := f.Get()
		return v, convertErr(err)
	})
}

func keyFuture(f fdb.FutureKey) kv.FutureKey {
	return newFuture(f, func() (kv.Key, error) {
		k, err := f.Get()
		if err != nil {
			return nil, convertErr(err)
		}
		return kv.Key(k), nil
	})
}

func int64Future(f fdb.FutureInt64) kv.FutureInt64 {
	return newFuture(f, func() (int64, error) {
		v, err := f.Get()
		return v, convertErr(err)
	})
}

// nilFuture adapts a FutureNil; onSuccess, when set, runs after every Get
// that finds the operation succeeded.
func nilFuture(f fdb.FutureNil, onSuccess func()) kv.FutureNil {
	return newFuture(f, func() (struct{}, error) {
		if err := f.Get(); err != nil {
			return struct{}{}, convertErr(err)
		}
		if onSuccess != nil {
			onSuccess()
		}
		return struct{}{}, nil
	})
}
