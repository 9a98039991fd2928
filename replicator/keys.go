package replicator

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Key layout under Config.Subspace (see doc.go).
const (
	keyRepIDs      = 1 // (1, RepID) -> JobID
	keyServerUUID  = 2 // (2) -> UUID text
	keyDBs         = 3 // (3, DBName) -> DB instance UUID text
	keyDBJobs      = 4 // (4, DBUUID, DocID) -> ""
	keyUsage       = 5 // (5, ShareKey) -> (float64 usage in ms)
	keyCharges     = 6 // (6, ShareKey) -> int64 LE ms, atomic add
	keyUsagePeriod = 7 // (7) -> (int64 period number)
	keyChargeToken = 8 // (8, Token) -> "": a charge transaction that committed
)

type keys struct {
	root, repIDs, dbs, dbJobs, usage, charges subspace.Subspace
}

func newKeys(root subspace.Subspace) keys {
	return keys{
		root:    root,
		repIDs:  root.Sub(keyRepIDs),
		dbs:     root.Sub(keyDBs),
		dbJobs:  root.Sub(keyDBJobs),
		usage:   root.Sub(keyUsage),
		charges: root.Sub(keyCharges),
	}
}

func (k keys) repIDKey(repID string) kv.Key { return k.repIDs.Pack(tuple.Tuple{repID}) }
func (k keys) serverUUIDKey() kv.Key        { return k.root.Pack(tuple.Tuple{keyServerUUID}) }
func (k keys) dbKey(name string) kv.Key     { return k.dbs.Pack(tuple.Tuple{name}) }
func (k keys) dbJobKey(dbUUID, docID string) kv.Key {
	return k.dbJobs.Pack(tuple.Tuple{dbUUID, docID})
}
func (k keys) usageKey(key string) kv.Key   { return k.usage.Pack(tuple.Tuple{key}) }
func (k keys) chargesKey(key string) kv.Key { return k.charges.Pack(tuple.Tuple{key}) }
func (k keys) periodKey() kv.Key            { return k.root.Pack(tuple.Tuple{keyUsagePeriod}) }
func (k keys) chargeTokenKey(token string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyChargeToken, token})
}

func prefixRange(ss subspace.Subspace, t tuple.Tuple) kv.KeyRange {
	p := ss.Pack(t)
	return kv.KeyRange{Begin: kv.Key(append(append([]byte{}, p...), 0x00)), End: kv.Key(append(append([]byte{}, p...), 0xff))}
}

func subspaceRange(ss subspace.Subspace) kv.KeyRange {
	b, e := ss.FDBRangeKeys()
	return kv.KeyRange{Begin: b, End: e}
}

// getServerUUID returns the installation's UUID, creating it on first use.
// It is an input of replication ids and transient job ids.
func getServerUUID(ctx context.Context, db kv.Database, k keys) (string, error) {
	fresh := uuid.NewString()
	fresh = fresh[:8] + fresh[9:13] + fresh[14:18] + fresh[19:23] + fresh[24:]
	return kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) {
		v, err := tr.Get(k.serverUUIDKey()).Get()
		if err != nil {
			return "", err
		}
		if v != nil {
			return string(v), nil
		}
		tr.Set(k.serverUUIDKey(), []byte(fresh))
		return fresh, nil
	})
}

// dbUUID returns the instance UUID of a _replicator database, registering
// one if the database has none yet (a database the frontend never reported
// through DBCreated).
func (k keys) dbUUID(tr kv.Transaction, dbName string) (string, error) {
	v, err := tr.Get(k.dbKey(dbName)).Get()
	if err != nil {
		return "", err
	}
	if v != nil {
		return string(v), nil
	}
	id := newDBUUID(dbName)
	tr.Set(k.dbKey(dbName), []byte(id))
	return id, nil
}

// newDBUUID is random; the name is not part of it (a recreated database
// gets a new identity).
func newDBUUID(string) string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:])
}
