package replicator

import (
	"context"
	"errors"
	"fmt"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/seal"
)

// Resealing (see doc.go, "Credentials at rest"): after a key rotation the
// replication nodes move every credential sealed to an older key to the
// current one, and seal those stored in the clear before a key was
// configured, so that the old key can be dropped; values sealed before
// bindings existed are bound to where they are sent then. A document and its job
// move together, in one transaction, with equal values; a running job's
// holder moves its own at its start.

// DocRewriter walks the replication documents of a replicator database
// and rewrites their stored bodies in place (repdb.Store implements it).
type DocRewriter interface {
	// ReplicationDocIDs returns the ids of the replication documents
	// (deleted ones too) among the next limit documents of db after
	// after ("": from the first), in id order, read at tr's snapshot, and
	// the id the walk goes on after ("": it is over).
	ReplicationDocIDs(tr kv.ReadTransaction, db, after string, limit int) (ids []string, next string, err error)
	// RewriteBodies passes each body stored of document docID (its
	// winner's and its other leaves') through f, which returns the body
	// to store and whether it changed it, in tr; it reports whether one
	// changed (a missing document: false).
	RewriteBodies(tr kv.Transaction, db, docID string, f func(rev string, body map[string]any) (map[string]any, bool, error)) (bool, error)
}

// Resealer moves credentials to its Opener's current key: a value sealed
// to another of the Opener's keys, or before bindings existed, is opened
// and sealed again, bound to where it is sent, one in the clear is
// sealed; Redacted, and values sealed to a key the Opener lacks
// or that do not open, stay as they are (Spec.Open says why when a job
// runs). It gives the same new value for the same scope, field and old
// value, so a document and its job moved in one transaction keep equal
// values (SameReplication compares them), and a retried transaction
// writes what its first attempt did. Not safe for concurrent use.
type Resealer struct {
	o    *seal.Opener
	memo map[string]string
}

// NewResealer returns a Resealer to o's current key.
func NewResealer(o *seal.Opener) *Resealer { return &Resealer{o: o, memo: map[string]string{}} }

// moves reports whether v is a credential a Resealer to o's current key
// moves: in the clear, sealed to another of o's keys, or sealed before
// bindings existed (one sealed to a key o lacks stays).
func moves(o *seal.Opener, v string) bool {
	switch {
	case v == "" || v == Redacted:
		return false
	case seal.IsSealed(v):
		return (o.Stale(v) || !seal.Bound(v)) && o.Holds(v)
	}
	return true
}

// value is v, sent to dest, moved (or v, when it stays). A value sealed
// with a binding keeps it (it does not open for another); one sealed
// before bindings existed is bound to dest.
func (r *Resealer) value(scope, field, dest, v string) (string, error) {
	if !moves(r.o, v) {
		return v, nil
	}
	k := scope + "\x00" + field + "\x00" + dest + "\x00" + v
	if nv, ok := r.memo[k]; ok {
		return nv, nil
	}
	var nv string
	var err error
	if seal.IsSealed(v) {
		nv, err = r.o.Reseal(v, sealContext(scope, field), sealBinding(dest))
		if errors.Is(err, seal.ErrCorrupt) {
			return v, nil // stays: the run that needs it says why
		}
	} else {
		nv, err = r.o.Current().Seal(v, sealContext(scope, field), sealBinding(dest))
	}
	if err != nil {
		return "", err
	}
	r.memo[k] = nv
	return nv, nil
}

// Body moves, in place, the credentials of a replication document body
// sealed for scope, and reports whether one moved. As SealBody, it stores
// a Basic Authorization header in the clear as auth.basic, as the parser
// reads it (the job parsed from the document holds it so).
func (r *Resealer) Body(body map[string]any, scope string) (bool, error) {
	changed := false
	for _, side := range []string{"source", "target"} {
		if ep, ok := body[side].(map[string]any); ok {
			if a, adopted := adoptBasicHeader(ep); adopted {
				body[side], changed = a, true
			}
		}
	}
	err := couch.WalkSecretsTo(body, func(field, dest, v string) (string, error) {
		nv, err := r.value(scope, field, dest, v)
		changed = changed || nv != v
		return nv, err
	})
	return changed, err
}

// Doc moves the credentials of every body stored of _replicator
// document docID of database db, in tr, and reports whether one moved.
func (r *Resealer) Doc(tr kv.Transaction, docs DocRewriter, db, docID string) (bool, error) {
	scope := DocScope(db, docID)
	return docs.RewriteBodies(tr, db, docID, func(_ string, body map[string]any) (map[string]any, bool, error) {
		changed, err := r.Body(body, scope)
		return body, changed, err
	})
}

// Spec returns s with its credentials moved (s itself when none moves),
// sealed for scope, and whether one moved.
func (r *Resealer) Spec(s *Spec, scope string) (*Spec, bool, error) {
	if s == nil || !s.Moves(r.o) {
		return s, false, nil
	}
	c := s.clone()
	var err error
	changed := false
	c.eachSecret(func(field, dest string, v *string) {
		if err != nil {
			return
		}
		var nv string
		if nv, err = r.value(scope, field, dest, *v); err == nil && nv != *v {
			*v, changed = nv, true
		}
	})
	if err != nil || !changed {
		return s, false, err
	}
	return c, true, nil
}

// Moves reports whether a Resealer to o's current key would move one of
// s's credentials (one that does not open stays all the same). s or o
// nil: false.
func (s *Spec) Moves(o *seal.Opener) bool {
	if s == nil || o == nil {
		return false
	}
	found := false
	s.eachSecret(func(_, _ string, v *string) { // changes nothing
		found = found || moves(o, *v)
	})
	return found
}

