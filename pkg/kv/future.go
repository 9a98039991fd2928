package kv

import "context"

// Future is the result of an asynchronous read, commit or watch.
type Future[T any] interface {
	// Get blocks until the result is ready and returns it.
	Get() (T, error)
	// MustGet is Get that panics with the error; a retry loop turns the
	// panic back into an error.
	MustGet() T
	// IsReady reports whether Get would return without blocking.
	IsReady() bool
	// Done returns a channel that is closed when the result is ready.
	Done() <-chan struct{}
	// Cancel abandons the operation; a blocked Get returns
	// operation_cancelled (1101).
	Cancel()
}

// FutureByteSlice is the result of Get: nil when the key is absent.
type FutureByteSlice = Future[[]byte]

// FutureKey is the result of GetKey and GetVersionstamp.
type FutureKey = Future[Key]

// FutureInt64 is the result of GetReadVersion.
type FutureInt64 = Future[int64]

// FutureNil is the result of Commit, OnError and Watch.
type FutureNil = Future[struct{}]

// Await waits for f or for ctx, whichever comes first. When ctx ends first,
// f is cancelled and ctx's error is returned.
func Await[T any](ctx context.Context, f Future[T]) (T, error) {
	select {
	case <-f.Done():
		return f.Get()
	case <-ctx.Done():
		f.Cancel()
		var zero T
		return zero, ctx.Err()
	}
}

// Must returns v, or panics with err if err is not nil: the MustGet of
// futures and range iterators, and GetSliceOrPanic, are Must of their
// error-returning counterpart. Guard, and so every retry loop, turns the
// panic back into err.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// ReadyFuture returns a Future that is already resolved to v and err. Backends
// and wrappers use it for results known at once.
func ReadyFuture[T any](v T, err error) Future[T] {
	return readyFuture[T]{v: v, err: err}
}

type readyFuture[T any] struct {
	v   T
	err error
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (f readyFuture[T]) Get() (T, error)       { return f.v, f.err }
func (f readyFuture[T]) MustGet() T            { return Must(f.v, f.err) }
func (f readyFuture[T]) IsReady() bool         { return true }
func (f readyFuture[T]) Done() <-chan struct{} { return closedChan }
func (f readyFuture[T]) Cancel()               {}
