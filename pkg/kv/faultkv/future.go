package faultkv

import (
	"sync"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// future is a future of the wrapped transaction whose result then
// rewrites.
type future[T any] struct {
	inner kv.Future[T]
	then  func(T, error) (T, error)
}

func (f *future[T]) Get() (T, error)       { return f.then(f.inner.Get()) }
func (f *future[T]) MustGet() T            { return kv.Must(f.Get()) }
func (f *future[T]) IsReady() bool         { return f.inner.IsReady() }
func (f *future[T]) Done() <-chan struct{} { return f.inner.Done() }
func (f *future[T]) Cancel()               { f.inner.Cancel() }

// attemptFuture is a watch or versionstamp future of an attempt: it fails
// with the attempt's injected failure, as the commit's futures fail with the
// commit's error. The attempt cancels the inner future when it fails, so a
// pending Get returns.
func attemptFuture[T any](att *attempt, inner kv.Future[T]) kv.Future[T] {
	att.track(inner.Cancel)
	return &future[T]{inner: inner, then: func(v T, err error) (T, error) {
		if aerr := att.failure(); aerr != nil {
			var zero T
			return zero, aerr
		}
		return v, err
	}}
}

// settledFuture is inner with its error passed through settle, once: every
// Get returns what the first one settled on.
func settledFuture(inner kv.FutureNil, settle func(error) error) kv.FutureNil {
	var (
		once sync.Once
		res  error
	)
	return &future[struct{}]{inner: inner, then: func(_ struct{}, err error) (struct{}, error) {
		once.Do(func() { res = settle(err) })
		return struct{}{}, res
	}}
}

// unknownResultFuture is a real commit that reports commit_unknown_result
// once it succeeded.
func unknownResultFuture(db *DB, att *attempt, commit kv.FutureNil) kv.FutureNil {
	return settledFuture(commit, func(err error) error {
		if err != nil {
			return err
		}
		db.commitUnknown.Add(1)
		return att.fail(kv.Error{Code: kv.CodeCommitUnknownResult})
	})
}

// onErrorFuture starts a new attempt of t once the wrapped OnError
// resolved without error (the wrapped transaction was reset).
func onErrorFuture(t *transaction, onError kv.FutureNil) kv.FutureNil {
	return settledFuture(onError, func(err error) error {
		if err == nil {
			t.newAttempt(false)
		}
		return err
	})
}

// failedRange is a range read that failed with an injected error.
type failedRange struct{ err error }

func (r failedRange) GetSliceWithError() ([]kv.KeyValue, error) { return nil, r.err }
func (r failedRange) GetSliceOrPanic() []kv.KeyValue            { panic(r.err) }
func (r failedRange) Iterator() kv.RangeIterator                { return &failedIterator{err: r.err} }

// failedIterator reports its error once: Advance returns true so that Get
// returns the error, then false.
type failedIterator struct {
	err      error
	advanced bool
}

func (it *failedIterator) Advance() bool {
	first := !it.advanced
	it.advanced = true
	return first
}

func (it *failedIterator) Get() (kv.KeyValue, error) { return kv.KeyValue{}, it.err }

func (it *failedIterator) MustGet() kv.KeyValue { panic(it.err) }
