package embedded

import (
	"sync"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// future is a kv.Future resolved once by whoever finishes the operation.
// The first of set and Cancel wins.
type future[T any] struct {
	done     chan struct{}
	mu       sync.Mutex
	resolved bool
	v        T
	err      error
	onCancel func() // called once when Cancel wins; may be nil
}

func newFuture[T any]() *future[T] { return &future[T]{done: make(chan struct{})} }

// set resolves f and reports whether this call did so.
func (f *future[T]) set(v T, err error) bool {
	f.mu.Lock()
	if f.resolved {
		f.mu.Unlock()
		return false
	}
	f.resolved, f.v, f.err = true, v, err
	f.mu.Unlock()
	close(f.done)
	return true
}

func (f *future[T]) fail(err error) bool {
	var zero T
	return f.set(zero, err)
}

// result reports whether f is resolved, and its error, without waiting.
func (f *future[T]) result() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resolved, f.err
}

func (f *future[T]) Get() (T, error) {
	<-f.done
	return f.v, f.err
}

func (f *future[T]) MustGet() T { return kv.Must(f.Get()) }

func (f *future[T]) IsReady() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func (f *future[T]) Done() <-chan struct{} { return f.done }

func (f *future[T]) Cancel() {
	f.mu.Lock()
	cb := f.onCancel
	f.mu.Unlock()
	if f.fail(errOperationCancel) && cb != nil {
		cb()
	}
}

var _ kv.Future[int] = (*future[int])(nil)
