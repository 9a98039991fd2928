package fdbjobs

import "sync"

// claiming is the set of shards that this node's acceptors are reading
// and claiming from in transactions not yet finished: an acceptor takes a
// shard nobody else on the node has, so that a node's acceptors never
// claim the same keys, and releases it when its transaction attempt ends.
// Acceptors of different nodes keep apart through shard ownership
// (Client.shardOrder); when they meet, the read conflict on the run of
// keys they claim lets one commit and the other retry. It is only a hint:
// correctness rests on those conflicts.
type claiming struct {
	mu     sync.Mutex
	shards map[shardRef]struct{}
	rel    chan struct{} // closed and replaced by each release
}

type shardRef struct {
	typ   string
	shard int64
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

// take marks shard of typ as this caller's, unless another acceptor of
// the node has it.
func (c *claiming) take(typ string, shard int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref := shardRef{typ, shard}
	if _, busy := c.shards[ref]; busy {
		return false
	}
	if c.shards == nil {
		c.shards = map[shardRef]struct{}{}
	}
	c.shards[ref] = struct{}{}
	return true
}

// marked reports whether an acceptor of the node has shard of typ.
func (c *claiming) marked(typ string, shard int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, busy := c.shards[shardRef{typ, shard}]
	return busy
}

// release gives shard of typ back and wakes the acceptors waiting for
// one (released). A negative shard releases nothing.
func (c *claiming) release(typ string, shard int64) {
	if shard < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.shards, shardRef{typ, shard})
	if c.rel != nil {
		close(c.rel)
		c.rel = nil
	}
}
