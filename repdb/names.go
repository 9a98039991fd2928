package repdb

import (
	"regexp"
	"strings"
)

// ReplicatorDB is the default replicator database, which every
// api_frontend node creates at start-up.
const ReplicatorDB = "_replicator"

// Prefixes of the document ids that are not replication documents.
const (
	DesignPrefix = "_design/"
	LocalPrefix  = "_local/"
)

// MaxDBNameLength is CouchDB's limit on database names.
const MaxDBNameLength = 238

// MaxDocIDLength caps document ids (bytes). A replication document's job
// id is its database's 32-character identity, "|" and the document id, and
// job ids are at most 1000 bytes (fdbjobs.MaxNameSize), so longer ids are
// refused when written rather than failing inside the job layer.
const MaxDocIDLength = 960

var dbPrefixRe = regexp.MustCompile(`^[a-z][a-z0-9_$()+/-]*$`)

// IsReplicatorDB reports whether name is a replicator database fdbrep
// serves: "_replicator", or a valid CouchDB name (at most MaxDBNameLength
// bytes) ending in "/_replicator".
func IsReplicatorDB(name string) bool {
	if name == ReplicatorDB {
		return true
	}
	prefix, ok := strings.CutSuffix(name, "/"+ReplicatorDB)
	return ok && len(name) <= MaxDBNameLength && dbPrefixRe.MatchString(prefix)
}

// IsReplicationDoc reports whether a document id names a replication
// document: neither a design nor a _local document.
func IsReplicationDoc(id string) bool {
	return !strings.HasPrefix(id, DesignPrefix) && !strings.HasPrefix(id, LocalPrefix)
}
