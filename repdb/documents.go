package repdb

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Doc is a document as read.
type Doc struct {
	ID  string
	Rev string
	// Ancestors are the earlier revisions of its branch, newest first.
	Ancestors []string
	Deleted   bool
	// Body is the document without _id and _rev. Numbers are json.Number.
	Body map[string]any
	// Owner is the user who wrote a _local document ("" when an admin did;
	// always "" for other documents, whose owner is in their body).
	Owner string
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
	return &Doc{ID: id, Rev: r.Rev, Ancestors: r.Revs, Deleted: deleted, Body: body, Owner: r.Owner}, nil
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

// newRev computes the revision a write produces, deterministically from
// the previous revision, the deletion flag and the body, as CouchDB's revs
// are a digest of the edit: the same edit retried yields the same rev.
func newRev(prev string, deleted bool, canonical []byte) string {
	pos, _ := RevPos(prev)
	h := md5.New()
	h.Write([]byte(prev))
	if deleted {
		h.Write([]byte{0, 1})
	} else {
		h.Write([]byte{0, 0})
	}
	h.Write(canonical)
	return strconv.Itoa(pos+1) + "-" + hex.EncodeToString(h.Sum(nil))
}

// Write is one document write.
type Write struct {
	DB, ID string
	// BaseRev is the revision the client edited; "" for a new document.
	BaseRev string
	Deleted bool
	// Body is the document without _id, _rev and _deleted.
	Body map[string]any
	// JSON is Body encoded, when the caller has it already; nil makes
	// Write encode Body.
	JSON []byte
	// Owner, for a _local document, is the writing user: a non-empty
	// owner may only replace or delete a _local document it wrote
	// (ErrNotOwner otherwise), and is recorded; empty (admins) may write
	// any. Other documents ignore it.
	Owner string
	// Hook, when not nil, runs in the write's transaction after the
	// revision checks, with the current document (nil when there is none
	// or it is deleted); its error aborts the write. It may run more than
	// once (retries), so it must follow the kv rules.
	Hook func(tr kv.Transaction, old *Doc) error
}

// Write writes a document in one transaction: it checks the base
// revision, stores the new revision, moves the changes-feed row, adjusts
// the counters and runs the hook, and returns the new revision. A retry
// after commit_unknown_result that finds the revision its earlier attempt
// would have written reports that revision as success. Errors:
// ErrConflict, ErrDocNotFound (deleting a document that never existed),
// ErrDocDeleted (deleting a deleted one), ErrTooLarge, ErrDBNotFound,
// ErrBadDoc, the hook's.
func (s *Store) Write(ctx context.Context, w Write) (string, error) {
	canonical := w.JSON
	if canonical == nil {
		var err error
		if canonical, err = json.Marshal(w.Body); err != nil {
			return "", fmt.Errorf("%w: the body cannot be encoded", ErrBadDoc)
		}
	}
	if strings.HasPrefix(w.ID, LocalPrefix) {
		return s.writeLocal(ctx, w, canonical)
	}
	var produced []string // revs earlier attempts would have committed
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (string, error) {
		return s.writeTx(tr, w, canonical, &produced)
	})
}

