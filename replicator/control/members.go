package control

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
)

// Membership tells the views which nodes are alive: a cluster.Node (or
// its Store).
type Membership interface {
	// Members returns the nodes alive at now.
	Members(ctx context.Context, now time.Time) ([]cluster.Member, error)
}

// SetMembership makes the views consult m: a job the store has running
// on a node that is not alive (its membership record expired: the node
// died) is shown pending, with no node, and is not an active task, from
// the moment the node counts as dead, though the activity monitor
// re-enqueues it only a job timeout after its last heartbeat. Nil (the
// default) shows the jobs as the store has them. Call it before serving.
func (p *Plane) SetMembership(m Membership) { p.members = m }

// seer returns how the views show each job of one request:
// replicator.AsSeen, and with a membership, running only on a node alive.
// The member records are read once, at the first running job; if they
// cannot be read the jobs are shown as the store has them.
func (p *Plane) seer(ctx context.Context) func(fdbjobs.State, *replicator.JobData) *replicator.JobData {
	var alive map[string]bool
	read := false
	return func(st fdbjobs.State, d *replicator.JobData) *replicator.JobData {
		d = replicator.AsSeen(st, d)
		if p.members == nil || d.State != replicator.StateRunning || d.Node == "" {
			return d
		}
		if !read {
			read = true
			if ms, err := p.members.Members(ctx, p.cfg.Clock.Now()); err == nil {
				alive = make(map[string]bool, len(ms))
				for _, m := range ms {
					alive[m.Name] = true
				}
			}
		}
		if alive == nil || alive[d.Node] {
			return d
		}
		return replicator.Unheld(d)
	}
}
