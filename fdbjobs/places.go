package fdbjobs

// Places in partitions for a run loop of the caller's own (see doc.go,
// "Partitions"): ClaimPlaces and LeavePlaces give a Manual kind (or a loop
// on Accept) the places, counts and wakes that the Runtime's claims give
// the jobs it inserts, in several partitions at once and under a limit the
// caller names.

import (
	"context"
	"fmt"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// PlacesMax bounds the partitions of one ClaimPlaces or LeavePlaces.
const PlacesMax = 8

// checkPlaces validates the arguments of ClaimPlaces and LeavePlaces.
func checkPlaces(kind, id string, parts []string) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty job id", ErrInvalidArgument)
	}
	if len(parts) > PlacesMax {
		return fmt.Errorf("%w: %d partitions: at most %d", ErrInvalidArgument, len(parts), PlacesMax)
	}
	for i, p := range parts {
		if p == "" {
			return fmt.Errorf("%w: partition %d is empty", ErrInvalidArgument, i)
		}
		if err := checkPartition(p); err != nil {
			return err
		}
		for _, q := range parts[:i] {
			if q == p {
				return fmt.Errorf("%w: partition %q named twice", ErrInvalidArgument, p)
			}
		}
	}
	return nil
}

// Place is a partition and its limit of jobs running at once, for
// ClaimPlaces.
type Place struct {
	Partition string
	// Limit is from 1 to LimitMax.
	Limit int
}

// ClaimPlaces takes, in tr, a place for job id of kind in each of places'
// partitions, where at most the place's Limit jobs of the partition run at
// once: all of them, or none. It is for a run loop of the caller's own (a Manual kind's worker,
// in the transaction that starts the job, fenced by its lock); a Runtime
// claims the places of the jobs it inserted with a partition itself, under
// SetPartitionLimit. A place the job holds already (an earlier attempt of
// the caller's transaction after commit_unknown_result, a start after a
// hand-back) counts as taken.
//
// When a partition is full, ClaimPlaces takes nothing, enters the job in
// that partition's waiting set and returns its name as full: the caller
// puts the job back in the queue (Resubmit, FinishAt: when it looks again
// at the latest), and the next end in that partition (LeavePlaces, or a
// Runtime's end of a job of the partition) moves it to due now, if it is
// pending then. A partition's count of places is read as a snapshot and the
// claims of one partition conflict with each other only; one that finds
// the partition full reads its running set and checks the rows of its
// entries, clearing those of jobs not running (ended without LeavePlaces,
// taken back from a node that died), so a place left behind is found again
// once the partition fills.
func (c *Client) ClaimPlaces(tr kv.Transaction, kind, id string, places []Place) (full string, err error) {
	parts := make([]string, len(places))
	for i, p := range places {
		parts[i] = p.Partition
	}
	if err := checkPlaces(kind, id, parts); err != nil {
		return "", err
	}
	for _, p := range places {
		if p.Limit < 1 || p.Limit > LimitMax {
			return "", fmt.Errorf("%w: partition %q: limit of %d running jobs outside [1, %d]", ErrInvalidArgument, p.Partition, p.Limit, LimitMax)
		}
	}
	pcs := make([]*partClaims, len(parts))
	for i, p := range parts {
		pcs[i] = &partClaims{countFut: tr.Snapshot().Get(c.k.partCountKey(kind, p))}
		ck := c.k.partClaimKey(kind, p)
		if err := tr.AddReadConflictKey(ck); err != nil {
			return "", err
		}
		if err := tr.AddWriteConflictKey(ck); err != nil {
			return "", err
		}
	}
	own := make([]bool, len(parts))
	for i, p := range parts {
		o, free, err := c.placeFree(tr, kind, p, id, pcs[i], places[i].Limit)
		if err != nil {
			return "", err
		}
		if !o && !free {
			c.recallHolders(tr, kind, pcs[i])
			_, err := c.enterWaiting(tr, kind, p, id)
			return p, err
		}
		own[i] = o
	}
	for i, p := range parts {
		if err := c.leaveWaiting(tr, kind, p, id); err != nil {
			return "", err
		}
		if own[i] {
			continue
		}
		tr.Set(c.k.partRunningKey(kind, p, id), nil)
		if pcs[i].tracked {
			tr.Add(c.k.partCountKey(kind, p), one)
		}
	}
	return "", nil
}

