package frontend

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Key layout under the store's subspace (SubspaceDefault is ("frontend")):
//
//	("db", db)               -> dbMeta JSON
//	("doc", db, id)          -> docRecord JSON of a live document
//	("tomb", db, id)         -> docRecord JSON of a deleted document (no body)
//	("local", db, id)        -> docRecord JSON of a _local document
//	("docseq", db, id)       -> 10-byte versionstamp of the document's last change
//	("seq", db, versionstamp)-> changeRow JSON: the changes feed
//	("count", db, "doc"|"del") -> little-endian int64 counters (atomic adds)
//	("feed", db)             -> versionstamp of the last write (watched by longpoll feeds)
//
// Live and deleted documents live in separate ranges so that _all_docs is a
// plain range read; the changes feed holds one row per document, at the
// versionstamp of its last write.

type dbMeta struct {
	UUID    string `json:"uuid"`
	Created int64  `json:"created"`
}

type docRecord struct {
	Rev string `json:"rev"`
	// Revs are the earlier revisions of the document's branch, newest
	// first, at most maxRevHistory.
	Revs []string        `json:"revs,omitempty"`
	Body json.RawMessage `json:"body,omitempty"`
}

// maxRevHistory bounds the revision history kept per document: enough for
// GET ?revs=true and for a retried write to find its own revision under
// writes made since (see writeDocTx).
const maxRevHistory = 20

type changeRow struct {
	ID      string `json:"id"`
	Rev     string `json:"rev"`
	Deleted bool   `json:"deleted,omitempty"`
}

// store keeps replicator databases and their documents in the kv store.
type store struct {
	db  kv.Database
	sub subspace.Subspace
}

func (s *store) dbKey(db string) kv.Key           { return s.sub.Pack(tuple.Tuple{"db", db}) }
func (s *store) docKey(db, id string) kv.Key      { return s.sub.Pack(tuple.Tuple{"doc", db, id}) }
func (s *store) tombKey(db, id string) kv.Key     { return s.sub.Pack(tuple.Tuple{"tomb", db, id}) }
func (s *store) localKey(db, id string) kv.Key    { return s.sub.Pack(tuple.Tuple{"local", db, id}) }
func (s *store) docSeqKey(db, id string) kv.Key   { return s.sub.Pack(tuple.Tuple{"docseq", db, id}) }
func (s *store) countKey(db, which string) kv.Key { return s.sub.Pack(tuple.Tuple{"count", db, which}) }

// feedKey changes (blind versionstamped write, no conflicts) with every
// document write of db; longpoll feeds watch it.
func (s *store) feedKey(db string) kv.Key { return s.sub.Pack(tuple.Tuple{"feed", db}) }

func (s *store) seqSpace(db string) subspace.Subspace {
	return s.sub.Sub("seq", db)
}

var (
	one      = kv.Int64(1)
	minusOne = kv.Int64(-1)
)

// getMeta reads a database's metadata; ErrDBNotFound when absent.
func (s *store) getMeta(tr kv.ReadTransaction, db string) (dbMeta, error) {
	v, err := tr.Get(s.dbKey(db)).Get()
	if err != nil {
		return dbMeta{}, err
	}
	if v == nil {
		return dbMeta{}, ErrDBNotFound
	}
	var m dbMeta
	if err := json.Unmarshal(v, &m); err != nil {
		return dbMeta{}, fmt.Errorf("frontend: corrupt metadata of %q: %v", db, err)
	}
	return m, nil
}

// createDB creates db with uuid, calling hook in the same transaction. It
// is idempotent under commit_unknown_result: finding db with this very uuid
// means an earlier attempt committed.
func (s *store) createDB(ctx context.Context, db, uuid string, hook func(kv.Transaction) error) error {
	_, err := s.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		m, err := s.getMeta(tr, db)
		if err == nil {
			if m.UUID == uuid {
				return nil, nil
			}
			return nil, ErrDBExists
		}
		if err != ErrDBNotFound {
			return nil, err
		}
		v, _ := json.Marshal(dbMeta{UUID: uuid, Created: time.Now().Unix()})
		tr.Set(s.dbKey(db), v)
		if hook != nil {
			return nil, hook(tr)
		}
		return nil, nil
	})
	return err
}