// Reseal is the resealing of the credentials the store holds, in the
// _replicator documents and their jobs and in transient jobs: one
// document or job at a time (Doc, Transient) and the pass over them all
// (Step, resealpass.go), whose record is key 27. The jobs' data it
// writes goes through the Store.
type Reseal struct {
	s   *Store
	key kv.Key // (27) -> JSON resealPass
}

// ResealOutcome is what a reseal of one document or job did.
type ResealOutcome int

const (
	// ResealNone: nothing to move.
	ResealNone ResealOutcome = iota
	// ResealMoved: credentials moved.
	ResealMoved
	// ResealHeld: the job runs, and its holder moves its credentials (and
	// its document's) at its next start; nothing was written.
	ResealHeld
)

// Doc moves the credentials of _replicator document docID of
// database db (UUID dbUUID) and of its job, in tr, with r: together, in
// this transaction, which reads the job's row and so conflicts with an
// Accept of it. A running job's holder keeps its data in memory and
// writes it back, so while its job runs neither it nor its document is
// changed (ResealHeld) unless the job's credentials already moved. A
// template's document moves with its template's data, whose running
// holder moves them itself (ResealHeld, the document moved); its
// replications' data is their own (Transient, in the jobs phase).
func (rs *Reseal) Doc(ctx context.Context, tr kv.Transaction, docs DocRewriter, db, dbUUID, docID string, r *Resealer) (ResealOutcome, error) {
	jobID := DocJobID(dbUUID, docID)
	d, st, err := rs.s.Job(ctx, tr, jobID)
	if err != nil {
		return ResealNone, err
	}
	if d != nil && st == fdbjobs.Running && d.Rep.Moves(r.o) {
		return ResealHeld, nil
	}
	tmpl, held, err := rs.template(ctx, tr, jobID, r)
	if err != nil {
		return ResealNone, err
	}
	// The job's new data first, checked: an error about the document or
	// its job stores nothing.
	var data []byte
	if d != nil && st != fdbjobs.Running {
		if data, err = r.jobData(d); err != nil {
			return ResealNone, err
		}
	}
	moved, err := r.Doc(tr, docs, db, docID)
	if err != nil {
		return ResealNone, err
	}
	if data != nil {
		if err := rs.s.setData(ctx, tr, jobID, data); err != nil {
			return ResealNone, err
		}
		moved = true
	}
	if tmpl != nil {
		if err := rs.s.jobs.SetData(ctx, tr, TemplateType, jobID, tmpl); err != nil {
			return ResealNone, err
		}
		moved = true
	}
	switch {
	case held:
		return ResealHeld, nil
	case moved:
		return ResealMoved, nil
	}
	return ResealNone, nil
}

// template returns the data of the template job jobID with its
// credentials moved, when they move and it does not run; when it runs,
// held (its holder moves them: scheduler's template runs).
func (rs *Reseal) template(ctx context.Context, tr kv.Transaction, jobID string, r *Resealer) (data []byte, held bool, err error) {
	t, st, err := rs.s.Templates().Get(ctx, tr, jobID)
	if err != nil || t == nil || !t.Rep.Moves(r.o) {
		return nil, false, err
	}
	if st == fdbjobs.Running {
		return nil, true, nil
	}
	rep, changed, err := r.Spec(t.Rep, t.SealScope())
	if err != nil || !changed {
		return nil, false, err
	}
	x := *t
	x.Rep = rep
	data = x.Encode()
	if len(data) > fdbjobs.MaxDataSize {
		return nil, false, fmt.Errorf("%w: %d bytes with its credentials sealed, at most %d", fdbjobs.ErrDataTooLarge, len(data), fdbjobs.MaxDataSize)
	}
	return data, false, nil
}

// Transient moves the credentials of transient job jobID with r, in tr,
// or of a template's replication (whose data is its own: its template's
// document and data are Doc's); a running one is ResealHeld (its holder
// moves them at its next start), a document's job is left to Doc.
func (rs *Reseal) Transient(ctx context.Context, tr kv.Transaction, jobID string, r *Resealer) (ResealOutcome, error) {
	d, st, err := rs.s.Job(ctx, tr, jobID)
	switch {
	case err != nil:
		return ResealNone, err
	case d == nil || !d.Transient() && d.TemplateDB == "" || !d.Rep.Moves(r.o):
		return ResealNone, nil
	case st == fdbjobs.Running:
		return ResealHeld, nil
	}
	moved, err := rs.job(ctx, tr, jobID, d, r)
	if err != nil || !moved {
		return ResealNone, err
	}
	return ResealMoved, nil
}

// job moves the credentials of job jobID, with data d, which is
// not running, in tr.
func (rs *Reseal) job(ctx context.Context, tr kv.Transaction, jobID string, d *JobData, r *Resealer) (bool, error) {
	data, err := r.jobData(d)
	if err != nil || data == nil {
		return false, err
	}
	return true, rs.s.setData(ctx, tr, jobID, data)
}

// jobData is d's data with its credentials moved; nil when none moves.
// Data that would no longer fit is fdbjobs.ErrDataTooLarge.
func (r *Resealer) jobData(d *JobData) ([]byte, error) {
	rep, changed, err := r.Spec(d.Rep, d.SealScope())
	if err != nil || !changed {
		return nil, err
	}
	x := d.Clone()
	x.Rep = rep
	data := x.Encode()
	if len(data) > fdbjobs.MaxDataSize {
		return nil, fmt.Errorf("%w: %d bytes with its credentials sealed, at most %d", fdbjobs.ErrDataTooLarge, len(data), fdbjobs.MaxDataSize)
	}
	return data, nil
}
