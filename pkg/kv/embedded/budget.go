package embedded

import (
	"fmt"
	"os"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// The budget check (Options.Budget) and the latency mode (Options.Latency),
// both on the real clock: they are about what a transaction would cost on
// FoundationDB, not about the store's clock that tests may fake.

// startOp notes when the attempt's first operation ran.
func (tr *transaction) startOp() {
	if tr.opStart.IsZero() && tr.db.opts.Budget.Duration > 0 {
		tr.opStart = time.Now()
	}
}

// overTime returns the attempt's budget error, failing it now if it has
// been open longer than the budget allows.
func (tr *transaction) overTime() error {
	if tr.budgetErr != nil {
		return tr.budgetErr
	}
	limit := tr.db.opts.Budget.Duration
	if limit <= 0 || tr.opStart.IsZero() {
		return nil
	}
	if open := time.Since(tr.opStart); open > limit {
		return tr.overBudget(fmt.Sprintf("open for %v (budget %v)", open.Truncate(time.Microsecond), limit))
	}
	return nil
}

// countRead adds n bytes read and fails the attempt if that goes over the
// budget.
func (tr *transaction) countRead(n int) error {
	limit := tr.db.opts.Budget.Bytes
	if limit <= 0 {
		return nil
	}
	tr.readBytes += int64(n)
	if tr.readBytes > limit && tr.budgetErr == nil {
		return tr.overBudget(fmt.Sprintf("read %d bytes (budget %d)", tr.readBytes, limit))
	}
	return tr.budgetErr
}

// checkWritten fails the attempt if a commit of size bytes goes over the
// budget.
func (tr *transaction) checkWritten(size int) error {
	if err := tr.overTime(); err != nil {
		return err
	}
	if limit := tr.db.opts.Budget.Bytes; limit > 0 && int64(size) > limit {
		return tr.overBudget(fmt.Sprintf("commits %d bytes as FoundationDB counts them (budget %d)", size, limit))
	}
	return nil
}

// overBudget fails the attempt with a BudgetError for reason and reports it
// once.
func (tr *transaction) overBudget(reason string) error {
	e := tr.site.BudgetError(reason)
	tr.budgetErr = e
	if report := tr.db.opts.OnBudgetExceeded; report != nil {
		report(e)
	} else {
		fmt.Fprintln(os.Stderr, e.Error())
	}
	return e
}

// readLatency is how long a read that returned n bytes takes in the
// latency mode: one round trip per reply of at most
// kv.LatencyReplyBytesDefault bytes, plus one to get the read version if
// this read took it.
func (tr *transaction) readLatency(n int) time.Duration {
	l := tr.db.opts.Latency
	if l.IsZero() {
		return 0
	}
	replies := 1 + (n-1)/kv.LatencyReplyBytesDefault
	if n <= 0 {
		replies = 1
	}
	d := time.Duration(replies) * l.Read
	if tr.grvNow {
		d += l.GRV
	}
	return d
}

// readyAfter returns a future resolved to v and err after d (at once if d
// is 0); cancelling it first fails it with operation_cancelled.
func readyAfter[T any](d time.Duration, v T, err error) kv.Future[T] {
	if d <= 0 {
		return kv.ReadyFuture(v, err)
	}
	f := newFuture[T]()
	t := time.AfterFunc(d, func() { f.set(v, err) })
	f.onCancel = func() { t.Stop() }
	return f
}

// resolvedAfter returns a future that resolves as inner does, but not
// before d has passed since now.
func resolvedAfter[T any](d time.Duration, inner kv.Future[T]) kv.Future[T] {
	if d <= 0 {
		return inner
	}
	until := time.Now().Add(d)
	f := newFuture[T]()
	f.onCancel = inner.Cancel
	go func() {
		<-inner.Done()
		if left := time.Until(until); left > 0 {
			t := time.NewTimer(left)
			select {
			case <-t.C:
			case <-f.done:
				t.Stop()
			}
		}
		f.set(inner.Get())
	}()
	return f
}