// deleteDB removes db and everything in it, calling hook in the same
// transaction. A retry that finds db gone after an earlier attempt saw it
// reports success (the earlier attempt, or a concurrent delete, removed it).
func (s *store) deleteDB(ctx context.Context, db string, hook func(kv.Transaction) error) error {
	seen := false
	_, err := s.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if _, err := s.getMeta(tr, db); err != nil {
			if err == ErrDBNotFound && seen {
				return nil, nil
			}
			return nil, err
		}
		seen = true
		tr.Clear(s.dbKey(db))
		tr.Clear(s.feedKey(db))
		for _, kind := range []string{"doc", "tomb", "local", "docseq", "seq", "count"} {
			tr.ClearRange(s.sub.Sub(kind, db))
		}
		if hook != nil {
			return nil, hook(tr)
		}
		return nil, nil
	})
	return err
}

// listDBs returns the names of every database, in order.
func (s *store) listDBs(ctx context.Context) ([]string, error) {
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) ([]string, error) {
		rows, err := tr.GetRange(s.sub.Sub("db"), kv.RangeOptions{}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		out := make([]string, 0, len(rows))
		for _, r := range rows {
			t, err := s.sub.Sub("db").Unpack(r.Key)
			if err != nil || len(t) != 1 {
				continue
			}
			if name, ok := t[0].(string); ok {
				out = append(out, name)
			}
		}
		return out, nil
	})
}

// dbInfo is GET /{db}'s data.
type dbInfo struct {
	meta      dbMeta
	docCount  int64
	delCount  int64
	updateSeq string
}

func (s *store) info(ctx context.Context, db string) (dbInfo, error) {
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (dbInfo, error) {
		docs := tr.Get(s.countKey(db, "doc"))
		dels := tr.Get(s.countKey(db, "del"))
		last := tr.GetRange(s.seqSpace(db), kv.RangeOptions{Limit: 1, Reverse: true})
		m, err := s.getMeta(tr, db)
		if err != nil {
			return dbInfo{}, err
		}
		d, err := docs.Get()
		if err != nil {
			return dbInfo{}, err
		}
		x, err := dels.Get()
		if err != nil {
			return dbInfo{}, err
		}
		rows, err := last.GetSliceWithError()
		if err != nil {
			return dbInfo{}, err
		}
		info := dbInfo{meta: m, docCount: kv.DecodeInt64(d), delCount: kv.DecodeInt64(x), updateSeq: "0"}
		if len(rows) == 1 {
			if seq, err := s.seqOf(db, rows[0].Key); err == nil {
				info.updateSeq = seq
			}
		}
		return info, nil
	})
}

// seqOf turns a ("seq", db, vs) key into the feed's sequence string: the
// 12-byte versionstamp in hex.
func (s *store) seqOf(db string, key kv.Key) (string, error) {
	t, err := s.seqSpace(db).Unpack(key)
	if err != nil {
		return "", err
	}
	if len(t) != 1 {
		return "", fmt.Errorf("frontend: bad changes key %s", key)
	}
	vs, ok := t[0].(tuple.Versionstamp)
	if !ok {
		return "", fmt.Errorf("frontend: bad changes key %s", key)
	}
	return hex.EncodeToString(vs.Bytes()), nil
}

// parseSeq turns a since value into a versionstamp; "0" and "" mean the
// beginning.
func parseSeq(since string) (tuple.Versionstamp, bool, error) {
	if since == "" || since == "0" {
		return tuple.Versionstamp{}, false, nil
	}
	b, err := hex.DecodeString(since)
	if err != nil || len(b) != 12 {
		return tuple.Versionstamp{}, false, fmt.Errorf("bad sequence %q", since)
	}
	var vs tuple.Versionstamp
	copy(vs.TransactionVersion[:], b[:10])
	vs.UserVersion = binary.BigEndian.Uint16(b[10:])
	return vs, true, nil
}

// doc is a document as read.
type doc struct {
	id        string
	rev       string
	ancestors []string // earlier revs, newest first
	deleted   bool
	body      map[string]any // without _id and _rev
}

