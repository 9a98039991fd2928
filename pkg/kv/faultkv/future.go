package faultkv

import (
	"sync"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// attemptFuture is a watch or versionstamp future of an attempt: it fails
// with the attempt's injected failure, as the commit's futures fail with the
// commit's error. The attempt cancels the inner future when it fails, so a
// pending Get returns.
type attemptFuture[T any] struct {
	inner kv.Future[T]
	att   *attempt
}

func newAttemptFuture[T any](att *attempt, inner kv.Future[T]) *attemptFuture[T] {
	att.track(inner.Cancel)
	return &attemptFuture[T]{inner: inner, att: att}
}

func (f *attemptFuture[T]) Get() (T, error) {
	v, err := f.inner.Get()
	if aerr := f.att.failure(); aerr != nil {
		var zero T
		return zero, aerr
	}
	return v, err
}

func (f *attemptFuture[T]) MustGet() T {
	v, err := f.Get()
	if err != nil {
		panic(err)
	}
	return v
}

func (f *attemptFuture[T]) IsReady() bool         { return f.inner.IsReady() }
func (f *attemptFuture[T]) Done() <-chan struct{} { return f.inner.Done() }
func (f *attemptFuture[T]) Cancel()               { f.inner.Cancel() }

// unknownResultFuture is a real commit that reports commit_unknown_result
// once it succeeded.
type unknownResultFuture struct {
	inner kv.FutureNil
	att   *attempt
	db    *DB

	once sync.Once
	err  error
}

func (f *unknownResultFuture) Get() (struct{}, error) {
	_, err := f.inner.Get()
	f.once.Do(func() {
		if err != nil {
			f.err = err
			return
		}
		f.db.commitUnknown.Add(1)
		f.err = f.att.fail(kv.Error{Code: kv.CodeCommitUnknownResult})
	})
	return struct{}{}, f.err
}

func (f *unknownResultFuture) MustGet() struct{} {
	if _, err := f.Get(); err != nil {
		panic(err)
	}
	return struct{}{}
}

func (f *unknownResultFuture) IsReady() bool         { return f.inner.IsReady() }
func (f *unknownResultFuture) Done() <-chan struct{} { return f.inner.Done() }
func (f *unknownResultFuture) Cancel()               { f.inner.Cancel() }

// onErrorFuture starts a new attempt of its transaction once the wrapped
// OnError resolved without error (the wrapped transaction was reset).
type onErrorFuture struct {
	inner kv.FutureNil
	t     *transaction

	once sync.Once
	err  error
}

func (f *onErrorFuture) Get() (struct{}, error) {
	_, err := f.inner.Get()
	f.once.Do(func() {
		f.err = err
		if err == nil {
			f.t.newAttempt(false)
		}
	})
	return struct{}{}, f.err
}

func (f *onErrorFuture) MustGet() struct{} {
	if _, err := f.Get(); err != nil {
		panic(err)
	}
	return struct{}{}
}

func (f *onErrorFuture) IsReady() bool         { return f.inner.IsReady() }
func (f *onErrorFuture) Done() <-chan struct{} { return f.inner.Done() }
func (f *onErrorFuture) Cancel()               { f.inner.Cancel() }

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
