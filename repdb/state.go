package repdb

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// The _replication_state values the replicator records in documents.
const (
	docStateCompleted = "completed"
	docStateFailed    = "failed"
)

// DocCompleted records in a replication document, in tr, that its
// one-shot replication completed, as CouchDB's replicator does:
// "_replication_state": "completed", "_replication_state_time" (ISO 8601,
// changed only when the state changes) and "_replication_stats". It
// implements replicator.DocUpdater for replication nodes, which call it in
// the transaction that finishes the job.
func (s *Store) DocCompleted(ctx context.Context, tr kv.Transaction, db, docID string, stats json.RawMessage) error {
	return s.setState(tr, db, docID, docStateCompleted, "", stats)
}

// DocFailed records a failed replication in its document, in tr:
// "_replication_state": "failed", "_replication_state_time" and
// "_replication_state_reason". See DocCompleted.
func (s *Store) DocFailed(ctx context.Context, tr kv.Transaction, db, docID, reason string) error {
	return s.setState(tr, db, docID, docStateFailed, reason, nil)
}

// setState writes a terminal state into a document. The write makes a new
// revision and a changes row. It is idempotent: when the document already
// holds exactly these fields nothing is written, so a retry after
// commit_unknown_result does not write twice. A document that is gone or
// deleted, or whose database is gone, is left alone (nil error).
func (s *Store) setState(tr kv.Transaction, db, docID, state, reason string, stats json.RawMessage) error {
	cur, err := s.Get(tr, db, docID)
	switch {
	case errors.Is(err, ErrDocNotFound), errors.Is(err, ErrDocDeleted), errors.Is(err, ErrDBNotFound):
		return nil
	case err != nil:
		return err
	}
	body := make(map[string]any, len(cur.Body)+4)
	for k, v := range cur.Body {
		body[k] = v
	}
	if body["_replication_state"] != state {
		body["_replication_state"] = state
		body["_replication_state_time"] = s.clock.Now().UTC().Format("2006-01-02T15:04:05Z")
	}
	delete(body, "_replication_state_reason")
	delete(body, "_replication_stats")
	if state == docStateFailed {
		body["_replication_state_reason"] = reason
	}
	if state == docStateCompleted && len(stats) > 0 {
		if v, err := DecodeBody(stats); err == nil {
			body["_replication_stats"] = v
		}
	}
	// Compare through JSON so numbers decoded either way compare equal.
	canonical, err := json.Marshal(body)
	if err != nil {
		return err
	}
	oldCanonical, _ := json.Marshal(cur.Body)
	if string(canonical) == string(oldCanonical) || reflect.DeepEqual(body, cur.Body) {
		return nil
	}
	var produced attempts
	_, err = s.writeTx(tr, Write{DB: db, ID: docID, BaseRev: cur.Rev, Body: body}, canonical, &produced)
	return err
}
