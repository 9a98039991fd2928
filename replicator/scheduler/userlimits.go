package scheduler

// The per-user limit on running replications (see doc.go, "Per-user
// limits"): a job whose owner runs as many as a user may is held back as
// it starts, and the interval step gives the held-back jobs of a user
// their turn by stopping that user's continuous jobs that ran MinRunTime.

import (
	"context"
	"slices"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// limitedOwner is the owner the per-user limit counts d's job against, or
// "" when it is not limited (a server admin wrote it, or it has no
// owner).
func limitedOwner(d *replicator.JobData) string {
	if d == nil || !d.UserLimited {
		return ""
	}
	return d.Owner()
}

// heldChange reads, in tr, whether owner runs lim jobs or more; if so it
// returns the HeldBack change that puts the job back at now, due again
// after its turn (replicator.HeldTurn), with its decayed priority prio.
// The read of owner's running jobs is one range read of at most lim keys;
// in the start's transaction it conflicts with the starts and ends of
// owner's other jobs, so that racing starts do not both pass the limit.
func (w *worker) heldChange(tr kv.ReadTransaction, owner string, lim int, now time.Time, prio float64) (replicator.Change, bool, error) {
	running, err := w.n.store.OwnerRunning(tr, owner, lim, w.job.ID)
	if err != nil || running < lim {
		return replicator.Change{}, false, err
	}
	unfinished, err := w.n.store.OwnerUnfinished(tr.Snapshot(), owner)
	if err != nil {
		return replicator.Change{}, false, err
	}
	turn := replicator.HeldTurn(unfinished, lim, w.cfg.Interval)
	return replicator.Change{Kind: replicator.HeldBack, At: now, Priority: prio, STime: replicator.Millis(now.Add(turn))}, true, nil
}

// heldAtStart checks the per-user limit before the run's replication id
// is computed (which, for a user's filter, asks its source: a source that
// never answers would hold the slot meanwhile), and holds the job back
// when its owner runs the limit. The start's transaction checks again,
// exactly (initJob). It reports whether the job was held back.
func (w *worker) heldAtStart(d *replicator.JobData) bool {
	owner := limitedOwner(d)
	if owner == "" {
		return false
	}
	lim, now := w.cfg.userLimit(), w.now()
	prio := w.n.priorityOf(w, now)
	r, err := kv.ReadTransact(w.ctx, w.n.store, func(tr kv.ReadTransaction) (heldRead, error) {
		c, held, err := w.heldChange(tr, owner, lim, now, prio)
		return heldRead{c, held}, err
	})
	if err != nil || !r.held {
		return false // initJob checks again
	}
	if w.change(d, r.c, nil) {
		w.logHeld(d, owner, lim, r.c)
	}
	return true
}

// logHeld logs a job held back at the per-user limit (at debug: a user
// beyond the limit has about lim of them per interval).
func (w *worker) logHeld(d *replicator.JobData, owner string, lim int, c replicator.Change) {
	w.logEvent(w.cfg.Logger.Debug(), d).Str("owner", owner).Int("limit", lim).
		Time("retry_at", time.UnixMilli(c.STime).UTC()).Msg("replication held back: its user runs as many replications as a user may")
}

// rotateUsers is the interval step's turn-taking within the per-user
// limit: for each user with continuous jobs here that ran MinRunTime,
// whose waiting jobs the
// nodes held back since the last step (the store's count of them, key 28,
// read for all those users in one snapshot read), it stops as many of
// that user's continuous jobs that ran MinRunTime as its share of those
// held back (in proportion to the user's jobs here among the limit),
// within what MaxChurn leaves after stopped; each goes back to the queue
// behind the user's held-back jobs (at the turn they were given), so that
// one of those takes the slot. A user first seen here is only noted. It
// returns how many it stopped.
func (n *Node) rotateUsers(ctx context.Context, cfg Config, now time.Time, stopped int) int {
	lim := cfg.userLimit()
	local, eligible, owners := turnGroups(n.kept(), cfg, now, func(w *worker) []string {
		if w.limitedOwner == "" {
			return nil
		}
		return []string{w.limitedOwner}
	})
	seen := n.heldSeen
	n.heldSeen = map[string]int64{}
	if len(owners) == 0 {
		return 0
	}
	counts, err := n.store.UserCounts(ctx, owners)
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Msg("replicator: per-user limit: reading the held-back jobs; no turns this interval")
		}
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return takeTurnsLocked(turns{groups: owners, held: func(o string) int64 { return counts[o].HeldBack },
		seen: seen, next: n.heldSeen, local: local, eligible: eligible, lim: func(string) int { return lim }, budget: cfg.MaxChurn - stopped,
		kind: stopUser, at: func(o string) int64 {
			return replicator.Millis(now.Add(replicator.HeldTurn(counts[o].Unfinished, lim, cfg.Interval)))
		}})
}

