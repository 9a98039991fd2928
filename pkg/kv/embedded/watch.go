package embedded

import (
	"bytes"
	"errors"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// watch is a watch set by a transaction: pending until the transaction
// commits, then armed in the registry until the key's value differs from
// initial.
type watch struct {
	reg     *watchRegistry
	key     []byte
	initial []byte
	present bool
	fut     *future[struct{}]
	timer   clockwork.Timer // the timeout's, on the store's clock; guarded by reg.mu
}

// finish resolves the watch with err (nil: it fired) unless it is resolved
// already, and releases its registry slot.
func (w *watch) finish(err error) {
	if w.fut.set(struct{}{}, err) {
		w.reg.release(w)
	}
}

// watchRegistry holds the armed watches, by key.
type watchRegistry struct {
	mu          sync.Mutex
	byKey       map[string][]*watch
	outstanding int
	closed      bool
}

func newWatchRegistry() *watchRegistry {
	return &watchRegistry{byKey: map[string][]*watch{}}
}

// reserve counts a new watch against limit.
func (r *watchRegistry) reserve(limit int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return kv.ErrDatabaseClosed
	}
	if r.outstanding >= limit {
		return errTooManyWatches
	}
	r.outstanding++
	return nil
}

// release removes a resolved watch.
func (r *watchRegistry) release(w *watch) {
	r.mu.Lock()
	r.releaseLocked(w)
	r.mu.Unlock()
}

func (r *watchRegistry) releaseLocked(w *watch) {
	if w.timer != nil {
		w.timer.Stop()
	}
	r.outstanding--
	list := r.byKey[string(w.key)]
	for i, x := range list {
		if x == w {
			list = append(list[:i], list[i+1:]...)
			if len(list) == 0 {
				delete(r.byKey, string(w.key))
			} else {
				r.byKey[string(w.key)] = list
			}
			break
		}
	}
}

// differs reports whether key's value in s differs from the watch's
// initial value. Read errors count as a difference: the watch fires and the
// caller re-reads.
func (w *watch) differs(s *snapshot) bool {
	v, closer, err := s.s.Get(w.key)
	if errors.Is(err, pebble.ErrNotFound) {
		return w.present
	}
	if err != nil {
		return true
	}
	defer closer.Close()
	return !w.present || !bytes.Equal(v, w.initial)
}

// fireLocked resolves w as fired; r.mu is held.
func (r *watchRegistry) fireLocked(w *watch) {
	if w.fut.set(struct{}{}, nil) {
		r.releaseLocked(w)
	}
}

// arm registers the watches of a committed transaction against the state s
// (at or after their commit): those whose key already differs fire at once.
func (r *watchRegistry) armLocked(s *snapshot, ws []*watch) {
	for _, w := range ws {
		if w.fut.IsReady() {
			continue // cancelled or timed out before its commit completed
		}
		if r.closed {
			if w.fut.fail(kv.ErrDatabaseClosed) {
				r.releaseLocked(w)
			}
			continue
		}
		if w.differs(s) {
			r.fireLocked(w)
			continue
		}
		r.byKey[string(w.key)] = append(r.byKey[string(w.key)], w)
	}
}

// afterCommit fires the armed watches whose keys a batch touched and arms
// the batch's new watches. s is the state after the batch, published.
func (r *watchRegistry) afterCommit(s *snapshot, t *touchSet, ws []*watch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byKey) > 0 {
		var fire []*watch
		for _, k := range t.keys {
			for _, w := range r.byKey[string(k)] {
				if w.differs(s) {
					fire = append(fire, w)
				}
			}
		}
		for _, sp := range t.spans {
			for k, list := range r.byKey {
				if k >= string(sp.begin) && k < string(sp.end) {
					for _, w := range list {
						if w.differs(s) {
							fire = append(fire, w)
						}
					}
				}
			}
		}
		for _, w := range fire {
			r.fireLocked(w)
		}
	}
	r.armLocked(s, ws)
}

// armReadOnly arms the watches of a read-only transaction against the
// newest published state.
func (db *DB) armReadOnly(ws []*watch) {
	r := db.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	s := db.acquire()
	defer s.release()
	r.armLocked(s, ws)
}

// closeAll fails every armed watch with kv.ErrDatabaseClosed.
func (r *watchRegistry) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, list := range r.byKey {
		for _, w := range list {
			if w.fut.fail(kv.ErrDatabaseClosed) && w.timer != nil {
				w.timer.Stop()
			}
		}
	}
	r.byKey = map[string][]*watch{}
}

// count returns the number of outstanding watches.
func (r *watchRegistry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outstanding
}
