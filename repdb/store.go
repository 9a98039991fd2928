package repdb

import (
	"encoding/json"
	"fmt"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// SubspaceDefault holds the store's keys when Options.Subspace is nil.
var SubspaceDefault = subspace.Sub("frontend")

// Options configure a Store. The zero value gives the defaults.
type Options struct {
	// Subspace holds the store's keys; every node of a cluster must use
	// the same one. Defaults to SubspaceDefault.
	Subspace subspace.Subspace
	// Clock stamps database creation and state changes; defaults to the
	// real clock.
	Clock clockwork.Clock
}

// Store keeps replicator databases and their documents. It is safe for
// concurrent use and holds no state of its own besides its options.
type Store struct {
	db    kv.Database
	sub   subspace.Subspace
	clock clockwork.Clock
}

// New returns the store of db.
func New(db kv.Database, opts Options) *Store {
	if opts.Subspace == nil {
		opts.Subspace = SubspaceDefault
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	return &Store{db: db, sub: opts.Subspace, clock: opts.Clock}
}

type dbMeta struct {
	UUID    string `json:"uuid"`
	Created int64  `json:"created"`
}

// record is a stored document revision: the winner in ("doc" or "tomb",
// db, id), any other leaf in ("leaf", db, id, rev).
type record struct {
	Rev string `json:"rev"`
	// Revs are the earlier revisions of the document's branch, newest
	// first, in records written before revision trees were stored (the
	// tree is then this one branch); never written now.
	Revs []string        `json:"revs,omitempty"`
	Body json.RawMessage `json:"body,omitempty"`
	// Deleted marks a deleted leaf in a ("leaf", …) record (the winner's
	// deletion is told by its key).
	Deleted bool `json:"deleted,omitempty"`
	// Leaves, in a winner's record, counts the document's leaves when
	// there is more than one (conflicts or deleted branches), so that
	// readers only read the tree when it has more to tell.
	Leaves int `json:"leaves,omitempty"`
	// Owner is the user who wrote a _local document ("" for admins).
	Owner string `json:"owner,omitempty"`
}

// changeRow is a row of the changes feed as stored: the document's
// winning revision after its last write.
type changeRow struct {
	ID      string `json:"id"`
	Rev     string `json:"rev"`
	Deleted bool   `json:"deleted,omitempty"`
	// Leaves counts the leaves when there is more than one (see record).
	Leaves int `json:"leaves,omitempty"`
}

func (s *Store) dbKey(db string) kv.Key         { return s.sub.Pack(tuple.Tuple{"db", db}) }
func (s *Store) docKey(db, id string) kv.Key    { return s.sub.Pack(tuple.Tuple{"doc", db, id}) }
func (s *Store) tombKey(db, id string) kv.Key   { return s.sub.Pack(tuple.Tuple{"tomb", db, id}) }
func (s *Store) localKey(db, id string) kv.Key  { return s.sub.Pack(tuple.Tuple{"local", db, id}) }
func (s *Store) docSeqKey(db, id string) kv.Key { return s.sub.Pack(tuple.Tuple{"docseq", db, id}) }
func (s *Store) treeKey(db, id string) kv.Key   { return s.sub.Pack(tuple.Tuple{"tree", db, id}) }
func (s *Store) leafKey(db, id, rev string) kv.Key {
	return s.sub.Pack(tuple.Tuple{"leaf", db, id, rev})
}
func (s *Store) countKey(db, which string) kv.Key { return s.sub.Pack(tuple.Tuple{"count", db, which}) }

// feedKey changes (a blind versionstamped write, no conflicts) with every
// document write of db; longpoll feeds watch it.
func (s *Store) feedKey(db string) kv.Key { return s.sub.Pack(tuple.Tuple{"feed", db}) }

func (s *Store) seqSpace(db string) subspace.Subspace { return s.sub.Sub("seq", db) }

var (
	one      = kv.Int64(1)
	minusOne = kv.Int64(-1)
)

// getMeta reads a database's metadata; ErrDBNotFound when absent.
func (s *Store) getMeta(tr kv.ReadTransaction, db string) (dbMeta, error) {
	v, err := tr.Get(s.dbKey(db)).Get()
	if err != nil {
		return dbMeta{}, err
	}
	if v == nil {
		return dbMeta{}, ErrDBNotFound
	}
	var m dbMeta
	if err := json.Unmarshal(v, &m); err != nil {
		return dbMeta{}, fmt.Errorf("repdb: corrupt metadata of %q: %v", db, err)
	}
	return m, nil
}
