package repdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Doc is a revision of a document as read.
type Doc struct {
	ID  string
	Rev string
	// Deleted marks a deletion (a tombstone).
	Deleted bool
	// Body is the document without _id and _rev. Numbers are json.Number.
	Body map[string]any
	// Owner is the user who wrote a _local document ("" when an admin did;
	// always "" for other documents, whose owner is in their body).
	Owner string
	// Leaves is the number of leaf revisions of the document when read
	// with its winner (1 without conflicts or deleted branches).
	Leaves int
	// Path is the revision and its ancestors kept, newest first, for
	// reads of the revision tree (OpenRevs and the Conflicts options);
	// nil otherwise.
	Path []string
	// Conflicts and DeletedConflicts are the other live and deleted
	// leaves, winner order, for a winner read with its tree.
	Conflicts, DeletedConflicts []string

	raw       json.RawMessage // Body as stored
	ancestors []string        // a record's history from before revision trees
}

// DecodeBody decodes a JSON object keeping numbers as json.Number, as
// document bodies are held; an empty input is an empty object.
func DecodeBody(raw []byte) (map[string]any, error) {
	m := map[string]any{}
	if len(raw) == 0 {
		return m, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// Get reads a document in tr. A deleted document is returned with
// ErrDocDeleted (its revision is the tombstone's); a document that never
// existed gives ErrDocNotFound, a missing database ErrDBNotFound. _local
// documents come from their own range.
func (s *Store) Get(tr kv.ReadTransaction, db, id string) (*Doc, error) {
	if strings.HasPrefix(id, LocalPrefix) {
		lf := tr.Get(s.localKey(db, id))
		if _, err := s.getMeta(tr, db); err != nil {
			return nil, err
		}
		v, err := lf.Get()
		if err != nil {
			return nil, err
		}
		if v == nil {
			return nil, ErrDocNotFound
		}
		return decodeRecord(id, v, false)
	}
	lf, tf := tr.Get(s.docKey(db, id)), tr.Get(s.tombKey(db, id))
	if _, err := s.getMeta(tr, db); err != nil {
		return nil, err
	}
	v, err := lf.Get()
	if err != nil {
		return nil, err
	}
	if v != nil {
		return decodeRecord(id, v, false)
	}
	t, err := tf.Get()
	if err != nil {
		return nil, err
	}
	if t != nil {
		d, err := decodeRecord(id, t, true)
		if err != nil {
			return nil, err
		}
		return d, ErrDocDeleted
	}
	return nil, ErrDocNotFound
}

// ReadDoc is Get in a read transaction of its own.
func (s *Store) ReadDoc(ctx context.Context, db, id string) (*Doc, error) {
	type res struct {
		d   *Doc
		err error
	}
	r, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (res, error) {
		d, err := s.Get(tr, db, id)
		if errors.Is(err, ErrDocDeleted) {
			return res{d, err}, nil // not a transaction failure
		}
		return res{d, nil}, err
	})
	if err != nil {
		return nil, err
	}
	return r.d, r.err
}

func decodeRecord(id string, v []byte, deleted bool) (*Doc, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("repdb: corrupt document %q: %v", id, err)
	}
	body, err := DecodeBody(r.Body)
	if err != nil {
		return nil, fmt.Errorf("repdb: corrupt document %q: %v", id, err)
	}
	return &Doc{ID: id, Rev: r.Rev, Deleted: deleted || r.Deleted, Body: body, Owner: r.Owner,
		Leaves: max(r.Leaves, 1), raw: r.Body, ancestors: r.Revs}, nil
}

// RevPos returns the generation of a revision ("3-abc" -> 3).
func RevPos(rev string) (int, bool) {
	n, hash, ok := strings.Cut(rev, "-")
	if !ok || hash == "" {
		return 0, false
	}
	pos, err := strconv.Atoi(n)
	if err != nil || pos < 0 {
		return 0, false
	}
	return pos, true
}

// docState is a document as a write or a tree read needs it: the winner
// (nil when the document was never written) and the revision tree (empty
// then).
type docState struct {
	winner *Doc
	tree   *RevTree
	size   int // bytes read
}

// load reads a document's winner and tree in tr. Documents stored before
// trees were have no tree key: their tree is the record's one branch.
func (s *Store) load(tr kv.ReadTransaction, db, id string) (*docState, error) {
	lf, tf, trf := tr.Get(s.docKey(db, id)), tr.Get(s.tombKey(db, id)), tr.Get(s.treeKey(db, id))
	if _, err := s.getMeta(tr, db); err != nil {
		return nil, err
	}
	v, err := lf.Get()
	if err != nil {
		return nil, err
	}
	deleted := v == nil
	if deleted {
		if v, err = tf.Get(); err != nil {
			return nil, err
		}
	}
	tv, err := trf.Get()
	if err != nil {
		return nil, err
	}
	if v == nil {
		return &docState{tree: &RevTree{}}, nil
	}
	d, err := decodeRecord(id, v, deleted)
	if err != nil {
		return nil, err
	}
	st := &docState{winner: d, size: len(v) + len(tv)}
	if tv == nil {
		st.tree = chainTree(d.Rev, d.ancestors, deleted)
	} else if st.tree, err = decodeTree(tv); err != nil {
		return nil, fmt.Errorf("repdb: corrupt revision tree of %q: %v", id, err)
	}
	if !st.tree.IsLeaf(d.Rev) {
		return nil, fmt.Errorf("repdb: corrupt revision tree of %q: the winner %s is not a leaf", id, d.Rev)
	}
	return st, nil
}

// readLeaf reads the record of a leaf that does not win.
func (s *Store) readLeaf(tr kv.ReadTransaction, db, id, rev string) (*Doc, error) {
	v, err := tr.Get(s.leafKey(db, id, rev)).Get()
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("repdb: corrupt document %q: no record of leaf %s", id, rev)
	}
	return decodeRecord(id, v, false)
}

// withTree fills a winner's Path, Conflicts and DeletedConflicts from
// its tree.
func withTree(d *Doc, t *RevTree) *Doc {
	d.Path = t.Path(d.Rev)
	d.Conflicts, d.DeletedConflicts = nil, nil
	for _, l := range t.Leaves() {
		switch {
		case l.Rev == d.Rev:
		case l.Deleted:
			d.DeletedConflicts = append(d.DeletedConflicts, l.Rev)
		default:
			d.Conflicts = append(d.Conflicts, l.Rev)
		}
	}
	d.Leaves = max(len(d.Conflicts)+len(d.DeletedConflicts)+1, 1)
	return d
}