// writeTx is Write's transaction body; produced collects the revs of
// earlier attempts, to recognise one that committed.
func (s *Store) writeTx(tr kv.Transaction, w Write, canonical []byte, produced *[]string) (string, error) {
	cur, err := s.Get(tr, w.DB, w.ID)
	switch {
	case err == nil, errors.Is(err, ErrDocDeleted), errors.Is(err, ErrDocNotFound):
	default:
		return "", err
	}
	// A retry after commit_unknown_result finds the revision its earlier
	// attempt committed, current or (if the replicator or a user wrote
	// since) in the history: the write happened, report it.
	if cur != nil {
		for _, r := range *produced {
			if r == cur.Rev || slices.Contains(cur.Ancestors, r) {
				return r, nil
			}
		}
	}
	var prev string
	var old *Doc
	switch {
	case cur == nil: // new document
		if w.BaseRev != "" {
			return "", ErrConflict
		}
		if w.Deleted {
			return "", ErrDocNotFound
		}
	case cur.Deleted:
		// CouchDB lets a deleted document be recreated without a rev,
		// extending the tombstone's branch.
		if w.BaseRev != "" && w.BaseRev != cur.Rev {
			return "", ErrConflict
		}
		if w.Deleted {
			return "", ErrDocDeleted
		}
		prev = cur.Rev
	default:
		if w.BaseRev != cur.Rev {
			return "", ErrConflict
		}
		prev, old = cur.Rev, cur
	}
	rev := newRev(prev, w.Deleted, canonical)
	*produced = append(*produced, rev)
	var history []string
	if cur != nil {
		history = append([]string{cur.Rev}, cur.Ancestors...)
		if len(history) > MaxRevHistory {
			history = history[:MaxRevHistory]
		}
	}
	if w.Hook != nil {
		if err := w.Hook(tr, old); err != nil {
			return "", err
		}
	}
	// Store the revision.
	if w.Deleted {
		v, _ := json.Marshal(record{Rev: rev, Revs: history})
		tr.Clear(s.docKey(w.DB, w.ID))
		tr.Set(s.tombKey(w.DB, w.ID), v)
	} else {
		v, _ := json.Marshal(record{Rev: rev, Revs: history, Body: canonical})
		if len(v) > kv.MaxValueSize {
			return "", fmt.Errorf("%w: %s", ErrTooLarge, w.ID)
		}
		tr.Clear(s.tombKey(w.DB, w.ID))
		tr.Set(s.docKey(w.DB, w.ID), v)
	}
	// Counters.
	switch {
	case cur == nil:
		tr.Add(s.countKey(w.DB, "doc"), one)
	case cur.Deleted:
		tr.Add(s.countKey(w.DB, "doc"), one)
		tr.Add(s.countKey(w.DB, "del"), minusOne)
	case w.Deleted:
		tr.Add(s.countKey(w.DB, "doc"), minusOne)
		tr.Add(s.countKey(w.DB, "del"), one)
	}
	// Move the changes row.
	if cur != nil {
		old, err := tr.Get(s.docSeqKey(w.DB, w.ID)).Get()
		if err != nil {
			return "", err
		}
		if len(old) == 10 {
			var vs tuple.Versionstamp
			copy(vs.TransactionVersion[:], old)
			tr.Clear(s.seqSpace(w.DB).Pack(tuple.Tuple{vs}))
		}
	}
	row, _ := json.Marshal(changeRow{ID: w.ID, Rev: rev, Deleted: w.Deleted})
	key, err := s.seqSpace(w.DB).PackWithVersionstamp(tuple.Tuple{tuple.IncompleteVersionstamp(0)})
	if err != nil {
		return "", err
	}
	tr.SetVersionstampedKey(key, row)
	tr.SetVersionstampedValue(s.docSeqKey(w.DB, w.ID), make([]byte, 14)) // 10 bytes + offset 0
	tr.SetVersionstampedValue(s.feedKey(w.DB), make([]byte, 14))         // wakes longpoll watchers
	return rev, nil
}

