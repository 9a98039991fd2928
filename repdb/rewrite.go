package repdb

import (
	"encoding/json"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// ReplicationDocIDs returns the ids of the replication documents (live
// or deleted; not design documents) among the next limit documents of db
// after after ("": from the first), in id order, read at tr's snapshot,
// and where a walk over db goes on: the last id examined, "" when the
// walk is over. Each page is one short transaction's read.
func (s *Store) ReplicationDocIDs(tr kv.ReadTransaction, db, after string, limit int) (ids []string, next string, err error) {
	ss := s.sub.Sub("docseq", db)
	begin := ss.Pack(nil)
	end, err := kv.Strinc(begin)
	if err != nil {
		return nil, "", err
	}
	if after != "" {
		begin = kv.KeyAfter(s.docSeqKey(db, after))
	}
	rows, err := tr.Snapshot().GetRange(kv.KeyRange{Begin: begin, End: end}, kv.RangeOptions{Limit: limit}).GetSliceWithError()
	if err != nil {
		return nil, "", err
	}
	for _, row := range rows {
		t, err := ss.Unpack(row.Key)
		if err != nil || len(t) != 1 {
			continue
		}
		id, _ := t[0].(string)
		if IsReplicationDoc(id) {
			ids = append(ids, id)
		}
		next = id
	}
	if len(rows) < limit {
		next = ""
	}
	return ids, next, nil
}

// RewriteBodies rewrites in place, in tr, the bodies a store keeps of
// document id (its winner's and its other leaves'; a store keeps no
// other revision's body) through f, which returns the body to store and
// whether it changed it. Revision ids, the revision tree, the
// update sequence and the changes feed stay as they are: a rewrite is
// for what reads do not show (the replicator re-encrypts sealed
// credentials, which reads redact), so f must leave every read the same.
// It reports whether a body changed; a missing document is false. On an
// error it stores nothing. Errors: ErrDBNotFound, ErrTooLarge, a corrupt
// record, f's.
func (s *Store) RewriteBodies(tr kv.Transaction, db, id string, f func(rev string, body map[string]any) (map[string]any, bool, error)) (bool, error) {
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
	// Every record is rewritten before any is stored: an error leaves
	// the document as it was.
	var sets []kv.KeyValue
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
			sets = append(sets, kv.KeyValue{Key: k, Value: nv})
		}
	}
	for _, e := range sets {
		tr.Set(e.Key, e.Value)
	}
	return len(sets) > 0, nil
}

// rewriteRecord applies f to the body of the record v, keeping the rest.
func rewriteRecord(id string, v []byte, f func(rev string, body map[string]any) (map[string]any, bool, error)) ([]byte, bool, error) {
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
