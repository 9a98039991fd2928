package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator"
)

// The nodes are balanced while every one runs within balanceTolerance
// percent of the mean.
const balanceTolerance = 10

// balancePendingMax bounds the pending jobs balance counts (a range read
// of about 300 kB at most): with that many runnable jobs waiting the
// nodes count as full, and the lighter ones fill from the queue.
const balancePendingMax = 4000

// balance is the interval's balancing step, with Config.Cluster: it reads
// the replication nodes alive and their loads, sets the node's share
// (the most jobs its Runtime fills it to) and moves the continuous jobs
// it runs beyond its share when some node is out of balance, at most
// MaxChurn - stopped of them; then it publishes the node's load. It
// reports whether every node is full (the runnable jobs exceed the
// nodes' MaxJobs): only then does the node rotate. When the
// membership cannot be read the node works as without balancing.
func (n *Node) balance(ctx context.Context, cfg Config, now time.Time, stopped int) bool {
	members, err := cfg.Cluster.Members(ctx, now)
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Msg("replicator: balance: reading the membership; not balancing this interval")
		}
		n.setShare(0)
		return true
	}
	mine := n.kept()
	var others []int
	for _, m := range members {
		if m.Name == cfg.NodeName || !m.HasRole(config.RoleReplication) {
			continue
		}
		r := 0
		if m.Load != nil {
			r = m.Load.Running
		}
		others = append(others, r)
	}
	load := loadOf(len(mine), others)
	pending, err := n.store.PendingCount(ctx, replicator.Millis(now), load.pendingLimit(cfg.MaxJobs))
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Msg("replicator: balance: counting pending jobs; not balancing this interval")
		}
		n.setShare(0)
		return true
	}
	p := load.plan(pending, cfg.MaxJobs, cfg.MaxChurn, stopped)
	if p.full {
		n.setShare(0)
		n.publishLoad(ctx)
		return true
	}
	n.mu.Lock()
	moved := stopLeastDeservingLocked(mine, p.move, stopMove, func(w *worker) bool {
		return w.continuous && now.Sub(w.started) >= cfg.MinRunTime
	})
	// What the pool may take from the queue until the next interval. A
	// balanced cluster takes new jobs wherever there is room: a burst of
	// new jobs starts at once, and the next interval moves the continuous
	// ones if it left the nodes out of balance. While some node moves
	// jobs, they must reach the lighter nodes: a node that moves takes
	// none back (its share), the others take up to a tenth above the
	// target, a margin for loads read a moment too low. It is not a
	// guarantee: a node that accepted many jobs just before another read
	// its load makes that one size its share too small, and a job moved
	// may then wait for the next interval, whose shares are computed
	// again (doc.go's Liveness bound is two intervals for that reason).
	n.share = p.shareStaying
	if moved > 0 {
		n.share = p.shareMoving
	}
	n.mu.Unlock()
	if moved > 0 {
		n.m.Add(replicator.MetricJobsMoves, int64(moved))
		cfg.Logger.Info().Int("moving", moved).Int("running", len(mine)-moved).
			Int("share", p.share).Int("nodes", load.nodes).Int("cluster_running", load.total).Int("pending", pending).
			Msg("replicator: moving jobs to nodes that run fewer")
	}
	n.publishLoad(ctx)
	return false
}

func (n *Node) setShare(share int) {
	n.mu.Lock()
	n.share = share
	n.mu.Unlock()
}

// loadPublisher is the node's part that publishes its load: one
// publication at a time, from the count to the write, and one more for
// however many calls come while one runs. It owns its state.
type loadPublisher struct {
	// turn serializes publishLoad: a channel of one slot, so that a caller
	// waiting for its turn gives up when its context ends.
	turn chan struct{}

	mu         sync.Mutex // guards publishing and republish
	publishing bool       // a publishSoonLocked goroutine runs
	republish  bool       // and publishes again when done
}

func newLoadPublisher() loadPublisher { return loadPublisher{turn: make(chan struct{}, 1)} }

// start reports whether the caller should start a publishing goroutine:
// false when one runs (it publishes once more when done).
func (p *loadPublisher) start() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.publishing {
		p.republish = true
		return false
	}
	p.publishing = true
	return true
}

// again reports whether the publishing goroutine publishes once more
// (asked for meanwhile, and live); when not, it is done.
func (p *loadPublisher) again(live bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	again := p.republish && live
	p.publishing, p.republish = again, false
	return again
}

// publishSoonLocked publishes the node's load from a goroutine, once for
// however many calls come while one publication runs (accepted jobs,
// workers leaving), so that the figure others read follows the node's.
// Called with n.mu held (the goroutine joins n.wg before Stop waits).
func (n *Node) publishSoonLocked() {
	if n.cfg.Cluster == nil || n.ctx == nil || !n.load.start() {
		return
	}
	ctx := n.ctx
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			n.publishLoad(ctx)
			if !n.load.again(ctx.Err() == nil) {
				return
			}
		}
	}()
}

// publishLoad publishes the number of jobs the node runs, with
// Config.Cluster (best effort: the next interval publishes it again).
// Jobs it is stopping count until their workers leave: the nodes that
// read the figure meanwhile would otherwise take the node for lighter
// than it is and size their shares too small for the jobs about to be
// pending.
func (n *Node) publishLoad(ctx context.Context) {
	cfg := n.Config()
	if cfg.Cluster == nil {
		return
	}
	// Serialized from the count to the write: a figure read earlier never
	// overwrites a later one.
	select {
	case n.load.turn <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-n.load.turn }()
	n.mu.Lock()
	running := len(n.workers)
	n.mu.Unlock()
	if err := cfg.Cluster.SetLoad(ctx, cluster.Load{Running: running}); err != nil && ctx.Err() == nil {
		cfg.Logger.Warn().Err(err).Msg("replicator: balance: publishing the node's load")
	}
}
