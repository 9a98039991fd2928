package fdbjobs

import (
	"bytes"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// claiming is the set of pending keys that this node's acceptors are
// claiming in transactions not yet finished. Concurrent acceptors on one
// node skip each other's picks, so they do not conflict on them; acceptors
// on different nodes still can, and then one retries. It is only a hint:
// correctness rests on the read conflict on each picked key.
//
// A key stays marked from its pick until its accept transaction is over:
// failed (the key is free again) or committed (the key is gone from every
// later snapshot; a concurrent snapshot taken before the commit may still
// show it, and skipping it there avoids a certain conflict, hence the
// marks of committed picks are released only when the whole Accept
// returns).
type claiming struct {
	mu      sync.Mutex
	keys    map[string]struct{}
	cursors map[string]scanCursor // by type
	rel     chan struct{}         // closed and replaced by each release
}

// released returns a channel that is closed at the next release.
func (c *claiming) released() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rel == nil {
		c.rel = make(chan struct{})
	}
	return c.rel
}

// scanCursor is where a type's scheduled Accepts start reading.
type scanCursor struct {
	key   kv.Key
	since time.Time // when the cursor last started at the range start
}

// CursorReset bounds how long a scheduled Accept keeps reading from its
// cursor before it reads from the start of the pending range again.
const CursorReset = time.Second

// cursor returns where to start reading the pending range [begin, end),
// and whether that is the cursor rather than begin.
func (c *claiming) cursor(typ string, begin, end kv.Key) (kv.Key, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.cursors[typ]
	if !ok || cur.key == nil || time.Since(cur.since) > CursorReset ||
		bytes.Compare(cur.key, begin) <= 0 || bytes.Compare(cur.key, end) >= 0 {
		if c.cursors == nil {
			c.cursors = map[string]scanCursor{}
		}
		c.cursors[typ] = scanCursor{since: time.Now()}
		return begin, false
	}
	return cur.key, true
}

// setCursor records the first key a read from the cursor found.
func (c *claiming) setCursor(typ string, key kv.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.cursors[typ]
	cur.key = key
	c.cursors[typ] = cur
}

// pick chooses up to n random keys of kvs that are not marked, and marks
// them.
func (c *claiming) pick(kvs []kv.KeyValue, n int) []kv.Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string]struct{}{}
	}
	free := kvs[:0:0]
	for _, e := range kvs {
		if _, busy := c.keys[string(e.Key)]; !busy {
			free = append(free, e)
		}
	}
	if n > len(free) {
		n = len(free)
	}
	out := make([]kv.Key, 0, n)
	for i := 0; i < n; i++ {
		j := i + mrand.IntN(len(free)-i)
		free[i], free[j] = free[j], free[i]
		out = append(out, free[i].Key)
		c.keys[string(free[i].Key)] = struct{}{}
	}
	return out
}

func (c *claiming) release(keys []kv.Key) {
	if len(keys) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		delete(c.keys, string(k))
	}
	if c.rel != nil {
		close(c.rel)
		c.rel = nil
	}
}
