package control

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Membership tells the views which nodes are alive: a cluster.Node (or
// its Store).
type Membership interface {
	// Records returns every member record, alive or expired (a dead
	// node's until it is forgotten; a node that stopped gracefully left
	// none).
	Records(ctx context.Context) ([]cluster.Member, error)
}

// SetMembership makes the views and POST /_replicate consult m. In the
// views, a job the store has running on a node that is not alive (its
// membership record expired: the node died) is shown pending, with no
// node, and is not an active task, from the moment the node counts as
// dead, though the activity monitor re-enqueues it only a job timeout
// after its last heartbeat; and a job that no node can take shows why in
// info.stall (see cast.show). POST /_replicate answers ErrTimeout once it
// has waited Config.ReplicateNoNodeTimeout while no replication node is
// alive. Nil (the default) shows the jobs as the store has them, and
// POST /_replicate waits for as long as its replication takes. Call it
// before serving.
func (p *Plane) SetMembership(m Membership) { p.members = m }

// shown is a job as one request's views show it (see seer).
type shown struct {
	*replicator.JobData
	// stall is why no node runs the job, from the membership; nil when
	// the membership gives no reason.
	stall *engine.Stall
}

// seer returns how the views show each job of one request:
// replicator.AsSeen, and with a membership, running only on a node alive,
// with the membership's stall (cast.show). The member records are read
// once, at the first job that is not finished; if they cannot be read the
// jobs are shown as the store has them.
func (p *Plane) seer(ctx context.Context) func(fdbjobs.State, *replicator.JobData) shown {
	var c *cast
	read := false
	return func(st fdbjobs.State, d *replicator.JobData) shown {
		d = replicator.AsSeen(st, d)
		if p.members == nil || !waitsForNode(d) {
			return shown{JobData: d}
		}
		if !read {
			read = true
			c, _ = p.cast(ctx)
		}
		if c == nil {
			return shown{JobData: d}
		}
		x, stall := c.show(d)
		return shown{JobData: x, stall: stall}
	}
}

// waitsForNode tells whether the membership may change how d is shown: a
// job running, pending or crashing (parked jobs are caught up; their
// watches resume when a node joins).
func waitsForNode(d *replicator.JobData) bool {
	switch d.State {
	case replicator.StateRunning:
		return d.Node != ""
	case replicator.StatePending, replicator.StateCrashing:
		return true
	}
	return false
}

// cast reads the member records (nil and the error when they cannot be
// read).
func (p *Plane) cast(ctx context.Context) (*cast, error) {
	ms, err := p.members.Records(ctx)
	if err != nil {
		return nil, err
	}
	return castOf(ms, p.cfg.Clock.Now()), nil
}

// cast is what the control plane knows of the cluster's members at one
// moment, from their records.
type cast struct {
	now int64 // Unix ms
	// alive holds the members alive at now; seen every record's last
	// heartbeat (Unix ms), alive or not.
	alive map[string]bool
	seen  map[string]int64
	// replicas counts the live members with the replication role.
	replicas int
	// lastReplica is the latest heartbeat of a replication member whose
	// record expired (Unix ms; 0 when none is left: none died, or they
	// stopped gracefully, or were forgotten).
	lastReplica int64
}

func castOf(records []cluster.Member, now time.Time) *cast {
	c := &cast{now: now.UnixMilli(), alive: map[string]bool{}, seen: map[string]int64{}}
	for _, m := range records {
		c.seen[m.Name] = m.Seen
		switch {
		case m.Alive(now):
			c.alive[m.Name] = true
			if m.HasRole(config.RoleReplication) {
				c.replicas++
			}
		case m.HasRole(config.RoleReplication):
			c.lastReplica = max(c.lastReplica, m.Seen)
		}
	}
	return c
}

// show is how the views show job d (as replicator.AsSeen gives it) with
// the members of c: d itself, or pending on no node while its node is not
// alive; and a stall when no node can run it, nil otherwise:
//
//   - a job running on a node that is not alive: node_down, naming the
//     node, while another replication node is alive (it takes the job
//     once the activity monitor puts it back in the queue, between one
//     and about two job timeouts after its last heartbeat); since is the
//     node's last heartbeat (its record's, else the job's last update).
//   - with no replication node alive, a pending job, a crashing one whose
//     backoff is over, or a job running on a node that is not alive:
//     no_replication_node. Its since is when the job began to wait for a
//     node as far as the records tell: the later of the last heartbeat of
//     a replication node whose record expired (records of nodes that
//     stopped gracefully, or were forgotten, are gone) and the moment the
//     job itself began to wait (its last update; for a crashing job, the
//     end of its backoff; for one on a dead node, that node's last
//     heartbeat).
func (c *cast) show(d *replicator.JobData) (*replicator.JobData, *engine.Stall) {
	var since int64
	var gone string // the dead node that ran d
	switch {
	case d.State == replicator.StateRunning && d.Node != "" && !c.alive[d.Node]:
		gone, since = d.Node, d.LastUpdated
		if s, ok := c.seen[gone]; ok {
			since = s
		}
		d = replicator.Unheld(d)
		if c.replicas > 0 {
			return d, &engine.Stall{Reason: engine.StallNodeDown, Since: since,
				Detail: fmt.Sprintf("node %s, which ran the job, is not a live member of the cluster; the job goes back to the queue "+
					"one to two job timeouts after its last heartbeat, and another replication node takes it", gone)}
		}
	case c.replicas > 0:
		return d, nil
	case d.State == replicator.StatePending:
		since = d.LastUpdated
	case d.State == replicator.StateCrashing && d.RetryAt <= c.now:
		since = cmp.Or(d.RetryAt, d.LastUpdated)
	default:
		return d, nil
	}
	detail := "no live node of the cluster has the replication role; the job starts when one joins"
	if gone != "" {
		detail = fmt.Sprintf("no live node of the cluster has the replication role (node %s, which ran the job, is not a live member); "+
			"the job starts when one joins", gone)
	}
	return d, &engine.Stall{Reason: engine.StallNoReplicationNode, Detail: detail, Since: max(since, c.lastReplica)}
}

// noNodeError is POST /_replicate's answer for job jobID when no
// replication node is alive (nil while one is, or when the members cannot
// be read).
func (p *Plane) noNodeError(ctx context.Context, jobID string) error {
	if p.members == nil {
		return nil
	}
	c, err := p.cast(ctx)
	if err != nil || c.replicas > 0 {
		return nil
	}
	last := ""
	if c.lastReplica > 0 {
		last = fmt.Sprintf(" (the last one was seen at %s)", replicator.FormatMillis(c.lastReplica))
	}
	return replicator.NewReason(replicator.ErrTimeout,
		"no replication node is alive in the cluster%s; the replication stays pending as job %s and starts when one joins "+
			"(GET /_scheduler/jobs/%s follows it; POST /_replicate with \"cancel\": true cancels it)", last, jobID, jobID)
}
