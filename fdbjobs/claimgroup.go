package fdbjobs

import "sync"

// claimGroup gathers the claims of places in a kind's partitions
// (Runtime.claimPartitions) that the kind's fetchers on a Runtime bring
// while a claim transaction runs, so that the next transaction takes them
// together: each claim transaction costs a round trip to the store, and
// the fetchers' claims, which read and write the same partitions' keys,
// cannot run at once without failing each other. One fetcher at a time
// leads: it runs one transaction for its own call and the calls waiting
// (those of the same way of granting places, up to max claims in all), then
// hands the lead to the first call still waiting. A call waits only for
// the transactions before its own, each bounded by its jobs' holds.
type claimGroup struct {
	mu sync.Mutex // guards waiting and leading
	// waiting are the calls not yet taken by a transaction, in the order
	// they came.
	waiting []*claimCall
	// leading: a call leads (runs, or is woken to run, a transaction).
	leading bool
}

// claimCall is one fetch's claims in a claimGroup.
type claimCall struct {
	claims []*claim
	// leasing: its places are leased to the Runtime (placelease.go);
	// only calls alike share a transaction.
	leasing bool
	// wake is sent to once, under the group's mu, when the call's
	// transaction ended or when it is to lead (lead set).
	wake chan struct{}
	lead bool
}

// claim runs c's claims in a transaction of its group, run (with every
// claim of the group, all of them leasing as c's do: run is c's own), which
// leaves each claim's outcome in it.
func (g *claimGroup) claim(c *claimCall, max int, run func(claims []*claim)) {
	c.wake = make(chan struct{}, 1)
	g.mu.Lock()
	g.waiting = append(g.waiting, c)
	if g.leading {
		g.mu.Unlock()
		<-c.wake
		if !c.lead {
			return
		}
		g.mu.Lock()
	}
	g.leading = true
	group := g.take(c, max)
	g.mu.Unlock()

	var all []*claim
	for _, gc := range group {
		all = append(all, gc.claims...)
	}
	run(all)

	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gc := range group[1:] {
		gc.wake <- struct{}{}
	}
	if len(g.waiting) > 0 {
		next := g.waiting[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		g.leading = false
	}
}

// take removes from waiting and returns lead (first) and the calls
// waiting that lease as it does, in order, while their claims come to at
// most max with lead's (lead's alone may be more).
func (g *claimGroup) take(lead *claimCall, max int) []*claimCall {
	group := []*claimCall{lead}
	n := len(lead.claims)
	kept := g.waiting[:0]
	for _, w := range g.waiting {
		switch {
		case w == lead:
		case w.leasing == lead.leasing && n+len(w.claims) <= max:
			group = append(group, w)
			n += len(w.claims)
		default:
			kept = append(kept, w)
		}
	}
	clear(g.waiting[len(kept):])
	g.waiting = kept
	return group
}
