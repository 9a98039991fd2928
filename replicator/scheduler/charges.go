package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/replicator"
)

// charges is the node's part of fair share (replicator/share.go): the run
// time its jobs accrued since it last wrote it to the store, per share
// key, and the share table as of its last roll-up. It owns that state
// under its own lock: workers charge as they exit, the interval step
// flushes and rolls up, and neither holds the node's lock for the store's
// transactions.
type charges struct {
	mu      sync.Mutex       // guards accrued and table
	accrued map[string]int64 // milliseconds per share key, not yet written
	table   replicator.ShareTable
}

func newCharges() *charges { return &charges{accrued: map[string]int64{}} }

// add accrues ms of run time to key.
func (c *charges) add(key string, ms int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.accrued[key] += ms
}

// flush writes what accrued to the store (Shares.Charge); what a failed
// write did not take is kept for the next flush.
func (c *charges) flush(ctx context.Context, store *replicator.Store) error {
	c.mu.Lock()
	ch := c.accrued
	c.accrued = map[string]int64{}
	c.mu.Unlock()
	err := store.Shares().Charge(ctx, ch)
	if err != nil {
		c.mu.Lock()
		for k, v := range ch {
			c.accrued[k] += v
		}
		c.mu.Unlock()
	}
	return err
}

// rollUp decays and sums the cluster's usage (Shares.RollUp) and keeps the
// table; after an error the table of the last roll-up stays.
func (c *charges) rollUp(ctx context.Context, store *replicator.Store, now time.Time, interval time.Duration, coeff float64) error {
	table, err := store.Shares().RollUp(ctx, now, interval, coeff)
	if err == nil {
		c.mu.Lock()
		c.table = table
		c.mu.Unlock()
	}
	return err
}

// shares is the share table of the last roll-up.
func (c *charges) shares() replicator.ShareTable {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.table
}
