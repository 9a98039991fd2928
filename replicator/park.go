package replicator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// WatchGroupOf returns the watch group of a replication's source, and its
// database's name: the parked jobs whose sources change together, one
// watch following them (see doc.go, "Parking"). The group is the source
// server's URL without its database, with the user name and proxy a
// request to it uses, never a password or a header's value: the server and
// the identity that asks it. ok is false for a source URL that names no
// database.
func WatchGroupOf(src EndpointSpec) (group, db string, ok bool) {
	u, err := url.Parse(src.URL)
	if err != nil || u.Host == "" {
		return "", "", false
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	i := strings.LastIndexByte(path, '/')
	if i < 0 || i == len(path)-1 {
		return "", "", false
	}
	if db, err = url.PathUnescape(path[i+1:]); err != nil || db == "" {
		return "", "", false
	}
	base := url.URL{Scheme: u.Scheme, Host: u.Host}
	group = base.String() + path[:i+1]
	if src.Username != "" {
		group += " user=" + url.QueryEscape(src.Username)
	}
	if src.Proxy != "" {
		if p, err := url.Parse(src.Proxy); err == nil {
			p.User = nil
			group += " proxy=" + p.String()
		}
	}
	return group, db, true
}

// WatchJobID is the id of the job that watches the parked jobs of group.
func WatchJobID(group string) string {
	sum := sha256.Sum256([]byte(group))
	return "watch-" + hex.EncodeToString(sum[:16])
}

// WakeJob wakes the parked job jobID for cause: it is pending at the time
// stime gives for its data (its fair-share place: Config.EnqueueTime of
// its priority), Change Woken. It reports false, and writes nothing, for
// a job that is not parked (it runs, was woken already, or is gone): a
// wake never touches a job that is not parked. Run again after
// commit_unknown_result, it finds the job woken at now for cause (its own
// commit) and reports true, writing nothing. tr is the caller's
// transaction, or a Transactor to run one.
func (s *Store) WakeJob(ctx context.Context, tr kv.Transactor, jobID, cause string, now time.Time, stime func(*JobData) int64) (bool, error) {
	return kv.Transact(ctx, tr, func(tr kv.Transaction) (bool, error) {
		d, st, err := s.Job(ctx, tr, jobID)
		if err != nil || d == nil {
			return false, err
		}
		if d.State != StateParked || st != fdbjobs.Pending {
			own := d.State == StatePending && d.LastWoken == Millis(now) && d.WakeCause == cause
			return own, nil
		}
		x := d.Clone()
		stime := stime(d)
		Lifecycle{}.Transform(x, Change{Kind: Woken, At: now, STime: stime, Reason: cause})
		// Adding a pending job moves it to the new time with the new data.
		if err := s.jobs.Add(ctx, tr, JobType, jobID, x.Encode(), stime); err != nil {
			return false, err
		}
		return true, s.index(tr, []indexedJob{{id: jobID, st: fdbjobs.Pending, d: x}})
	})
}

// ParkedCount returns how many jobs are parked, cluster-wide (a counter
// of the view index), in a snapshot read of tr (nil: a transaction of its
// own).
func (s *Store) ParkedCount(ctx context.Context, tr kv.ReadTransactor) (int64, error) {
	if tr == nil {
		tr = s.db
	}
	return kv.ReadTransact(ctx, tr, func(tr kv.ReadTransaction) (int64, error) {
		v, err := tr.Snapshot().Get(s.k.parkedCountKey()).Get()
		return kv.DecodeInt64(v), err
	})
}

// ParkedRef is a parked job as the watch index lists it.
type ParkedRef struct {
	SourceDB, JobID string
}

// ParkedPage returns up to limit parked jobs of group in source database
// order, after the job after (the zero ParkedRef: from the first), in
// one snapshot read of tr: a watch's page. db, when not "", keeps those
// of that source database only.
func (s *Store) ParkedPage(ctx context.Context, tr kv.ReadTransactor, group, db string, after ParkedRef, limit int) ([]ParkedRef, error) {
	return kv.ReadTransact(ctx, tr, func(tr kv.ReadTransaction) ([]ParkedRef, error) {
		prefix := tuple.Tuple{group}
		if db != "" {
			prefix = append(prefix, db)
		}
		rng, err := kv.PrefixRange(s.k.parked.Pack(prefix))
		if err != nil {
			return nil, err
		}
		if after.JobID != "" {
			rng.Begin = kv.KeyAfter(s.k.parkedKey(group, after.SourceDB, after.JobID))
		}
		kvs, err := tr.Snapshot().GetRange(rng, kv.RangeOptions{Limit: limit}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		out := make([]ParkedRef, 0, len(kvs))
		for _, e := range kvs {
			t, err := s.k.parked.Unpack(e.Key)
			if err != nil || len(t) != 3 {
				continue
			}
			db, _ := t[1].(string)
			id, _ := t[2].(string)
			out = append(out, ParkedRef{SourceDB: db, JobID: id})
		}
		return out, nil
	})
}

// AnyParked reports whether group has a parked job, in tr, with a conflict
// on the group's range: a watch that ends because its group is empty
// conflicts with a job parking into it meanwhile.
func (s *Store) AnyParked(tr kv.ReadTransaction, group string) (bool, error) {
	rng, err := kv.PrefixRange(s.k.parked.Pack(tuple.Tuple{group}))
	if err != nil {
		return false, err
	}
	kvs, err := tr.GetRange(rng, kv.RangeOptions{Limit: 1}).GetSliceWithError()
	return len(kvs) > 0, err
}
