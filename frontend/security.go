package frontend

import (
	"encoding/json"
	"net/http"

	"github.com/fdbrep/fdbrep/repdb"
)

// errNotMember is CouchDB's check_is_member failure for a user who is
// logged in (anonymous users never reach a database: errAuthRequired).
var errNotMember = forbidden("You are not allowed to access this db.")

// dbUser lets the request's user use db as CouchDB's security object
// says, and answers the request when not: anonymous users get 401 (every
// replicator database needs a user), server admins pass without a read,
// and other users must be members of db (403 forbidden otherwise; 404
// when db does not exist). An admin of db (its security object's
// "admins") becomes the request's user with dbAdmin set, so the owner
// rules and credential rules treat them as CouchDB's check_is_admin does.
// The check is one read transaction before the request's own.
func (s *Server) dbUser(w http.ResponseWriter, r *http.Request, db string) bool {
	u := userFrom(r)
	if u.Anonymous() {
		writeError(w, errAuthRequired)
		return false
	}
	if u.IsAdmin() {
		return true
	}
	sec, err := s.store.ReadSecurity(r.Context(), db)
	if err != nil {
		s.fail(w, r, err)
		return false
	}
	if !sec.IsMember(u.Name, u.Roles) {
		writeError(w, errNotMember)
		return false
	}
	if sec.IsAdmin(u.Name, u.Roles) {
		x := *u
		x.dbAdmin = true
		if st, ok := r.Context().Value(ctxKey{}).(*reqState); ok {
			st.user = &x
		}
	}
	return true
}

// handleSecurity serves GET and PUT /{db}/_security as CouchDB: members
// read the security object ({} when none was set), admins of the
// database (and server admins) replace it, in one transaction that checks
// the object it replaces.
func (s *Server) handleSecurity(w http.ResponseWriter, r *http.Request) {
	db, ok := dbFromPath(w, r)
	if !ok || !s.dbUser(w, r, db) {
		return
	}
	if r.Method == http.MethodGet {
		sec, err := s.store.ReadSecurity(r.Context(), db)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, securityJSON(sec))
		return
	}
	b, he := readBody(w, r, s.opts.MaxRequestSize)
	if he == nil {
		he = checkObject(b, s.opts.MaxJSONDepth)
	}
	if he != nil {
		writeError(w, he)
		return
	}
	sec, err := repdb.ParseSecurity(b)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	u := userFrom(r)
	err = s.store.SetSecurity(r.Context(), db, sec, func(old repdb.Security) error {
		if !old.IsAdmin(u.Name, u.Roles) {
			return notDBAdmin(u)
		}
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// securityJSON is a security object as GET /{db}/_security shows it: as
// it was set, {} when it never was.
func securityJSON(sec repdb.Security) json.RawMessage {
	if len(sec.Raw) == 0 {
		return json.RawMessage("{}")
	}
	return sec.Raw
}
