package repdb

import (
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

// recordOverhead is room for a record's fields besides the body: a body
// that leaves less is refused before anything else is done.
const recordOverhead = 200

// WriteEvent is what a write does to a document, as its hook sees it.
// Docs carry their bodies.
type WriteEvent struct {
	// Replaced is the live revision the write builds on: the leaf a new
	// edit replaces, or the winner a replicated revision joins; nil for a
	// new document, a deleted one, or an edit of a deleted branch.
	Replaced *Doc
	// Old is the winning revision before the write, New the one after;
	// each is nil when there was none or it is a deletion. The job of the
	// document follows New: when New is nil and Old is not, the document
	// was deleted; when both are the same revision (an edit of a losing
	// branch, an old conflict replicated in), the winner did not change.
	Old, New *Doc
	// Written reports that New is the revision this write stores (so the
	// caller's checks of the written body apply to it).
	Written bool
}

// WinnerChanged reports whether the write changed the winning revision.
func (e WriteEvent) WinnerChanged() bool {
	if e.Old == nil || e.New == nil {
		return e.Old != e.New
	}
	return e.Old.Rev != e.New.Rev
}

// Hook runs in a write's transaction once its revisions are decided and
// before anything is stored; its error aborts the write. It returns true
// when the replicator's stale "_replication_*" fields must be removed
// from the new winner (its job runs again): a new edit then stores its
// body without them (and so gets another revision id); otherwise, and for
// replicated revisions, whose ids are fixed, the write adds a child
// revision without them, as CouchDB's replicator does when it restarts a
// document's job. A hook may run more than once (retries), so it must
// follow the kv rules.
type Hook func(tr kv.Transaction, ev WriteEvent) (clearState bool, err error)

// Write is one document write.
type Write struct {
	DB, ID string
	// BaseRev is the revision the client edited: a leaf of the document
	// (the winner or a conflict); "" for a new document, or one whose
	// every leaf is deleted (the write then extends the winning deletion).
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
	// Hook, when not nil, runs in the write's transaction (see Hook).
	Hook Hook
}

// encodeBody returns body's JSON, raw when given.
func encodeBody(body map[string]any, raw []byte) ([]byte, error) {
	if raw != nil {
		return raw, nil
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: the body cannot be encoded", ErrBadDoc)
	}
	return b, nil
}

// Write writes a new edit of a document in one transaction: it checks the
// base revision, adds the new revision under it, stores it (as the winner
// or, when a conflict still wins, as a leaf), moves the changes-feed row,
// adjusts the counters and runs the hook, and returns the new revision. A
// retry after commit_unknown_result that finds in the tree the revision
// its earlier attempt would have written reports that revision as
// success. Errors: ErrConflict (the base is not a leaf), ErrDocNotFound
// (deleting a document that never existed), ErrDocDeleted (deleting a
// deletion), ErrTooLarge, ErrDBNotFound, ErrBadDoc, the hook's.
func (s *Store) Write(ctx context.Context, w Write) (string, error) {
	canonical, err := encodeBody(w.Body, w.JSON)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(w.ID, LocalPrefix) {
		return s.writeLocal(ctx, w, canonical)
	}
	var produced attempts // revs earlier attempts would have committed
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (string, error) {
		return s.writeTx(tr, w, canonical, &produced)
	})
}

// attempts are the revisions the attempts of one write's retry loop would
// have committed, each with its attempt's number (kv.Locals.Attempt).
type attempts []attempt

type attempt struct {
	rev string
	n   int
}

// note records that the current attempt of tr writes rev.
func (a *attempts) note(tr kv.Transaction, rev string) {
	*a = append(*a, attempt{rev: rev, n: tr.Locals().Attempt()})
}

// editBase checks a new edit against the document and returns the
// revision it extends ("" for a new document).
func (st *docState) editBase(w Write) (string, error) {
	switch {
	case st.winner == nil && w.BaseRev != "":
		return "", ErrConflict
	case st.winner == nil && w.Deleted:
		return "", ErrDocNotFound
	case st.winner == nil:
		return "", nil
	case w.BaseRev == "" && !st.winner.Deleted:
		return "", ErrConflict
	case w.BaseRev == "" && w.Deleted:
		return "", ErrDocDeleted
	case w.BaseRev == "":
		// CouchDB lets a deleted document be recreated without a rev,
		// extending the winning deletion's branch.
		return st.winner.Rev, nil
	case !st.tree.IsLeaf(w.BaseRev):
		return "", ErrConflict
	case w.Deleted && st.tree.node(w.BaseRev).deleted:
		return "", ErrDocDeleted
	}
	return w.BaseRev, nil
}