// turnGroups groups the workers ws (those the node keeps) by the groups
// (users, hosts) groupsOf gives each: how many each group has here, those
// that may give way (continuous, run MinRunTime), and the groups of the
// latter, sorted. groupsOf reads fields fixed at acceptance.
func turnGroups(ws []*worker, cfg Config, now time.Time, groupsOf func(*worker) []string) (local map[string]int, eligible map[string][]*worker, groups []string) {
	local, eligible = map[string]int{}, map[string][]*worker{}
	for _, w := range ws {
		ran := w.continuous && now.Sub(w.started) >= cfg.MinRunTime
		for _, g := range groupsOf(w) {
			local[g]++
			if ran {
				eligible[g] = append(eligible[g], w)
			}
		}
	}
	for g := range eligible {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	return local, eligible, groups
}

// turns is what takeTurnsLocked needs of one kind of turns.
type turns struct {
	groups     []string
	held       func(group string) int64 // the store's count of the group's held-back jobs
	seen, next map[string]int64         // held as the last step read it; this step's reading, filled in
	local      map[string]int
	eligible   map[string][]*worker
	lim        func(group string) int // the group's limit (users) or budget (hosts)
	budget     int                    // the stops MaxChurn leaves
	kind       stopKind
	at         func(group string) int64 // when a job stopped for the group's turn is due again (Unix ms)
}

// takeTurnsLocked stops, for each of t's groups whose count of held-back
// jobs grew since its last reading, as many of its eligible jobs (the
// least deserving first) as its share of the growth (in proportion to its
// jobs here among the limit), within t.budget, and returns how many it
// stopped. A group first seen here is only noted. Called with n.mu held.
func takeTurnsLocked(t turns) int {
	budget, total := t.budget, 0
	for _, g := range t.groups {
		c := t.held(g)
		t.next[g] = c
		prev, known := t.seen[g]
		if !known || c <= prev || budget <= 0 {
			continue
		}
		lim := max(1, t.lim(g))
		k := min(budget, int((c-prev)*int64(t.local[g])+int64(lim)-1)/lim)
		k = stopLeastDeservingUntilLocked(t.eligible[g], k, t.kind, t.at(g), func(*worker) bool { return true })
		budget -= k
		total += k
	}
	return total
}

// heldRead is heldChange's result through a read transaction.
type heldRead struct {
	c    replicator.Change
	held bool
}

// rotateHosts is the interval step's turn-taking within the hosts'
// budgets, as rotateUsers within the per-user limit: for each host of the
// continuous jobs here that ran MinRunTime whose waiting jobs the nodes
// held back since the last step (the store's count of them, key 35, read
// for all those hosts in one snapshot read), it stops as many of them as
// the host's share of those held back (in proportion to its jobs here
// among the budget), within what MaxChurn leaves after stopped; each goes
// back to the queue HeldByHostRecheck intervals later (or parks, caught
// up), and its stop wakes one of the held jobs, which takes its place. It
// returns how many it stopped.
func (n *Node) rotateHosts(ctx context.Context, cfg Config, now time.Time, stopped int) int {
	seen := n.hostHeldSeen
	n.hostHeldSeen = map[string]int64{}
	budget := cfg.budgets()
	if !budget.On() {
		return 0
	}
	local, eligible, hosts := turnGroups(n.kept(), cfg, now, func(w *worker) []string {
		return slices.DeleteFunc(slices.Clone(w.hosts), func(g string) bool { return budget.LimitOf(g) == 0 })
	})
	if len(hosts) == 0 {
		return 0
	}
	counts, err := n.store.HostsHeld(ctx, hosts)
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Msg("replicator: hosts' budgets: reading the held-back jobs; no turns this interval")
		}
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	at := replicator.Millis(now.Add(HeldByHostRecheck * cfg.Interval))
	return takeTurnsLocked(turns{groups: hosts, held: func(h string) int64 { return counts[h] },
		seen: seen, next: n.hostHeldSeen, local: local, eligible: eligible, lim: budget.LimitOf,
		budget: cfg.MaxChurn - stopped, kind: stopHost, at: func(string) int64 { return at }})
}
