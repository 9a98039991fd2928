package embedded

import (
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Watch remembers the key's value as the transaction sees it and returns a
// future that the commit arms (see watch.go). As on FoundationDB, the read
// is not a snapshot read: it adds a read conflict range on the key (unless
// the transaction wrote the key), so a transaction with writes that sets a
// watch conflicts with a concurrent write of the key. With a timeout set,
// the watch fails with transaction_timed_out when it passes.
func (tr *transaction) Watch(key kv.KeyConvertible) kv.FutureNil {
	fut := newFuture[struct{}]()
	if err := tr.watch(key.FDBKey(), fut); err != nil {
		fut.fail(err)
	}
	return fut
}

// watch sets up the watch of k that fut reports on.
func (tr *transaction) watch(k []byte, fut *future[struct{}]) error {
	if err := tr.lockRead(); err != nil {
		return err
	}
	defer tr.unlockRead()
	if err := checkKey(k); err != nil {
		return err
	}
	v, err := tr.getLocked(k, false)
	if err != nil {
		return err
	}
	if err := tr.db.watches.reserve(tr.db.opts.MaxWatches); err != nil {
		return err
	}
	w := &watch{reg: tr.db.watches, key: clone(k), initial: v, present: v != nil, fut: fut}
	fut.onCancel = func() { w.reg.release(w) }
	if tr.timeoutMs > 0 {
		left := tr.clock().Until(tr.start.Add(time.Duration(tr.timeoutMs) * time.Millisecond))
		w.reg.mu.Lock()
		w.timer = tr.clock().AfterFunc(left, func() { w.finish(errTimedOut) })
		w.reg.mu.Unlock()
	}
	tr.watches = append(tr.watches, w)
	return nil
}