// writeTx is Write's transaction body; produced collects the revs of
// earlier attempts, to recognise one that committed.
func (s *Store) writeTx(tr kv.Transaction, w Write, canonical []byte, produced *attempts) (string, error) {
	st, err := s.load(tr, w.DB, w.ID)
	if err != nil {
		return "", err
	}
	// A retry after commit_unknown_result finds the revision its earlier
	// attempt committed, a leaf or (if the replicator or a user wrote
	// since) an ancestor: the write happened, report it, with the logs and
	// counters the hook's run in that attempt left (kv.Locals.Adopt): the
	// last attempt that would have written it (revisions are a function of
	// the edit, so an attempt that failed may have drawn the same one).
	for _, a := range slices.Backward(*produced) {
		if st.tree.Has(a.rev) {
			tr.Locals().Adopt(a.n)
			return a.rev, nil
		}
	}
	base, err := st.editBase(w)
	if err != nil {
		return "", err
	}
	if !w.Deleted && len(canonical)+recordOverhead > kv.MaxValueSize {
		return "", fmt.Errorf("%w: %s", ErrTooLarge, w.ID)
	}
	written := &Doc{ID: w.ID, Rev: newRev(base, w.Deleted, canonical), Deleted: w.Deleted, Body: w.Body, raw: canonical}
	produced.note(tr, written.Rev)
	dw := s.newDocWrite(w.DB, w.ID, st)
	dw.add(base, written)
	var replaced *Doc
	if base != "" && !st.tree.node(base).deleted {
		if replaced, err = dw.doc(tr, base); err != nil {
			return "", err
		}
	}
	ev, err := dw.event(tr, replaced, written)
	if err != nil {
		return "", err
	}
	if w.Hook != nil {
		clear, err := w.Hook(tr, ev)
		if err != nil {
			return "", err
		}
		if clear && ev.New != nil && HasStateFields(ev.New.Body) {
			if ev.Written {
				// Store the edit without the stale fields, when it still
				// wins so.
				body := StripStateFields(written.Body)
				raw, err := json.Marshal(body)
				if err != nil {
					return "", fmt.Errorf("%w: the body cannot be encoded", ErrBadDoc)
				}
				stripped := &Doc{ID: w.ID, Rev: newRev(base, false, raw), Body: body, raw: raw}
				alt := s.newDocWrite(w.DB, w.ID, st)
				alt.add(base, stripped)
				if alt.tree.Winner().Rev == stripped.Rev {
					dw, written = alt, stripped
					produced.note(tr, written.Rev)
				}
			} else if err := dw.clearState(ev.New); err != nil {
				return "", err
			}
		}
	}
	return written.Rev, dw.apply(tr)
}

// ReplicatedWrite is one replicated revision (new_edits=false): stored as
// given, merged into the document's revision tree.
type ReplicatedWrite struct {
	DB, ID string
	// Revisions is the revision and its history, newest first (what
	// _revisions lists); at least the revision itself.
	Revisions []string
	Deleted   bool
	// Body and JSON: see Write.
	Body map[string]any
	JSON []byte
	// Hook, when not nil, runs in the write's transaction (see Hook).
	Hook Hook
}

