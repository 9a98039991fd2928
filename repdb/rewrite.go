package repdb

import (
	"encoding/json"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Rewrite is what RewriteBodies does to one stored body: it returns the
// body to store and whether it changed it.
type Rewrite func(rev string, body map[string]any) (map[string]any, bool, error)

// RewriteBodies rewrites in place, in tr, the bodies a store keeps of
// document id (its winner's and its other leaves'; a store keeps no
// other revision's body) through f. Revision ids, the revision tree, the
// update sequence and the changes feed stay as they are: a rewrite is
// for what reads do not show (the replicator re-encrypts sealed
// credentials, which reads redact), so f must leave every read the same.
// It reports whether a body changed; a missing document is false.
// Errors: ErrDBNotFound, ErrTooLarge, f's.
func (s *Store) RewriteBodies(tr kv.Transaction, db, id string, f Rewrite) (bool, error) {
	st, err := s.load(tr, db, id)
	if err != nil || st.winner == nil {
		return false, err
	}
	keys := []kv.Key{s.docKey(db, id)}
	if st.winner.Deleted {
		keys[0] = s.tombKey(db, id)
	}
	for _, l := range st.tree.Leaves() {
		if l.Rev != st.winner.Rev {
			keys = append(keys, s.leafKey(db, id, l.Rev))
		}
	}
	changed := false
	for _, k := range keys {
		v, err := tr.Get(k).Get()
		if err != nil {
			return false, err
		}
		if v == nil {
			return false, fmt.Errorf("repdb: corrupt document %q: a leaf has no record", id)
		}
		nv, ok, err := rewriteRecord(id, v, f)
		if err != nil {
			return false, err
		}
		if ok {
			tr.Set(k, nv)
			changed = true
		}
	}
	return changed, nil
}

// rewriteRecord applies f to the body of the record v, keeping the rest.
func rewriteRecord(id string, v []byte, f Rewrite) ([]byte, bool, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, false, fmt.Errorf("repdb: corrupt document %q: %v", id, err)
	}
	body, err := DecodeBody(r.Body)
	if err != nil {
		return nil, false, fmt.Errorf("repdb: corrupt document %q: %v", id, err)
	}
	body, changed, err := f(r.Rev, body)
	if err != nil || !changed {
		return nil, false, err
	}
	if r.Body, err = encodeBody(body, nil); err != nil {
		return nil, false, err
	}
	nv, err := json.Marshal(r)
	if err != nil {
		return nil, false, err
	}
	if len(nv) > kv.MaxValueSize {
		return nil, false, fmt.Errorf("%w: %s", ErrTooLarge, id)
	}
	return nv, true, nil
}