// LeavePlaces gives back, in tr, the places job id of kind holds in parts
// (those it holds: a partition where it has none is left as it is), and in
// each partition where jobs wait moves the first of them that is pending to
// due now, so that it claims the place freed. Call it in the transaction
// that ends the job's run or hands it back. Its writes are idempotent under
// commit_unknown_result: a retry finds the places given back already and
// wakes no second job.
func (c *Client) LeavePlaces(tr kv.Transaction, kind, id string, parts []string) error {
	if err := checkPlaces(kind, id, parts); err != nil {
		return err
	}
	if len(parts) == 0 {
		return nil
	}
	for _, p := range parts {
		if err := c.leavePartition(tr, kind, p, id); err != nil {
			return err
		}
	}
	return nil
}

// TokensMax bounds the tokens one TakeTokens asks for.
const TokensMax = 1_000_000

// TakeTokens takes up to n tokens from the bucket of partition part of
// kind (a name of the caller's: the bucket needs no registered type) that
// fills at rate tokens a second and holds a second's worth, at least one:
// over any window of W seconds the takes of every node get at most rate ×
// W + max(1, rate) tokens, give or take the nodes' clock skew. It returns
// the tokens taken (0 when the bucket is empty) and, when none, when the
// next one comes. The bucket is one time in the store, the partition's
// PARTITION_STARTS (a kind's limit of starts per second per partition is
// such a bucket too), read and written by each take: the takes of one
// bucket conflict with each other, so a caller takes tokens in chunks (a
// tenth of a second's worth, say) and spends them itself. tx may be nil, a
// Database or a caller's Transaction; a take retried after
// commit_unknown_result may take twice, which leaves fewer tokens, never
// more.
func (c *Client) TakeTokens(ctx context.Context, tx kv.Transactor, kind, part string, rate float64, n int) (taken int, next time.Time, err error) {
	if err := checkName("kind", kind); err != nil {
		return 0, time.Time{}, err
	}
	if part == "" {
		return 0, time.Time{}, fmt.Errorf("%w: partition 0 is empty", ErrInvalidArgument)
	}
	if err := checkPartition(part); err != nil {
		return 0, time.Time{}, err
	}
	if !(rate >= LimitRateMin && rate <= LimitMax) {
		return 0, time.Time{}, fmt.Errorf("%w: rate of %v tokens per second outside [%v, %d]", ErrInvalidArgument, rate, LimitRateMin, LimitMax)
	}
	if n < 1 || n > TokensMax {
		return 0, time.Time{}, fmt.Errorf("%w: %d tokens asked: from 1 to %d", ErrInvalidArgument, n, TokensMax)
	}
	lim := Limit{PerSecond: rate}
	type took struct {
		n    int
		next time.Time
	}
	now := c.cfg.Clock.Now()
	t, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (took, error) {
		key := c.k.partStartsKey(kind, part)
		v, err := tr.Get(key).Get()
		if err != nil {
			return took{}, err
		}
		nowUs := now.UnixMicro()
		rm := lim.rateMicro()
		step := (int64(1e12) + rm - 1) / rm // µs between tokens, rounded up: never faster than rate
		depth := (max(1, int64(rate)) - 1) * step
		tat := max(kv.DecodeInt64(v), nowUs)
		free := int64(0)
		if slack := depth - (tat - nowUs); slack >= 0 {
			free = slack/step + 1
		}
		if free == 0 {
			return took{next: time.UnixMicro(tat - depth)}, nil
		}
		k := min(free, int64(n))
		tr.Set(key, kv.Int64(tat+k*step))
		return took{n: int(k)}, nil
	})
	return t.n, t.next, err
}
