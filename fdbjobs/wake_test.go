package fdbjobs

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// deafDB is a store whose watches never fire: what wakes an acceptor on
// it is the Client's own commit, nothing else.
type deafDB struct{ kv.Database }

func (d deafDB) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return d.Database.Transact(ctx, func(tr kv.Transaction) (any, error) { return f(deafTr{tr}) })
}

func (d deafDB) CreateTransaction() (kv.Transaction, error) {
	tr, err := d.Database.CreateTransaction()
	if err != nil {
		return nil, err
	}
	return deafTr{tr}, nil
}

type deafTr struct{ kv.Transaction }

func (t deafTr) Watch(key kv.KeyConvertible) kv.FutureNil {
	t.Transaction.Watch(key).Cancel()
	return &neverFuture{done: make(chan struct{})}
}

// neverFuture is ready only once cancelled.
type neverFuture struct{ done chan struct{} }

func (f *neverFuture) Get() (struct{}, error) {
	<-f.done
	return struct{}{}, kv.Error{Code: kv.CodeOperationCancelled}
}
func (f *neverFuture) MustGet() struct{} { v, _ := f.Get(); return v }
func (f *neverFuture) IsReady() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}
func (f *neverFuture) Done() <-chan struct{} { return f.done }
func (f *neverFuture) Cancel() {
	select {
	case <-f.done:
	default:
		close(f.done)
	}
}

// A job made pending by a Client's own transaction wakes that Client's
// waiting Accept without the store's watch (on FoundationDB it fires a
// few milliseconds after the commit): here the watch never fires.
func TestOwnCommitWakesAcceptors(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare runs before the Accept waits; pend makes job j1 pending.
		prepare, pend func(t *testing.T, b *bundle)
	}{
		{"Add", nil, func(t *testing.T, b *bundle) { b.add(t, t1, j1, "", 0) }},
		{"AddBatch", nil, func(t *testing.T, b *bundle) {
			require.NoError(t, b.c.AddBatch(b.ctx, nil, t1, []NewJob{{ID: j1}, {ID: j2}}))
		}},
		{"Resubmit", func(t *testing.T, b *bundle) {
			b.add(t, t1, j1, "", 0)
			job, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
			require.NoError(t, err)
			require.NoError(t, b.c.Finish(b.ctx, nil, job, nil))
		}, func(t *testing.T, b *bundle) {
			require.NoError(t, b.c.Resubmit(b.ctx, nil, &Job{Type: t1, ID: j1}, 0, nil))
		}},
		{"Reenqueue", func(t *testing.T, b *bundle) {
			b.add(t, t1, j1, "", 0)
			_, err := b.c.Accept(b.ctx, t1, AcceptOptions{})
			require.NoError(t, err)
		}, func(t *testing.T, b *bundle) {
			ok, err := b.c.Reenqueue(b.ctx, nil, t1, j1)
			require.NoError(t, err)
			require.True(t, ok)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			b.c.db = deafDB{b.db}
			if tc.prepare != nil {
				tc.prepare(t, b)
			}
			waiting := make(chan struct{}, 1)
			b.c.hooks.acceptWaiting = func(string) {
				select {
				case waiting <- struct{}{}:
				default:
				}
			}
			got := make(chan error, 1)
			go func() {
				job, err := b.c.Accept(b.ctx, t1, AcceptOptions{Timeout: WaitForever})
				if err == nil && job.ID != j1 && tc.name != "AddBatch" {
					err = ErrNotFound
				}
				got <- err
			}()
			<-waiting
			tc.pend(t, b)
			require.NoError(t, <-got)
		})
	}
}
