package frontend

import (
	"context"
	"encoding/json"
	"reflect"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
)

// Replication states the replicator writes into documents.
const (
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// DocStore gives replication nodes write access to replicator documents
// without the HTTP API: it implements replicator.DocUpdater, writing a
// job's terminal state into its document inside the job's finishing
// transaction. It needs only the store, so a replication-only node (no
// listener) can use it.
type DocStore struct {
	s   *store
	now func() time.Time
}

// NewDocStore returns the document store of the frontend whose keys live
// in sub (nil means SubspaceDefault); it must be the api_frontend nodes'
// subspace.
func NewDocStore(db kv.Database, sub subspace.Subspace) *DocStore {
	if sub == nil {
		sub = SubspaceDefault
	}
	return &DocStore{s: &store{db: db, sub: sub}, now: time.Now}
}

// UpdateDocState records a replication's terminal state in its document,
// in tr, as CouchDB's replicator does: "_replication_state" (completed or
// failed), "_replication_state_time" (ISO 8601, changed only when the
// state changes), "_replication_state_reason" (failed only) and
// "_replication_stats" (completed only). The write makes a new revision
// and a changes row. It is idempotent: when the document already holds
// exactly these fields nothing is written, so a retry after
// commit_unknown_result does not write twice. A document that is gone or
// deleted is left alone (nil error). Other states are refused.
func (d *DocStore) UpdateDocState(ctx context.Context, tr kv.Transaction, db, docID, state, reason string, stats json.RawMessage) error {
	if state != StateCompleted && state != StateFailed {
		return badRequest("replication state must be completed or failed")
	}
	cur, err := d.s.getDoc(tr, db, docID)
	switch {
	case err == ErrDocNotFound, err == ErrDocDeleted, err == ErrDBNotFound:
		return nil
	case err != nil:
		return err
	}
	body := make(map[string]any, len(cur.body)+4)
	for k, v := range cur.body {
		body[k] = v
	}
	if body["_replication_state"] != state {
		body["_replication_state"] = state
		body["_replication_state_time"] = d.now().UTC().Format("2006-01-02T15:04:05Z")
	}
	delete(body, "_replication_state_reason")
	delete(body, "_replication_stats")
	if state == StateFailed {
		body["_replication_state_reason"] = reason
	}
	if state == StateCompleted && len(stats) > 0 {
		v, err := decodeBody(stats)
		if err == nil {
			body["_replication_stats"] = v
		}
	}
	// Compare through JSON so numbers decoded either way compare equal.
	canonical, err := json.Marshal(body)
	if err != nil {
		return err
	}
	oldCanonical, _ := json.Marshal(cur.body)
	if string(canonical) == string(oldCanonical) || reflect.DeepEqual(body, cur.body) {
		return nil
	}
	var produced []string
	_, err = d.s.writeDocTx(tr, writeReq{db: db, id: docID, baseRev: cur.rev, body: body}, canonical, &produced)
	return err
}
