package control

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/replicator"
)

// Bounds of GET /_scheduler/_changes.
const (
	// ChangesLimitDefault and ChangesLimitMax: the changes one read
	// returns without a limit, and the most a limit may ask.
	ChangesLimitDefault = 100
	ChangesLimitMax     = 1000
	// changesScanMax bounds the feed events one read examines for the
	// changes its filters keep: a read past it returns what it found,
	// with the seq to go on from.
	changesScanMax = 10 * fdbjobs.FeedPageMax
)

// SchedulerChanges reads the replications' state changes after q.Since,
// as viewer may see them: a server admin every replication's, another
// user their own (the anonymous user none: unauthorized). It keeps those
// of q's database, document and states (SchedulerDocs' names, and
// StateRemoved; an unknown state is ErrBadQuery), and when none follows
// and q.Wait is positive, waits up to that long for one. LastSeq is where
// to read on from: past every event examined, those filtered out too.
func (p *Plane) SchedulerChanges(ctx context.Context, viewer api.User, q api.ChangesQuery) (api.ChangesPage, error) {
	owner, err := ownerOf(viewer)
	if err != nil {
		return api.ChangesPage{}, err
	}
	if q.Limit < 0 || q.Limit > ChangesLimitMax {
		return api.ChangesPage{}, replicator.NewReason(replicator.ErrBadQuery, "limit %d: from 1 to %d", q.Limit, ChangesLimitMax)
	}
	if q.Limit == 0 {
		q.Limit = ChangesLimitDefault
	}
	// states as _scheduler/docs takes them, and removed; a filter of
	// CouchDB 3.x's states alone keeps nothing.
	states, err := selectStates(q.States, replicator.StateRemoved)
	if err != nil {
		return api.ChangesPage{}, err
	}
	since := q.Since
	if since == "0" {
		since = "" // what CouchDB clients send for "from the start"
	}
	if since == "now" {
		if since, err = p.store.ChangesEnd(ctx); err != nil {
			return api.ChangesPage{}, changesErr(err)
		}
	}
	page := api.ChangesPage{Results: []api.ChangeRow{}, LastSeq: since}
	take := func(evs []fdbjobs.FeedEvent) {
		for _, e := range evs {
			if len(page.Results) == q.Limit {
				return
			}
			page.LastSeq = e.Seq
			c, ok := replicator.ChangeOf(e)
			if !ok || (owner != "" && c.Owner != owner) || (q.Database != "" && c.DBName != q.Database) ||
				(q.DocID != "" && c.DocID != q.DocID) || (len(q.States) > 0 && !slices.Contains(states, c.State)) {
				continue
			}
			page.Results = append(page.Results, api.ChangeRow{Seq: e.Seq, ID: e.JobID, Database: c.DBName, DocID: c.DocID,
				TemplateDB: c.TemplateDB, State: c.State, From: c.From, Node: c.Node, Time: e.At.UTC().Format(time.RFC3339Nano)})
		}
	}
	for scanned := 0; scanned < changesScanMax && len(page.Results) < q.Limit; {
		evs, err := p.store.ReadChanges(ctx, page.LastSeq, fdbjobs.FeedPageMax)
		if err != nil {
			return api.ChangesPage{}, changesErr(err)
		}
		if len(evs) == 0 {
			break
		}
		scanned += len(evs)
		take(evs)
	}
	if len(page.Results) > 0 || q.Wait <= 0 {
		return page, nil
	}
	wait, cancel := context.WithTimeout(ctx, q.Wait)
	defer cancel()
	for len(page.Results) == 0 {
		evs, err := p.store.WaitChanges(wait, page.LastSeq)
		if err != nil {
			if wait.Err() != nil && ctx.Err() == nil {
				return page, nil // waited long enough: nothing came
			}
			return api.ChangesPage{}, changesErr(err)
		}
		take(evs)
	}
	return page, nil
}

// changesErr gives the feed's errors their tags.
func changesErr(err error) error {
	switch {
	case errors.Is(err, fdbjobs.ErrFeedPruned):
		return replicator.NewReason(replicator.ErrChangesPruned,
			"changes after this seq were pruned (they are kept %v): read from since= empty for the oldest kept", replicator.ChangesKeep)
	case errors.Is(err, fdbjobs.ErrInvalidArgument):
		return replicator.NewReason(replicator.ErrBadQuery, "since: not a seq of this feed")
	}
	return err
}
