package scheduler

import "math"

// The interval step's decisions, made from figures alone (no store, no
// lock, no clock), so that table tests drive them: how many jobs the trim
// stops, how many the rotation stops, and what balance does. The Node
// reads the figures, calls these, and asks the least deserving workers to
// stop (stopLeastDeservingLocked).

// planTrim is how many of active running jobs the trim stops: those
// beyond maxJobs (after max_jobs was lowered, or fetches racing took
// the node over it).
func planTrim(active, maxJobs int) int { return max(0, active-maxJobs) }

// planRotation is how many continuous jobs the rotation stops while every
// node is full: as many as runnable jobs wait beyond the node's room
// (maxJobs less its kept jobs), at most maxChurn less the jobs the trim
// stopped, and at most the rotatable ones (continuous, run MinRunTime).
// pending counts the runnable jobs, read up to rotationPendingLimit.
func planRotation(kept, rotatable, pending, maxJobs, maxChurn, stopped int) int {
	want := min(maxChurn-stopped, rotatable)
	if want <= 0 {
		return 0
	}
	return max(0, min(want, pending-max(0, maxJobs-kept)))
}

// rotationPendingLimit is how many pending jobs the rotation needs to
// count: the room the node has and the most it would stop. Zero means it
// stops none whatever waits (no count needed).
func rotationPendingLimit(kept, rotatable, maxJobs, maxChurn, stopped int) int {
	want := min(maxChurn-stopped, rotatable)
	if want <= 0 {
		return 0
	}
	return max(0, maxJobs-kept) + want
}

// clusterLoad is the running jobs of the replication nodes alive: this
// node's own first.
type clusterLoad struct {
	nodes, total, lo, hi int
	own                  int
}

// loadOf sums own (this node's kept jobs) and the others' loads.
func loadOf(own int, others []int) clusterLoad {
	l := clusterLoad{nodes: 1, total: own, lo: own, hi: own, own: own}
	for _, r := range others {
		l.nodes, l.total, l.lo, l.hi = l.nodes+1, l.total+r, min(l.lo, r), max(l.hi, r)
	}
	return l
}

// pendingLimit is how many pending jobs balance counts: the room the
// nodes have, at least 1, at most balancePendingMax.
func (l clusterLoad) pendingLimit(maxJobs int) int {
	return min(balancePendingMax, max(1, l.nodes*maxJobs-l.total))
}

// balancePlan is what the balance step does.
type balancePlan struct {
	// full: the runnable jobs exceed the nodes' MaxJobs (or balance
	// counted balancePendingMax of them): no balancing, the node rotates
	// instead, and takes jobs into all its room (share 0).
	full bool
	// share is each node's share of the runnable jobs (the mean, rounded
	// up); move is how many of its continuous jobs that ran MinRunTime the
	// node moves at most (0 unless it runs more than its share while the
	// nodes are out of balance).
	share, move int
	// shareMoving is the node's pool share when it moves jobs (its share:
	// it takes none back); shareStaying otherwise (while some node moves:
	// up to a tenth above the mean, rounded down so that a node that fills
	// to it is not out of balance itself and never moves jobs back, and
	// at least the share, so that moved jobs reach the lighter nodes; 0,
	// all its room, in a balanced cluster).
	shareMoving, shareStaying int
}

// plan decides the balance step from the cluster's loads and the
// runnable jobs counted (pending). A node moves jobs when it runs more
// than its share while it runs over 110% of the mean or some node runs
// under 90% of it (balanceTolerance, in integers).
func (l clusterLoad) plan(pending, maxJobs, maxChurn, stopped int) balancePlan {
	if l.total+pending >= l.nodes*maxJobs || pending >= balancePendingMax {
		return balancePlan{full: true}
	}
	jobs := l.total + pending
	target := float64(jobs) / float64(l.nodes)
	share := max(1, int(math.Ceil(target)))
	moves := func(load int) bool {
		return load > share && (100*load*l.nodes > (100+balanceTolerance)*jobs || 100*l.lo*l.nodes < (100-balanceTolerance)*jobs)
	}
	p := balancePlan{share: share, shareMoving: share}
	if moves(l.own) {
		p.move = min(l.own-share, maxChurn-stopped)
	}
	if moves(l.hi) {
		p.shareStaying = max(share, (100+balanceTolerance)*jobs/(100*l.nodes))
	}
	return p
}
