package frontend

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/fdbrep/fdbrep/repdb"
)

// What fdbrep does not serve of a database's API answers as such, with
// what it has instead (docs/COMPAT.md), rather than as a document id that
// happens to start with an underscore.

// unsupportedDBEndpoints are CouchDB's database endpoints fdbrep does not
// serve, each with why (the rest of the reason).
var unsupportedDBEndpoints = map[string]string{
	"_find":               noQueries,
	"_index":              noQueries,
	"_explain":            noQueries,
	"_temp_view":          noQueries,
	"_view_cleanup":       noQueries,
	"_design_docs":        `listings of design documents are not served; _all_docs with startkey "_design/" and endkey "_design0" lists them`,
	"_local_docs":         "listings of _local documents are not served; read them by id",
	"_compact":            noStorage,
	"_purge":              noStorage,
	"_purged_infos_limit": noStorage,
	"_auto_purge":         noStorage,
	"_revs_limit":         "revision history is fixed at 1000 revisions per branch",
	"_missing_revs":       "use _revs_diff",
	"_shards":             "replicator databases have no shards",
	"_sync_shards":        "replicator databases have no shards",
	"_partition":          "replicator databases are not partitioned",
}

const (
	noQueries = "replicator databases have no views, Mango queries or indexes (fdbrep is a replicator, not a database)"
	noStorage = "replicator databases are stored in FoundationDB, with no files to compact or purge"
)

// unsupported is the answer to a CouchDB endpoint fdbrep does not serve:
// 400 bad_request, as for the server's (/_dbs_info), saying why.
func unsupported(path, why string) *httpError {
	return badRequest("Unsupported endpoint " + path + ": " + why)
}

// handleUnsupportedDBEndpoint answers, for any method, a database
// endpoint of unsupportedDBEndpoints.
func (s *Server) handleUnsupportedDBEndpoint(w http.ResponseWriter, r *http.Request) {
	db, ok := dbFromPath(w, r)
	if !ok {
		return
	}
	ep := mux.Vars(r)["endpoint"]
	writeError(w, unsupported("/"+db+"/"+ep, unsupportedDBEndpoints[ep]))
}

// handleDocSubpath serves what lies under a document,
// /{db}/{docid}/{rest} (prefix "") and /{db}/_design/{ddoc}/{rest} (prefix
// "_design/"): an attachment, which fdbrep never stores (a PUT is 415, as
// a document with attachments; reads and deletions find none), or a
// design document's views and functions, which it never runs.
func (s *Server) handleDocSubpath(prefix, name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		db, ok := dbFromPath(w, r)
		if !ok {
			return
		}
		id, he := pathVar(r, name)
		if he != nil {
			writeError(w, he)
			return
		}
		id = prefix + id
		rest, he := pathVar(r, "rest")
		if he != nil {
			writeError(w, he)
			return
		}
		switch {
		case strings.HasPrefix(id, repdb.DesignPrefix) && strings.HasPrefix(rest, "_"):
			writeError(w, unsupported("/"+db+"/"+id+"/"+rest,
				"design documents are stored, never run: replicator databases have no views, shows, lists, updates or rewrites"))
			return
		case unsupportedDBEndpoints[id] != "":
			writeError(w, unsupported("/"+db+"/"+id, unsupportedDBEndpoints[id]))
			return
		case id == "_local":
			writeError(w, badRequest("_local documents do not accept attachments."))
			return
		case strings.HasPrefix(id, "_") && !strings.HasPrefix(id, repdb.DesignPrefix):
			writeError(w, notFound("missing"))
			return
		}
		s.methods(func(w http.ResponseWriter, r *http.Request) {
			if !s.dbUser(w, r, db) {
				return
			}
			if r.Method == http.MethodPut {
				writeError(w, errAttachments)
				return
			}
			writeError(w, notFound("Document is missing attachment"))
		}, "DELETE", "GET", "HEAD", "PUT").ServeHTTP(w, r)
	}
}