// WriteReplicated stores a replicated revision in one transaction, as
// CouchDB's new_edits=false does: the revision and its history are merged
// into the tree (stemmed to RevsLimit), the winner is chosen again
// (live before deleted, then the longest branch, then the highest
// revision id), and the changes row, counters and hook follow as for
// Write. It reports whether the revision was new: one the tree already has
// changes nothing, which also makes a retry after commit_unknown_result
// succeed (and report the revision new, as its earlier attempt found it).
// _local documents are refused (ErrBadDoc): they are not replicated.
// Errors: ErrBadDoc (an invalid revision path), ErrTooLarge,
// ErrDBNotFound, the hook's.
func (s *Store) WriteReplicated(ctx context.Context, w ReplicatedWrite) (bool, error) {
	if strings.HasPrefix(w.ID, LocalPrefix) {
		return false, fmt.Errorf("%w: _local documents are not replicated", ErrBadDoc)
	}
	if err := checkPath(w.Revisions); err != nil {
		return false, err
	}
	canonical, err := encodeBody(w.Body, w.JSON)
	if err != nil {
		return false, err
	}
	if len(canonical)+recordOverhead > kv.MaxValueSize {
		return false, fmt.Errorf("%w: %s", ErrTooLarge, w.ID)
	}
	tried := -1 // the last attempt that would have added the revision
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (bool, error) {
		st, err := s.load(tr, w.DB, w.ID)
		if err != nil {
			return false, err
		}
		dw := s.newDocWrite(w.DB, w.ID, st)
		added, changed, err := dw.tree.Merge(w.Revisions, w.Deleted)
		if err != nil || !changed {
			// After commit_unknown_result, the revision found is the
			// earlier attempt's, and so are the hook's logs and counters.
			found := tried >= 0 && err == nil && !added
			if found {
				tr.Locals().Adopt(tried)
			}
			return found, err
		}
		if added {
			tried = tr.Locals().Attempt()
		}
		var written *Doc // nil when only history the tree had lost came back
		if added {
			written = &Doc{ID: w.ID, Rev: w.Revisions[0], Deleted: w.Deleted, Body: w.Body, raw: canonical}
			dw.bodies[written.Rev] = written
		}
		var replaced *Doc
		if st.winner != nil && !st.winner.Deleted {
			replaced = st.winner
		}
		ev, err := dw.event(tr, replaced, written)
		if err != nil {
			return false, err
		}
		if w.Hook != nil {
			clear, err := w.Hook(tr, ev)
			if err != nil {
				return false, err
			}
			if clear && ev.New != nil && HasStateFields(ev.New.Body) {
				if err := dw.clearState(ev.New); err != nil {
					return false, err
				}
			}
		}
		return added, dw.apply(tr)
	})
}

// HasStateFields reports whether a body holds any of the replicator's
// "_replication_*" fields.
func HasStateFields(body map[string]any) bool {
	for k := range body {
		if strings.HasPrefix(k, "_replication_") {
			return true
		}
	}
	return false
}

// StripStateFields returns a copy of body without the replicator's
// "_replication_*" fields.
func StripStateFields(body map[string]any) map[string]any {
	out := make(map[string]any, len(body))
	for k, v := range body {
		if !strings.HasPrefix(k, "_replication_") {
			out[k] = v
		}
	}
	return out
}

// docWrite is a write of one document in progress: its state before, its
// tree after, and the records of the revisions the write added or read.
type docWrite struct {
	s      *Store
	db, id string
	st     *docState
	tree   *RevTree
	bodies map[string]*Doc
}

func (s *Store) newDocWrite(db, id string, st *docState) *docWrite {
	t := &RevTree{}
	if st.tree != nil {
		t = st.tree.clone()
	}
	return &docWrite{s: s, db: db, id: id, st: st, tree: t, bodies: map[string]*Doc{}}
}

// add adds a new edit under parent ("" for a root).
func (w *docWrite) add(parent string, d *Doc) {
	w.tree.add(d.Rev, parent, d.Deleted)
	w.bodies[d.Rev] = d
}

// clearState adds a child of d without the "_replication_*" fields.
func (w *docWrite) clearState(d *Doc) error {
	body := StripStateFields(d.Body)
	raw, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%w: the body cannot be encoded", ErrBadDoc)
	}
	w.add(d.Rev, &Doc{ID: w.id, Rev: newRev(d.Rev, false, raw), Body: body, raw: raw})
	return nil
}

// doc returns the record of rev: one this write added, the winner, or a
// leaf read from the store.
func (w *docWrite) doc(tr kv.ReadTransaction, rev string) (*Doc, error) {
	if d, ok := w.bodies[rev]; ok {
		return d, nil
	}
	if w.st.winner != nil && w.st.winner.Rev == rev {
		return w.st.winner, nil
	}
	d, err := w.s.readLeaf(tr, w.db, w.id, rev)
	if err != nil {
		return nil, err
	}
	w.bodies[rev] = d
	return d, nil
}

// event describes the write for its hook.
func (w *docWrite) event(tr kv.ReadTransaction, replaced, written *Doc) (WriteEvent, error) {
	ev := WriteEvent{Replaced: replaced}
	if w.st.winner != nil && !w.st.winner.Deleted {
		ev.Old = w.st.winner
	}
	if win := w.tree.Winner(); !win.Deleted {
		d, err := w.doc(tr, win.Rev)
		if err != nil {
			return ev, err
		}
		ev.New, ev.Written = d, written != nil && d.Rev == written.Rev
	}
	return ev, nil
}