// writeLocal writes a _local document: revs "0-N", no changes row, no
// counters, no hook (the replicator ignores them).
func (s *Store) writeLocal(ctx context.Context, w Write, canonical []byte) (string, error) {
	var produced []string
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (string, error) {
		cur, err := s.Get(tr, w.DB, w.ID)
		if err != nil && !errors.Is(err, ErrDocNotFound) {
			return "", err
		}
		if cur != nil {
			for _, r := range produced {
				if r == cur.Rev && !w.Deleted {
					return r, nil
				}
			}
		} else if w.Deleted && len(produced) > 0 {
			return "0-0", nil // an earlier attempt deleted it
		}
		if cur != nil && w.Owner != "" && cur.Owner != w.Owner {
			return "", ErrNotOwner
		}
		n := 0
		switch {
		case cur == nil && w.BaseRev != "":
			return "", ErrConflict
		case cur == nil && w.Deleted:
			return "", ErrDocNotFound
		case cur != nil && w.BaseRev != cur.Rev:
			return "", ErrConflict
		case cur != nil:
			n, _ = strconv.Atoi(strings.TrimPrefix(cur.Rev, "0-"))
		}
		rev := "0-" + strconv.Itoa(n+1)
		produced = append(produced, rev)
		if w.Deleted {
			tr.Clear(s.localKey(w.DB, w.ID))
			return "0-0", nil
		}
		owner := w.Owner
		if owner == "" && cur != nil {
			owner = cur.Owner // an admin's write keeps the owner
		}
		v, _ := json.Marshal(record{Rev: rev, Body: canonical, Owner: owner})
		if len(v) > kv.MaxValueSize {
			return "", fmt.Errorf("%w: %s", ErrTooLarge, w.ID)
		}
		tr.Set(s.localKey(w.DB, w.ID), v)
		return rev, nil
	})
}

// AllDocsQuery selects documents of AllDocs: ids in [StartKey, EndKey]
// (bounds included, nil for none; StartKey is the high end when
// Descending), Skip rows skipped, at most Limit returned (< 0: all).
type AllDocsQuery struct {
	StartKey, EndKey *string
	Limit, Skip      int
	Descending       bool
}

// AllDocs reads live documents of db in id order, with the number of live
// documents.
func (s *Store) AllDocs(ctx context.Context, db string, q AllDocsQuery) ([]*Doc, int64, error) {
	type result struct {
		docs  []*Doc
		total int64
	}
	res, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (result, error) {
		count := tr.Get(s.countKey(db, "doc"))
		if _, err := s.getMeta(tr, db); err != nil {
			return result{}, err
		}
		total := func() (result, error) {
			c, err := count.Get()
			return result{total: kv.DecodeInt64(c)}, err
		}
		docs := s.sub.Sub("doc", db)
		begin, end := docs.FDBRangeKeys()
		lo, hi := q.StartKey, q.EndKey
		if q.Descending {
			lo, hi = hi, lo
		}
		if lo != nil {
			begin = docs.Pack(tuple.Tuple{*lo})
		}
		if hi != nil {
			end = kv.KeyAfter(docs.Pack(tuple.Tuple{*hi}))
		}
		if bytes.Compare(begin.FDBKey(), end.FDBKey()) >= 0 {
			return total()
		}
		opts := kv.RangeOptions{Reverse: q.Descending}
		if q.Limit >= 0 {
			opts.Limit = q.Limit + q.Skip
			if opts.Limit == 0 {
				return total()
			}
		}
		rows, err := tr.GetRange(kv.KeyRange{Begin: begin, End: end}, opts).GetSliceWithError()
		if err != nil {
			return result{}, err
		}
		res, err := total()
		if err != nil {
			return result{}, err
		}
		for i, r := range rows {
			if i < q.Skip {
				continue
			}
			t, err := docs.Unpack(r.Key)
			if err != nil || len(t) != 1 {
				continue
			}
			id, _ := t[0].(string)
			d, err := decodeRecord(id, r.Value, false)
			if err != nil {
				return result{}, err
			}
			res.docs = append(res.docs, d)
		}
		return res, nil
	})
	return res.docs, res.total, err
}

// Lookup reads the documents ids of db in one transaction, in order: a
// live document, a deleted one (Deleted set, no body) or nil for an id
// never written.
func (s *Store) Lookup(ctx context.Context, db string, ids []string) ([]*Doc, error) {
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) ([]*Doc, error) {
		if _, err := s.getMeta(tr, db); err != nil {
			return nil, err
		}
		out := make([]*Doc, len(ids))
		for i, id := range ids {
			d, err := s.Get(tr, db, id)
			switch {
			case err == nil, errors.Is(err, ErrDocDeleted):
				out[i] = d
			case errors.Is(err, ErrDocNotFound):
			default:
				return nil, err
			}
		}
		return out, nil
	})
}
