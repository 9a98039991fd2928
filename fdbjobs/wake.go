package fdbjobs

import (
	"sync"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// wakes lets a commit of this Client that made jobs pending wake this
// Client's own waiting acceptors at once. The pending watch stays what
// wakes every acceptor, this process's and other processes' alike; this
// only shortens the wait of the local ones, by the time a watch takes to
// fire after the commit that triggers it (on FoundationDB a few
// milliseconds: the storage server must apply that version first). A
// wake-up costs a waiting acceptor one more accept transaction, which
// finds the job or, when the job is scheduled later or another acceptor
// took it, waits again.
//
// Only the Client's own transactions notify: a job added in the caller's
// transaction (a kv.Transaction passed as tx) commits later, out of sight,
// and its acceptors wake by the watch.
type wakes struct {
	mu sync.Mutex
	ch map[string]chan struct{} // by type; closed and removed by notify
}

// wait returns a channel that is closed when a later commit of this
// Client makes a job of typ pending. Take it before the accept
// transaction that found nothing: a commit between the two closes it.
func (w *wakes) wait(typ string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = map[string]chan struct{}{}
	}
	c, ok := w.ch[typ]
	if !ok {
		c = make(chan struct{})
		w.ch[typ] = c
	}
	return c
}

// notify wakes the waiters of each type in typs.
func (w *wakes) notify(typs ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, typ := range typs {
		if c, ok := w.ch[typ]; ok {
			close(c)
			delete(w.ch, typ)
		}
	}
}

// committed is called after a transaction of this Client that made jobs
// of typs pending returned without error: tx is what the caller passed,
// and a kv.Transaction there means the commit is the caller's, still to
// come.
func (c *Client) committed(tx kv.Transactor, typs ...string) {
	if _, joined := tx.(kv.Transaction); joined || len(typs) == 0 {
		return
	}
	c.wake.notify(typs...)
}