// recordOf encodes a revision's record.
func recordOf(d *Doc, deleted bool, leaves int) ([]byte, error) {
	r := record{Rev: d.Rev, Deleted: deleted}
	if leaves > 1 {
		r.Leaves = leaves
	}
	if len(d.raw) > 0 && string(d.raw) != "{}" {
		r.Body = d.raw
	}
	v, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(v) > kv.MaxValueSize {
		return nil, fmt.Errorf("%w: %s", ErrTooLarge, d.ID)
	}
	return v, nil
}

// apply stores the write: the tree (bounded), the winner's record under
// "doc" or "tomb", the other leaves' records, the counters and the
// changes row.
func (w *docWrite) apply(tr kv.Transaction) error {
	treeBytes, err := w.tree.bound()
	if err != nil {
		return fmt.Errorf("%w: %s", err, w.id)
	}
	leaves := w.tree.Leaves()
	win, err := w.doc(tr, leaves[0].Rev)
	if err != nil {
		return err
	}
	oldWinner := ""
	oldLeaves := map[string]bool{}
	if w.st.winner != nil {
		oldWinner = w.st.winner.Rev
		for _, l := range w.st.tree.Leaves() {
			oldLeaves[l.Rev] = true
		}
	}
	// Leaves other than the winner keep (or get) a record of their own.
	isLeaf := map[string]bool{}
	for _, l := range leaves[1:] {
		isLeaf[l.Rev] = true
		if oldLeaves[l.Rev] && l.Rev != oldWinner {
			continue // its record is in place
		}
		d, err := w.doc(tr, l.Rev)
		if err != nil {
			return err
		}
		v, err := recordOf(d, l.Deleted, 0)
		if err != nil {
			return err
		}
		tr.Set(w.s.leafKey(w.db, w.id, l.Rev), v)
	}
	for rev := range oldLeaves {
		if rev != oldWinner && !isLeaf[rev] {
			tr.Clear(w.s.leafKey(w.db, w.id, rev)) // no longer a leaf, or now the winner
		}
	}
	v, err := recordOf(win, false, len(leaves))
	if err != nil {
		return err
	}
	if leaves[0].Deleted {
		tr.Clear(w.s.docKey(w.db, w.id))
		tr.Set(w.s.tombKey(w.db, w.id), v)
	} else {
		tr.Clear(w.s.tombKey(w.db, w.id))
		tr.Set(w.s.docKey(w.db, w.id), v)
	}
	tr.Set(w.s.treeKey(w.db, w.id), treeBytes)
	w.count(tr, leaves[0].Deleted)
	return w.moveRow(tr, leaves)
}

// count adjusts the live and deleted counters.
func (w *docWrite) count(tr kv.Transaction, deleted bool) {
	was := "" // "", "doc" or "del"
	if w.st.winner != nil {
		was = "doc"
		if w.st.winner.Deleted {
			was = "del"
		}
	}
	is := "doc"
	if deleted {
		is = "del"
	}
	if was != is {
		if was != "" {
			tr.Add(w.s.countKey(w.db, was), minusOne)
		}
		tr.Add(w.s.countKey(w.db, is), one)
	}
}

// moveRow moves the document's changes row to the write's versionstamp.
func (w *docWrite) moveRow(tr kv.Transaction, leaves []Leaf) error {
	if w.st.winner != nil {
		old, err := tr.Get(w.s.docSeqKey(w.db, w.id)).Get()
		if err != nil {
			return err
		}
		if len(old) == 10 {
			var vs tuple.Versionstamp
			copy(vs.TransactionVersion[:], old)
			tr.Clear(w.s.seqSpace(w.db).Pack(tuple.Tuple{vs}))
		}
	}
	row := changeRow{ID: w.id, Rev: leaves[0].Rev, Deleted: leaves[0].Deleted}
	if len(leaves) > 1 {
		row.Leaves = len(leaves)
	}
	v, _ := json.Marshal(row)
	key, err := w.s.seqSpace(w.db).PackWithVersionstamp(tuple.Tuple{tuple.IncompleteVersionstamp(0)})
	if err != nil {
		return err
	}
	tr.SetVersionstampedKey(key, v)
	tr.SetVersionstampedValue(w.s.docSeqKey(w.db, w.id), make([]byte, 14)) // 10 bytes + offset 0
	tr.SetVersionstampedValue(w.s.feedKey(w.db), make([]byte, 14))         // wakes feeds
	return nil
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
