package replicator

import (
	"context"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// The per-user limits (see doc.go, "Per-user limits"): what the control
// plane checks as a replication is written, and what the nodes read of an
// owner's jobs through the view index as they start one.

// StallUserLimit is the stall the views show of a job held back at the
// per-user limit (JobData.HeldSince, HeldUntil): set from its data, never
// by a run, beside the engine's reasons (engine.StallBackingOff and the
// others; docs/COMPAT.md lists them all).
const StallUserLimit = "user_limit"

// CheckUserSpec refuses a replication that a user who is not a server
// admin may not write: a connection_timeout over
// MaxUserConnectionTimeout. The error wraps ErrBadRequest and names the
// field, the limit and its key (the frontend answers a document's with
// 403 forbidden, as any document the parser refuses).
func (c Config) CheckUserSpec(s *Spec) error {
	if max := c.MaxUserConnectionTimeout.Milliseconds(); s != nil && s.ConnectionTimeout > max {
		return newReason(ErrBadRequest, "`connection_timeout` must be at most %d for a user who is not a server admin "+
			"([replicator] max_user_connection_timeout)", max)
	}
	return nil
}

// CheckUserCount refuses a replication that would give owner, a user who
// is not a server admin, more unfinished replications than
// MaxReplicationsPerUser, in tr (a document's write, or a POST
// /_replicate's): replaces says whether it takes the place of one of
// owner's unfinished jobs (the same document's, or the same replication
// posted again), which leaves the count as it is. It reads owner's
// counter of the view index (21) as a snapshot: writes of the same user
// racing each other may go a few over, and no write conflicts with the
// nodes' changes to the user's jobs. The error wraps ErrForbidden and
// names the limit and its key.
func (s *Store) CheckUserCount(tr kv.ReadTransaction, c *Config, owner string, replaces bool) error {
	if owner == "" || replaces {
		return nil
	}
	n, err := s.OwnerUnfinished(tr.Snapshot(), owner)
	if err != nil || n < int64(c.MaxReplicationsPerUser) {
		return err
	}
	return newReason(ErrForbidden, "you have %d replications that are not finished (documents in every _replicator "+
		"database and POST /_replicate), the most a user who is not a server admin may have "+
		"([replicator] max_replications_per_user): delete some first", n)
}

// Counted reports whether a job whose data is old (nil: none) and whose
// fdbjobs state is st counts among owner's unfinished replications: a job
// that replaces it leaves owner's count as it is.
func Counted(old *JobData, st fdbjobs.State, owner string) bool {
	return old != nil && Unfinished(st, old) && old.Owner() == owner
}

// OwnerUnfinished returns owner's unfinished jobs (pending, running,
// crashing or parked: documents' and POST /_replicate's), the view
// index's counter (21); 0 for owner "".
func (s *Store) OwnerUnfinished(tr kv.ReadTransaction, owner string) (int64, error) {
	if owner == "" {
		return 0, nil
	}
	return sumCounters(tr, []kv.Key{s.k.ownerCountKey(owner)})
}

// OwnerRunning returns how many of owner's jobs other than except run,
// counting up to limit: one range read of owner's running keys (22), at
// most limit+1 keys. Read in a job's start transaction, it conflicts with
// the starts and ends of owner's other jobs only, so that two nodes
// starting owner's jobs at once do not both pass a limit. The starting
// job is except: a start that runs again after commit_unknown_result
// finds the key its earlier attempt wrote, and must not count itself.
func (s *Store) OwnerRunning(tr kv.ReadTransaction, owner string, limit int, except string) (int, error) {
	if owner == "" || limit <= 0 {
		return 0, nil
	}
	kvs, err := tr.GetRange(prefixRange(s.k.ownerRunning, tuple.Tuple{owner}), kv.RangeOptions{Limit: limit + 1}).GetSliceWithError()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range kvs {
		if t, err := s.k.ownerRunning.Unpack(e.Key); err == nil && len(t) == 3 && t[2] == except {
			continue
		}
		n++
	}
	return min(n, limit), nil
}

func (s *Store) userHeldKey(owner string) kv.Key {
	return s.k.root.Pack(tuple.Tuple{keyUserHeld, owner})
}

// countHeldBack adds one to owner's count of jobs held back (28), in tr:
// an atomic add, which conflicts with nothing.
func (s *Store) countHeldBack(tr kv.Transaction, owner string) {
	if owner != "" {
		tr.Add(s.userHeldKey(owner), kv.Int64(1))
	}
}

// UserCount is what the store counts of one owner for the per-user
// limit: its jobs the nodes held back so far (28), and its unfinished
// jobs (21).
type UserCount struct {
	HeldBack, Unfinished int64
}

// UserCounts returns the counts of each of owners in one snapshot read: a
// node compares HeldBack with its last reading to learn whose jobs wait
// for a turn.
func (s *Store) UserCounts(ctx context.Context, owners []string) (map[string]UserCount, error) {
	if len(owners) == 0 {
		return map[string]UserCount{}, nil
	}
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (map[string]UserCount, error) {
		keys := make([]kv.Key, 0, 2*len(owners))
		for _, o := range owners {
			keys = append(keys, s.userHeldKey(o), s.k.ownerCountKey(o))
		}
		ns, err := readCounters(tr.Snapshot(), keys)
		if err != nil {
			return nil, err
		}
		out := make(map[string]UserCount, len(owners))
		for i, o := range owners {
			out[o] = UserCount{HeldBack: ns[2*i], Unfinished: ns[2*i+1]}
		}
		return out, nil
	})
}

// HeldTurn is how long a job held back at the per-user limit waits
// before a node takes it again: an interval for each time the owner's
// limit goes into its other unfinished jobs beyond the limit (at least
// one), so that about limit of an owner's waiting jobs come due per
// interval, however many it has: the cost of the checks grows with the
// limit, not with the jobs waiting.
func HeldTurn(unfinished int64, limit int, interval time.Duration) time.Duration {
	limit = max(1, limit)
	turns := max(1, (unfinished+int64(limit)-1)/int64(limit)-1)
	return time.Duration(turns) * interval
}
