package replicator

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// The replications' state changes (GET /_scheduler/_changes): the job
// layer's event feed of rep_jobs, where every change of a job's view state
// (AsSeen: pending, running, crashing, failed, completed, parked, …), its
// creation and its removal writes an event named ChangeEvent in the
// transaction that makes it (Store.index, which every job write goes
// through). The replication nodes' job Runtime prunes them past
// ChangesKeep.

// ChangeEvent is the name of a replication's state change in the job
// layer's feed of JobType (fdbjobs.EmitEvent).
const ChangeEvent = "state"

// ChangesKeep is how long the replications' state changes are kept.
const ChangesKeep = 24 * time.Hour

// StateRemoved is the state of a change that removed the job (its
// document deleted, or a finished transient job forgotten).
const StateRemoved = "removed"

// StateChange is the data of a ChangeEvent.
type StateChange struct {
	// DBName and DocID name a document's job ("" for a transient one).
	DBName string `json:"database,omitempty"`
	DocID  string `json:"doc_id,omitempty"`
	// TemplateDB is, for a template's replication, the database it
	// replicates (DocID is the template's).
	TemplateDB string `json:"template_db,omitempty"`
	// State is the job's view state after the change (StateRemoved when
	// it was removed); From the one before ("" for a new job).
	State string `json:"state"`
	From  string `json:"from,omitempty"`
	// Node is the node that runs it, when running.
	Node string `json:"node,omitempty"`
	// Owner is the user who owns it (DocOwner or RepUser), for the
	// filtering of a viewer's changes.
	Owner string `json:"owner,omitempty"`
}

// emitChange writes the change of job jobID from entry old to cur (nil:
// none) to the feed, in tr, when its state changed, and returns it (false:
// no change).
func (s *Store) emitChange(tr kv.Transaction, jobID string, old, cur *entry) (StateChange, bool, error) {
	c := StateChange{State: StateRemoved}
	e := cur
	if e == nil {
		e = old
	} else {
		c.State, c.Node = cur.state, cur.node
	}
	if old != nil {
		if cur != nil && old.state == cur.state {
			return StateChange{}, false, nil
		}
		c.From = old.state
	}
	c.DBName, c.Owner = e.dbName, e.owner
	c.DocID, c.TemplateDB, _ = strings.Cut(e.docID, childSep)
	b, err := json.Marshal(c)
	if err != nil {
		return StateChange{}, false, err
	}
	return c, true, s.jobs.EmitEvent(tr, JobType, jobID, ChangeEvent, b)
}

// setupChanges turns the feed of JobType on, kept ChangesKeep, unless it
// is so already.
func (s *Store) setupChanges(ctx context.Context) error {
	keep, on, err := s.jobs.FeedKeep(ctx, nil, JobType)
	if err != nil || (on && keep == ChangesKeep) {
		return err
	}
	return s.jobs.SetFeed(ctx, nil, JobType, ChangesKeep)
}

// ChangeOf decodes the ChangeEvent of a feed event; false for another
// event (the layer's own).
func ChangeOf(e fdbjobs.FeedEvent) (StateChange, bool) {
	var c StateChange
	if e.Event != ChangeEvent || json.Unmarshal(e.Data, &c) != nil {
		return StateChange{}, false
	}
	return c, true
}

// ReadChanges returns up to limit events of the feed of JobType that
// follow after ("" for the oldest kept): the replications' state changes
// (ChangeOf) among the layer's own events.
func (s *Store) ReadChanges(ctx context.Context, after string, limit int) ([]fdbjobs.FeedEvent, error) {
	return s.jobs.ReadFeed(ctx, nil, JobType, after, limit)
}

// WaitChanges waits until events follow after, or ctx ends, and returns
// them.
func (s *Store) WaitChanges(ctx context.Context, after string) ([]fdbjobs.FeedEvent, error) {
	return s.jobs.Feed(JobType, after, fdbjobs.FeedPageMax).Next(ctx)
}

// ChangesEnd returns the seq of the last event of the feed of JobType.
func (s *Store) ChangesEnd(ctx context.Context) (string, error) {
	return s.jobs.FeedEnd(ctx, nil, JobType)
}