func decodeBody(raw json.RawMessage) (map[string]any, error) {
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

// getDoc reads a document. Local documents (id "_local/…") come from their
// own range.
func (s *store) getDoc(tr kv.ReadTransaction, db, id string) (*doc, error) {
	if strings.HasPrefix(id, localPrefix) {
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

func decodeRecord(id string, v []byte, deleted bool) (*doc, error) {
	var r docRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("frontend: corrupt document %q: %v", id, err)
	}
	body, err := decodeBody(r.Body)
	if err != nil {
		return nil, fmt.Errorf("frontend: corrupt document %q: %v", id, err)
	}
	return &doc{id: id, rev: r.Rev, ancestors: r.Revs, deleted: deleted, body: body}, nil
}

// revPos returns the generation of a rev ("3-abc" -> 3).
func revPos(rev string) (int, bool) {
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
	pos, _ := revPos(prev)
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

// writeReq is one document write.
type writeReq struct {
	db, id  string
	baseRev string // the rev the client edited; "" for a new document
	deleted bool
	body    map[string]any // without _id, _rev, _deleted
	// hook runs in the write's transaction after the checks, with the
	// current document (nil when there is none, or it is deleted); its
	// error aborts the write. It may run more than once.
	hook func(tr kv.Transaction, old *doc, final map[string]any) error
}

// writeDoc writes a document in one transaction: check the base revision,
// store the new revision, move the changes-feed row, adjust counters, and
// run the hook (job creation) in the same transaction. It returns the new
// rev. A retry after commit_unknown_result that finds the rev its earlier
// attempt would have written reports that rev as success.
func (s *store) writeDoc(ctx context.Context, w writeReq) (string, error) {
	canonical, err := json.Marshal(w.body)
	if err != nil {
		return "", badRequest("document body cannot be encoded")
	}
	if strings.HasPrefix(w.id, localPrefix) {
		return s.writeLocal(ctx, w, canonical)
	}
	var produced []string // revs earlier attempts would have committed
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (string, error) {
		return s.writeDocTx(tr, w, canonical, &produced)
	})
}

// writeDocTx is writeDoc's transaction body; produced collects the revs
// of earlier attempts, to recognise one that committed.
func (s *store) writeDocTx(tr kv.Transaction, w writeReq, canonical []byte, produced *[]string) (string, error) {
	cur, err := s.getDoc(tr, w.db, w.id)
	switch {
	case err == nil, err == ErrDocDeleted, err == ErrDocNotFound:
	default:
		return "", err
	}
	// A retry after commit_unknown_result finds the revision its earlier
	// attempt committed, current or (if the replicator or a user wrote
	// since) in the history: the write happened, report it.
	if cur != nil {
		for _, r := range *produced {
			if r == cur.rev || slices.Contains(cur.ancestors, r) {
				return r, nil
			}
		}
	}
	var prev string
	var old *doc
	switch {
	case cur == nil: // new document
		if w.baseRev != "" {
			return "", ErrConflict
		}
		if w.deleted {
			return "", ErrDocNotFound
		}
	case cur.deleted:
		// CouchDB lets a deleted document be recreated without a rev,
		// extending the tombstone's branch.
		if w.baseRev != "" && w.baseRev != cur.rev {
			return "", ErrConflict
		}
		if w.deleted {
			return "", ErrDocDeleted
		}
		prev = cur.rev
	default:
		if w.baseRev != cur.rev {
			return "", ErrConflict
		}
		prev, old = cur.rev, cur
	}
	rev := newRev(prev, w.deleted, canonical)
	*produced = append(*produced, rev)
	var history []string
	if cur != nil {
		history = append([]string{cur.rev}, cur.ancestors...)
		if len(history) > maxRevHistory {
			history = history[:maxRevHistory]
		}
	}
	if w.hook != nil {
		if err := w.hook(tr, old, w.body); err != nil {
			return "", err
		}
	}
	// Store the revision.
	if w.deleted {
		v, _ := json.Marshal(docRecord{Rev: rev, Revs: history})
		tr.Clear(s.docKey(w.db, w.id))
		tr.Set(s.tombKey(w.db, w.id), v)
	} else {
		v, _ := json.Marshal(docRecord{Rev: rev, Revs: history, Body: canonical})
		if len(v) > kv.MaxValueSize {
			return "", newError(413, "document_too_large", w.id)
		}
		tr.Clear(s.tombKey(w.db, w.id))
		tr.Set(s.docKey(w.db, w.id), v)
	}
	// Counters.
	switch {
	case cur == nil:
		tr.Add(s.countKey(w.db, "doc"), one)
	case cur.deleted:
		tr.Add(s.countKey(w.db, "doc"), one)
		tr.Add(s.countKey(w.db, "del"), minusOne)
	case w.deleted:
		tr.Add(s.countKey(w.db, "doc"), minusOne)
		tr.Add(s.countKey(w.db, "del"), one)
	}
	// Move the changes row.
	if cur != nil {
		old, err := tr.Get(s.docSeqKey(w.db, w.id)).Get()
		if err != nil {
			return "", err
		}
		if len(old) == 10 {
			var vs tuple.Versionstamp
			copy(vs.TransactionVersion[:], old)
			tr.Clear(s.seqSpace(w.db).Pack(tuple.Tuple{vs}))
		}
	}
	row, _ := json.Marshal(changeRow{ID: w.id, Rev: rev, Deleted: w.deleted})
	key, err := s.seqSpace(w.db).PackWithVersionstamp(tuple.Tuple{tuple.IncompleteVersionstamp(0)})
	if err != nil {
		return "", err
	}
	tr.SetVersionstampedKey(key, row)
	tr.SetVersionstampedValue(s.docSeqKey(w.db, w.id), make([]byte, 14)) // 10 bytes + offset 0
	tr.SetVersionstampedValue(s.feedKey(w.db), make([]byte, 14))         // wakes longpoll watchers
	return rev, nil
}

// writeLocal writes a _local document: revs "0-N", no changes row, no
// counters, no hook (the replicator ignores them).
func (s *store) writeLocal(ctx context.Context, w writeReq, canonical []byte) (string, error) {
	var produced []string
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (string, error) {
		cur, err := s.getDoc(tr, w.db, w.id)
		if err != nil && err != ErrDocNotFound {
			return "", err
		}
		if cur != nil {
			for _, r := range produced {
				if r == cur.rev && !w.deleted {
					return r, nil
				}
			}
		} else if w.deleted && len(produced) > 0 {
			return "0-0", nil // an earlier attempt deleted it
		}
		n := 0
		switch {
		case cur == nil && w.baseRev != "":
			return "", ErrConflict
		case cur == nil && w.deleted:
			return "", ErrDocNotFound
		case cur != nil && w.baseRev != cur.rev:
			return "", ErrConflict
		case cur != nil:
			n, _ = strconv.Atoi(strings.TrimPrefix(cur.rev, "0-"))
		}
		rev := "0-" + strconv.Itoa(n+1)
		produced = append(produced, rev)
		if w.deleted {
			tr.Clear(s.localKey(w.db, w.id))
			return "0-0", nil
		}
		v, _ := json.Marshal(docRecord{Rev: rev, Body: canonical})
		if len(v) > kv.MaxValueSize {
			return "", newError(413, "document_too_large", w.id)
		}
		tr.Set(s.localKey(w.db, w.id), v)
		return rev, nil
	})
}

// allDocs reads live documents of db with ids in [start, end] (end
// inclusive when set), skipping skip and returning at most limit (<0: all).
func (s *store) allDocs(ctx context.Context, db string, q allDocsQuery) ([]*doc, int64, error) {
	type result struct {
		docs  []*doc
		total int64
	}
	res, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (result, error) {
		count := tr.Get(s.countKey(db, "doc"))
		if _, err := s.getMeta(tr, db); err != nil {
			return result{}, err
		}
		docs := s.sub.Sub("doc", db)
		begin, end := docs.FDBRangeKeys()
		if q.startKey != nil {
			begin = docs.Pack(tuple.Tuple{*q.startKey})
		}
		if q.endKey != nil {
			end = kv.KeyAfter(docs.Pack(tuple.Tuple{*q.endKey}))
		}
		if q.descending {
			// startkey is the high end when descending.
			begin, end = docs.FDBRangeKeys()
			if q.endKey != nil {
				begin = docs.Pack(tuple.Tuple{*q.endKey})
			}
			if q.startKey != nil {
				end = kv.KeyAfter(docs.Pack(tuple.Tuple{*q.startKey}))
			}
		}
		if bytes.Compare(begin.FDBKey(), end.FDBKey()) >= 0 {
			c, err := count.Get()
			return result{total: kv.DecodeInt64(c)}, err
		}
		opts := kv.RangeOptions{Reverse: q.descending}
		if q.limit >= 0 {
			opts.Limit = q.limit + q.skip
			if opts.Limit == 0 {
				c, err := count.Get()
				return result{total: kv.DecodeInt64(c)}, err
			}
		}
		rows, err := tr.GetRange(kv.KeyRange{Begin: begin, End: end}, opts).GetSliceWithError()
		if err != nil {
			return result{}, err
		}
		var out []*doc
		for i, r := range rows {
			if i < q.skip {
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
			out = append(out, d)
		}
		c, err := count.Get()
		if err != nil {
			return result{}, err
		}
		return result{docs: out, total: kv.DecodeInt64(c)}, nil
	})
	return res.docs, res.total, err
}

type allDocsQuery struct {
	startKey, endKey *string
	limit, skip      int
	descending       bool
}

// change is one row of the changes feed.
type change struct {
	seq string
	changeRow
	doc *doc // with include_docs
}

// changes reads the feed of db after since, at most limit rows (<0: all).
func (s *store) changes(ctx context.Context, db, since string, limit int, includeDocs bool) ([]change, string, error) {
	vs, after, err := parseSeq(since)
	if err != nil {
		return nil, "", badRequest(fmt.Sprintf("Malformed since sequence %q", since))
	}
	type result struct {
		rows []change
		last string
	}
	res, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (result, error) {
		if _, err := s.getMeta(tr, db); err != nil {
			return result{}, err
		}
		sp := s.seqSpace(db)
		begin, end := sp.FDBRangeKeys()
		if after {
			begin = kv.KeyAfter(sp.Pack(tuple.Tuple{vs}))
		}
		opts := kv.RangeOptions{}
		if limit >= 0 {
			opts.Limit = limit
		}
		res := result{last: since}
		if res.last == "" {
			res.last = "0"
		}
		if limit == 0 {
			return res, nil
		}
		rows, err := tr.GetRange(kv.KeyRange{Begin: begin, End: end}, opts).GetSliceWithError()
		if err != nil {
			return result{}, err
		}
		for _, r := range rows {
			seq, err := s.seqOf(db, r.Key)
			if err != nil {
				return result{}, err
			}
			var c change
			if err := json.Unmarshal(r.Value, &c.changeRow); err != nil {
				return result{}, fmt.Errorf("frontend: corrupt change row: %v", err)
			}
			c.seq = seq
			if includeDocs && !c.Deleted {
				d, err := s.getDoc(tr, db, c.ID)
				if err != nil && err != ErrDocDeleted && err != ErrDocNotFound {
					return result{}, err
				}
				c.doc = d
			}
			res.rows = append(res.rows, c)
			res.last = seq
		}
		return res, nil
	})
	return res.rows, res.last, err
}

// waitChange returns watches that fire after the first document write of
// db after since (the feed key) or the database's deletion (its metadata
// key), or nil when there already is a change: the check and the watches
// are in one transaction, so no write slips between.
func (s *store) waitChange(ctx context.Context, db, since string) ([]kv.FutureNil, error) {
	vs, after, err := parseSeq(since)
	if err != nil {
		return nil, badRequest(fmt.Sprintf("Malformed since sequence %q", since))
	}
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) ([]kv.FutureNil, error) {
		if _, err := s.getMeta(tr, db); err != nil {
			return nil, err
		}
		sp := s.seqSpace(db)
		begin, end := sp.FDBRangeKeys()
		if after {
			begin = kv.KeyAfter(sp.Pack(tuple.Tuple{vs}))
		}
		rows, err := tr.GetRange(kv.KeyRange{Begin: begin, End: end}, kv.RangeOptions{Limit: 1}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		if len(rows) > 0 {
			return nil, nil
		}
		return []kv.FutureNil{tr.Watch(s.feedKey(db)), tr.Watch(s.dbKey(db))}, nil
	})
}
