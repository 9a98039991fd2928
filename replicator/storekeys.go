package replicator

import (
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// storeKeys is the Store's own key layout (keys under its subspace, see
// the key constants): the replication ids and databases of the jobs, and
// the view index. The concepts beside the Store (Views, Shares, Reseal,
// ...) keep their own keys.
type storeKeys struct {
	root, repIDs, dbs, dbJobs subspace.Subspace
	// The view index.
	entries, docStates, unfinished, running, expiry, dbCounts subspace.Subspace
	ownerJobs, ownerRunning, parked                           subspace.Subspace
}

func (k storeKeys) repIDKey(repID string) kv.Key { return k.repIDs.Pack(tuple.Tuple{repID}) }
func (k storeKeys) serverUUIDKey() kv.Key        { return k.root.Pack(tuple.Tuple{keyServerUUID}) }
func (k storeKeys) dbKey(name string) kv.Key     { return k.dbs.Pack(tuple.Tuple{name}) }
func (k storeKeys) dbJobKey(dbUUID, docID string) kv.Key {
	return k.dbJobs.Pack(tuple.Tuple{dbUUID, docID})
}
func (k storeKeys) entryKey(jobID string) kv.Key { return k.entries.Pack(tuple.Tuple{jobID}) }
func (k storeKeys) docStateKey(dbUUID, state, docID string) kv.Key {
	return k.docStates.Pack(tuple.Tuple{dbUUID, state, docID})
}
func (k storeKeys) unfinishedKey(sortID, jobID string) kv.Key {
	return k.unfinished.Pack(tuple.Tuple{sortID, jobID})
}
func (k storeKeys) runningKey(node, jobID string) kv.Key {
	return k.running.Pack(tuple.Tuple{node, jobID})
}
func (k storeKeys) expiryKey(t int64, jobID string) kv.Key {
	return k.expiry.Pack(tuple.Tuple{t, jobID})
}
func (k storeKeys) dbCountKey(dbUUID, state string) kv.Key {
	return k.dbCounts.Pack(tuple.Tuple{dbUUID, state})
}
func (k storeKeys) docCountKey(state string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyDocCounts, state})
}
func (k storeKeys) jobCountKey() kv.Key { return k.root.Pack(tuple.Tuple{keyJobCount}) }
func (k storeKeys) nodeCountKey(node string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyNodeCounts, node})
}
func (k storeKeys) ownerJobKey(owner, sortID, jobID string) kv.Key {
	return k.ownerJobs.Pack(tuple.Tuple{owner, sortID, jobID})
}
func (k storeKeys) ownerCountKey(owner string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyOwnerCounts, owner})
}
func (k storeKeys) ownerRunningKey(owner, node, jobID string) kv.Key {
	return k.ownerRunning.Pack(tuple.Tuple{owner, node, jobID})
}
func (k storeKeys) parkedCountKey() kv.Key { return k.root.Pack(tuple.Tuple{keyParkedCount}) }
func (k storeKeys) parkedKey(group, db, jobID string) kv.Key {
	return k.parked.Pack(tuple.Tuple{group, db, jobID})
}
func (k storeKeys) indexVersionKey() kv.Key { return k.root.Pack(tuple.Tuple{keyIndexVersion}) }
