package repdb

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// MaxSecurityBytes caps a security object's JSON: it is one stored value,
// read by every request of a user who is not a server admin.
const MaxSecurityBytes = 64 << 10

// ErrBadSecurity: a security object that is not one (CouchDB's rules:
// "admins" and "members" objects whose "names" and "roles" are lists of
// strings).
var ErrBadSecurity = errors.New("repdb: invalid security object")

// Access is a list of CouchDB's security object: user names and roles.
type Access struct {
	Names []string `json:"names"`
	Roles []string `json:"roles"`
}

// Security is a database's security object as CouchDB's: its admins and
// its members. Raw is the object as stored (other fields are kept and
// shown, as CouchDB does); the zero value is the empty object {}.
type Security struct {
	Admins  Access
	Members Access
	Raw     json.RawMessage
}

// allows is CouchDB's is_authorized: a role of the user among roles (the
// server admins' "_admin" always is), or the user's name among names.
func (a Access) allows(name string, roles []string) bool {
	for _, r := range roles {
		if r == "_admin" || slices.Contains(a.Roles, r) {
			return true
		}
	}
	return name != "" && slices.Contains(a.Names, name)
}

// IsAdmin reports a database admin: a server admin (the "_admin" role),
// or a name or role in "admins".
func (s Security) IsAdmin(name string, roles []string) bool {
	return s.Admins.allows(name, roles)
}

// Public reports a database every user may use: "members" names no one
// (CouchDB's is_public_db).
func (s Security) Public() bool { return len(s.Members.Names) == 0 && len(s.Members.Roles) == 0 }

// IsMember reports a member: an admin of the database, anyone when it is
// public, or a name or role in "members" (CouchDB's is_member).
func (s Security) IsMember(name string, roles []string) bool {
	return s.IsAdmin(name, roles) || s.Public() || s.Members.allows(name, roles)
}

// ParseSecurity checks a security object as CouchDB's
// validate_security_object does ("members" falls back to the old
// "readers") and returns it; ErrBadSecurity (with CouchDB's reason) when
// it is not one.
func ParseSecurity(raw []byte) (Security, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return Security{}, fmt.Errorf("%w: the security object must be a JSON object", ErrBadSecurity)
	}
	if len(raw) > MaxSecurityBytes {
		return Security{}, fmt.Errorf("%w: the security object is over %d bytes", ErrBadSecurity, MaxSecurityBytes)
	}
	sec := Security{Raw: bytes.Clone(raw)}
	members, ok := top["members"]
	if !ok {
		members = top["readers"]
	}
	for _, f := range []struct {
		raw json.RawMessage
		dst *Access
	}{{top["admins"], &sec.Admins}, {members, &sec.Members}} {
		a, err := parseAccess(f.raw)
		if err != nil {
			return Security{}, err
		}
		*f.dst = a
	}
	return sec, nil
}

func parseAccess(raw json.RawMessage) (Access, error) {
	if raw == nil {
		return Access{}, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return Access{}, fmt.Errorf("%w: admins or members must be a JSON list of strings", ErrBadSecurity)
	}
	var a Access
	for _, f := range []struct {
		name string
		dst  *[]string
	}{{"names", &a.Names}, {"roles", &a.Roles}} {
		v, ok := obj[f.name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return Access{}, fmt.Errorf("%w: %s must be a JSON list of strings", ErrBadSecurity, f.name)
		}
	}
	return a, nil
}

func (s *Store) securityKey(db string) kv.Key { return s.sub.Pack(tuple.Tuple{"sec", db}) }

// securityWriteKey holds the token of the last SetSecurity that wrote
// db's security object.
func (s *Store) securityWriteKey(db string) kv.Key { return s.sub.Pack(tuple.Tuple{"secw", db}) }

// ReadSecurity returns db's security object (the zero Security, {}, when
// none was set); ErrDBNotFound when db does not exist. It is one read
// transaction of two keys.
func (s *Store) ReadSecurity(ctx context.Context, db string) (Security, error) {
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (Security, error) {
		return s.Security(tr, db)
	})
}

// Security reads db's security object in tr (see ReadSecurity).
func (s *Store) Security(tr kv.ReadTransaction, db string) (Security, error) {
	sec := tr.Get(s.securityKey(db))
	if _, err := s.getMeta(tr, db); err != nil {
		return Security{}, err
	}
	v, err := sec.Get()
	if err != nil || v == nil {
		return Security{}, err
	}
	return ParseSecurity(v)
}

// SetSecurity replaces db's security object with sec (from ParseSecurity)
// if allowed, called in the transaction with the object it replaces,
// accepts it (the caller's check that the writer is an admin of the
// database). ErrDBNotFound when db does not exist. One transaction of
// three reads and two writes. Each call writes a token of its own beside
// the object: an attempt that finds its token knows that an earlier one
// committed (commit_unknown_result) and succeeds without asking allowed
// again, which would judge the writer by the object it just wrote (a
// database admin who removes their own admin role was refused after a
// write that took effect).
func (s *Store) SetSecurity(ctx context.Context, db string, sec Security, allowed func(old Security) error) error {
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	_, err := s.db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		last := tr.Get(s.securityWriteKey(db))
		old, err := s.Security(tr, db)
		if err != nil {
			return nil, err
		}
		if v, err := last.Get(); err != nil {
			return nil, err
		} else if bytes.Equal(v, token) {
			return nil, nil
		}
		if allowed != nil {
			if err := allowed(old); err != nil {
				return nil, err
			}
		}
		tr.Set(s.securityKey(db), sec.Raw)
		tr.Set(s.securityWriteKey(db), token)
		return nil, nil
	})
	return err
}
