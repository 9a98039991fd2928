package repdb

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// DBInfo is a database's metadata and counters (GET /{db}).
type DBInfo struct {
	UUID string
	// Created is the creation time in Unix seconds.
	Created   int64
	DocCount  int64
	DelCount  int64
	UpdateSeq string
}

// CreateDB creates db with uuid, calling hook (when not nil) in the same
// transaction. It is idempotent under commit_unknown_result: finding db
// with this very uuid means an earlier attempt committed, and the hooks
// that attempt's hook left run (kv.Locals.Adopt). ErrDBExists when db
// exists.
func (s *Store) CreateDB(ctx context.Context, db, uuid string, hook func(kv.Transaction) error) error {
	created := s.clock.Now().Unix()
	wrote := -1 // the last attempt that wrote db
	_, err := s.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		m, err := s.getMeta(tr, db)
		if err == nil {
			if m.UUID == uuid {
				tr.Locals().Adopt(wrote)
				return nil, nil
			}
			return nil, ErrDBExists
		}
		if !errors.Is(err, ErrDBNotFound) {
			return nil, err
		}
		v, _ := json.Marshal(dbMeta{UUID: uuid, Created: created})
		tr.Set(s.dbKey(db), v)
		wrote = tr.Locals().Attempt()
		if hook != nil {
			return nil, hook(tr)
		}
		return nil, nil
	})
	return err
}

// DeleteDB removes db and everything in it, calling hook (when not nil) in
// the same transaction. A retry that finds db gone after an earlier
// attempt saw it reports success (the earlier attempt, or a concurrent
// delete, removed it), and the hooks the earlier attempt's hook left run
// (kv.Locals.Adopt). ErrDBNotFound when db does not exist.
func (s *Store) DeleteDB(ctx context.Context, db string, hook func(kv.Transaction) error) error {
	seen := -1 // the last attempt that found db and removed it
	_, err := s.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		if _, err := s.getMeta(tr, db); err != nil {
			if errors.Is(err, ErrDBNotFound) && seen >= 0 {
				tr.Locals().Adopt(seen)
				return nil, nil
			}
			return nil, err
		}
		seen = tr.Locals().Attempt()
		tr.Clear(s.dbKey(db))
		tr.Clear(s.feedKey(db))
		tr.Clear(s.securityKey(db))
		tr.Clear(s.securityWriteKey(db))
		for _, kind := range []string{"doc", "tomb", "tree", "leaf", "local", "docseq", "seq", "count"} {
			tr.ClearRange(s.sub.Sub(kind, db))
		}
		if hook != nil {
			return nil, hook(tr)
		}
		return nil, nil
	})
	return err
}

// ListDBs returns the names of every database, in order.
func (s *Store) ListDBs(ctx context.Context) ([]string, error) {
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

// Info returns a database's metadata and counters; ErrDBNotFound when it
// does not exist.
func (s *Store) Info(ctx context.Context, db string) (DBInfo, error) {
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (DBInfo, error) {
		docs := tr.Get(s.countKey(db, "doc"))
		dels := tr.Get(s.countKey(db, "del"))
		last := tr.GetRange(s.seqSpace(db), kv.RangeOptions{Limit: 1, Reverse: true})
		m, err := s.getMeta(tr, db)
		if err != nil {
			return DBInfo{}, err
		}
		d, err := docs.Get()
		if err != nil {
			return DBInfo{}, err
		}
		x, err := dels.Get()
		if err != nil {
			return DBInfo{}, err
		}
		rows, err := last.GetSliceWithError()
		if err != nil {
			return DBInfo{}, err
		}
		info := DBInfo{UUID: m.UUID, Created: m.Created, DocCount: kv.DecodeInt64(d), DelCount: kv.DecodeInt64(x), UpdateSeq: "0"}
		if len(rows) == 1 {
			if seq, err := s.seqOf(db, rows[0].Key); err == nil {
				info.UpdateSeq = seq
			}
		}
		return info, nil
	})
}

// seqOf turns a ("seq", db, vs) key into the feed's sequence string: the
// 12-byte versionstamp in hex.
func (s *Store) seqOf(db string, key kv.Key) (string, error) {
	t, err := s.seqSpace(db).Unpack(key)
	if err != nil {
		return "", err
	}
	vs, ok := tuple.Versionstamp{}, len(t) == 1
	if ok {
		vs, ok = t[0].(tuple.Versionstamp)
	}
	if !ok {
		return "", fmt.Errorf("repdb: bad changes key %s", key)
	}
	return hex.EncodeToString(vs.Bytes()), nil
}
