package fdbjobs

// The event feed of a kind: see doc.go, "Event feed".

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// The events the layer writes to a kind's feed, one per change of a job's
// state (as Counts counts them).
const (
	// FeedInserted: a job was created (pending, or for AddFinished,
	// finished).
	FeedInserted = "inserted"
	// FeedStarted: a pending job was taken to run.
	FeedStarted = "started"
	// FeedRetried: a job is pending again. A running one: a retry after
	// an error, a snooze, a Reenqueue, or a rescue by the activity
	// monitor of a node that stopped heartbeating; a finished one:
	// RetryNow or Resubmit.
	FeedRetried = "retried"
	// FeedCompleted, FeedCancelled and FeedDiscarded: the job finished so.
	FeedCompleted = OutcomeCompleted
	FeedCancelled = OutcomeCancelled
	FeedDiscarded = OutcomeDiscarded
	// FeedRemoved: the job was removed (by its retention, or Remove).
	FeedRemoved = "removed"
)

// Limits and defaults of the feed.
const (
	// FeedKeepMin and FeedKeepMax bound how long SetFeed may keep a
	// kind's events.
	FeedKeepMin = time.Minute
	FeedKeepMax = 90 * 24 * time.Hour
	// FeedPollDefault is how often a FeedReader that found nothing reads
	// the feed again for the events other Clients wrote; its own Client's
	// commits wake it at once.
	FeedPollDefault = 250 * time.Millisecond
	// FeedPageDefault is how many events ReadFeed returns at most when
	// its limit is 0; FeedPageMax the most a limit may ask.
	FeedPageDefault = 100
	FeedPageMax     = 1000
	// MaxEventNameSize and MaxEventDataSize bound a kind's own events
	// (EmitEvent).
	MaxEventNameSize = 64
	MaxEventDataSize = 8 << 10
)

// feedPrunePage is how many events one pruning transaction reads.
const feedPrunePage = 500

// FeedEvent is one event of a kind's feed.
type FeedEvent struct {
	// Seq is the event's place in the feed: ReadFeed's after, to read the
	// events that follow. Seqs of a kind's feed order its events as their
	// commits are ordered, and compare as strings.
	Seq   string `json:"seq"`
	Kind  string `json:"kind"`
	JobID string `json:"id"`
	// Event is one of the Feed… names, or a kind's own (EmitEvent).
	Event string `json:"event"`
	// At is the writer's clock when it wrote the event.
	At time.Time `json:"at"`
	// Data is a kind's own event's data (EmitEvent); nil for the layer's.
	Data json.RawMessage `json:"data,omitempty"`
}

// feedState is what a Client's keys need to write its feeds' events: the
// Client's copy of every type's settings, its clock, and the channels of
// its own waiting FeedReaders.
type feedState struct {
	infos *atomic.Pointer[map[string]typeInfo]
	clock clockwork.Clock
	wake  wakes
}

// feedTx is the feed state of one attempt of a transaction, kept in its
// Locals: which kinds' feeds are on (read once per attempt where the
// Client has no copy), and the user version of the next event's
// versionstamp.
type feedTx struct {
	attempt int
	on      map[string]bool
	woken   map[string]bool // the kinds whose readers its commit wakes
	n       int
}

type feedTxKey struct{}

// tx returns the feed state of tr's current attempt.
func (f *feedState) tx(tr kv.Transaction) *feedTx {
	l := tr.Locals()
	a := l.Attempt()
	if v, ok := l.Value(feedTxKey{}); ok {
		if ft := v.(*feedTx); ft.attempt == a {
			return ft
		}
	}
	ft := &feedTx{attempt: a, on: map[string]bool{}, woken: map[string]bool{}}
	l.SetValue(feedTxKey{}, ft)
	return ft
}

// feedOn reports whether kind's feed is on, in tr: from the Client's copy
// of the types (which lags a SetFeed by about a watch's delay, as shard
// counts do), else from the attempt's read of the type (knowFeed), else
// read once per attempt.
func (k keys) feedOn(tr kv.Transaction, ft *feedTx, kind string) bool {
	if on, ok := ft.on[kind]; ok {
		return on
	}
	on, known := k.cachedFeed(kind)
	if !known {
		on = tr.Snapshot().Get(k.feedKey(kind)).MustGet() != nil
	}
	ft.on[kind] = on
	return on
}

// cachedFeed is whether kind's feed is on in the Client's copy of the
// types, if it has the kind.
func (k keys) cachedFeed(kind string) (on, known bool) {
	if m := k.feed.infos.Load(); m != nil {
		ti := (*m)[kind]
		return ti.feed, ti.known
	}
	return false, false
}

// knowFeed records, for tr's attempt, whether kind's feed is on as ti (a
// read of the type in tr) says: its events then need no read of their
// own.
func (k keys) knowFeed(tr kv.Transaction, kind string, ti typeInfo) {
	if k.feed == nil || !ti.known {
		return
	}
	if on, known := k.cachedFeed(kind); known && !on {
		return // nothing to write: keep off the Locals
	}
	k.feed.tx(tr).on[kind] = ti.feed
}

// feedEvent writes the event of a job of typ moving from count state was
// to is ("" for none), when typ's feed is on.
func (k keys) feedEvent(tr kv.Transaction, typ, id, was, is string) {
	if k.feed == nil || was == is {
		return
	}
	if on, known := k.cachedFeed(typ); known && !on {
		return // the common case, and the cheapest
	}
	var ev string
	switch {
	case was == "":
		ev = FeedInserted
	case is == "":
		ev = FeedRemoved
	case is == StateRunning:
		ev = FeedStarted
	case is == StatePending:
		ev = FeedRetried
	default:
		ev = is
	}
	ft := k.feed.tx(tr)
	if k.feedOn(tr, ft, typ) {
		k.writeEvent(tr, ft, typ, id, ev, nil)
	}
}

// writeEvent writes one event of kind's feed in tr, and wakes this
// Client's FeedReaders of kind when tr commits. In a transaction that
// moves many jobs (coalesceAdds) the events of each kind are written
// together when it flushes, under one key (or a few: feedKeyBytes); else
// at once, under a key of their own. Each key is this commit's
// versionstamp with the attempt's next user version.
func (k keys) writeEvent(tr kv.Transaction, ft *feedTx, kind, id, ev string, data []byte) {
	if !ft.woken[kind] {
		ft.woken[kind] = true
		w := &k.feed.wake
		tr.Locals().OnCommit(func() { w.notify(kind) })
	}
	e := tuple.Tuple{id, ev, k.feed.clock.Now().UnixMilli()}
	if data != nil {
		e = append(e, data)
	}
	if at, ok := tr.(*addTx); ok && at.event(k, ft, kind, e) {
		return
	}
	k.putEvents(tr, ft, kind, []tuple.Tuple{e})
}

// feedKeyBytes bounds the events one key of a feed holds (their packed
// size); feedKeyEvents their number (a Seq numbers them in 2 bytes).
const (
	feedKeyBytes  = 8_000
	feedKeyEvents = 0xffff
)

// putEvents writes evs, events of kind's feed, in tr: as few keys as
// feedKeyBytes allows, each under this commit's versionstamp and the
// attempt's next user version.
func (k keys) putEvents(tr kv.Transaction, ft *feedTx, kind string, evs []tuple.Tuple) {
	for len(evs) > 0 {
		n, size := 0, 0
		for n < len(evs) && n < feedKeyEvents && (n == 0 || size+len(evs[n].Pack()) <= feedKeyBytes) {
			size += len(evs[n].Pack())
			n++
		}
		if ft.n > 0xffff {
			panic(fmt.Errorf("%w: more than 65,536 feed keys in one transaction", ErrInvalidArgument))
		}
		key, err := k.root.PackWithVersionstamp(tuple.Tuple{keyFeedEvents, kind, tuple.IncompleteVersionstamp(uint16(ft.n))})
		if err != nil {
			panic(err)
		}
		ft.n++
		v := make(tuple.Tuple, n)
		for i, e := range evs[:n] {
			v[i] = e
		}
		tr.SetVersionstampedKey(key, v.Pack())
		evs = evs[n:]
	}
}

func (k keys) feedKey(kind string) kv.Key { return k.root.Pack(tuple.Tuple{keyFeed, kind}) }

func (k keys) feedPrunedKey(kind string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyFeedPruned, kind})
}

func (k keys) feedEventsRange(kind string) kv.KeyRange {
	return prefixRange(k.root, tuple.Tuple{keyFeedEvents, kind})
}

func (k keys) feedEventKey(kind string, vs tuple.Versionstamp) kv.Key {
	return k.root.Pack(tuple.Tuple{keyFeedEvents, kind, vs})
}

// SetFeed turns kind's event feed on, keeping each event for keep (from
// FeedKeepMin to FeedKeepMax), or changes how long it keeps them. Every
// change of a job's state then writes an event in the same commit (see
// the Feed… names), and the kind's own events (EmitEvent) are kept too.
// Started Clients write events from when their type-check loop sees the
// change (a watch's delay); this Client's own transactions at once. The
// Runtimes that work kind prune events older than keep at each sweep
// (PruneFeed). tx may be nil (a transaction of its own), a Database, or a
// caller's Transaction.
func (c *Client) SetFeed(ctx context.Context, tx kv.Transactor, kind string, keep time.Duration) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if keep < FeedKeepMin || keep > FeedKeepMax {
		return fmt.Errorf("%w: feed of %q kept %v: from %v to %v", ErrInvalidArgument, kind, keep, FeedKeepMin, FeedKeepMax)
	}
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) error {
		tr.Set(c.k.feedKey(kind), tuple.Tuple{keep.Milliseconds()}.Pack())
		return nil
	})
}

// DisableFeed turns kind's feed off and removes its events: a reader
// then gets ErrNoFeed, and one that reads it again once it is back on
// gets ErrFeedPruned for the events it missed. No-op for a kind without a
// feed.
func (c *Client) DisableFeed(ctx context.Context, tx kv.Transactor, kind string) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	return c.changeTypes(ctx, tx, func(tr kv.Transaction) error {
		tr.Clear(c.k.feedKey(kind))
		tr.ClearRange(c.k.feedEventsRange(kind))
		// Every event so far counts as pruned (this commit's
		// versionstamp is above them all).
		tr.SetVersionstampedValue(c.k.feedPrunedKey(kind), disabledMark)
		return nil
	})
}

// disabledMark is DisableFeed's FEED_PRUNED value, with its versionstamp's
// offset (0): this commit's versionstamp, past every place of its keys.
var disabledMark = []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}

// FeedKeep returns how long kind's feed keeps its events, and false when
// the kind has no feed.
func (c *Client) FeedKeep(ctx context.Context, tx kv.ReadTransactor, kind string) (time.Duration, bool, error) {
	if err := checkName("kind", kind); err != nil {
		return 0, false, err
	}
	v, err := kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(c.k.feedKey(kind)).Get()
	})
	if err != nil || v == nil {
		return 0, false, err
	}
	keep, err := decodeFeedKeep(v)
	return keep, err == nil, err
}

func decodeFeedKeep(v []byte) (time.Duration, error) {
	t, err := tuple.Unpack(v)
	if err != nil || len(t) != 1 {
		return 0, fmt.Errorf("fdbjobs: bad feed setting %x", v)
	}
	ms, ok := t[0].(int64)
	if !ok {
		return 0, fmt.Errorf("fdbjobs: bad feed setting %x", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// EmitEvent writes, in tr, an event of the kind's own about job id (for
// example a state the kind's data holds) to kind's feed, with data (nil,
// or JSON of at most MaxEventDataSize bytes). The event name must not be
// empty, be at most MaxEventNameSize bytes, and not be one of the layer's
// Feed… names. Written only while the kind's feed is on (else dropped).
func (c *Client) EmitEvent(tr kv.Transaction, kind, id, event string, data json.RawMessage) error {
	if err := checkName("kind", kind); err != nil {
		return err
	}
	if err := checkName("job id", id); err != nil {
		return err
	}
	switch {
	case event == "" || len(event) > MaxEventNameSize:
		return fmt.Errorf("%w: event name of %d bytes: from 1 to %d", ErrInvalidArgument, len(event), MaxEventNameSize)
	case isFeedName(event):
		return fmt.Errorf("%w: event name %q is the layer's", ErrInvalidArgument, event)
	case len(data) > MaxEventDataSize:
		return fmt.Errorf("%w: event data of %d bytes, at most %d", ErrDataTooLarge, len(data), MaxEventDataSize)
	case data != nil && !json.Valid(data):
		return ErrInvalidData
	}
	ft := c.k.feed.tx(tr)
	if c.k.feedOn(tr, ft, kind) {
		c.k.writeEvent(tr, ft, kind, id, event, data)
	}
	return nil
}

func isFeedName(s string) bool {
	switch s {
	case FeedInserted, FeedStarted, FeedRetried, FeedCompleted, FeedCancelled, FeedDiscarded, FeedRemoved:
		return true
	}
	return false
}

// ReadFeed returns up to limit (0: FeedPageDefault; at most FeedPageMax)
// events of kind's feed that follow after (a FeedEvent.Seq; "" for the
// oldest kept), in order, from one snapshot read: every event committed
// before the read and after after is there, and a later read from the
// last one's Seq finds the events committed since, none missed. Errors:
// ErrNoFeed when the kind's feed is off, ErrFeedPruned when events
// after after were pruned (read from "" to go on from the oldest kept),
// ErrInvalidArgument for a bad after or limit.
func (c *Client) ReadFeed(ctx context.Context, tx kv.ReadTransactor, kind, after string, limit int) ([]FeedEvent, error) {
	if err := checkName("kind", kind); err != nil {
		return nil, err
	}
	if limit < 0 || limit > FeedPageMax {
		return nil, fmt.Errorf("%w: feed page of %d events: from 0 to %d", ErrInvalidArgument, limit, FeedPageMax)
	}
	if limit == 0 {
		limit = FeedPageDefault
	}
	var fromVS tuple.Versionstamp
	var from []byte // the decoded after; nil for the oldest kept
	if after != "" {
		var err error
		if fromVS, from, err = parseSeq(after); err != nil {
			return nil, err
		}
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) ([]FeedEvent, error) {
		snap := tr.Snapshot()
		onF, prunedF := snap.Get(c.k.feedKey(kind)), snap.Get(c.k.feedPrunedKey(kind))
		r, keys := c.k.feedEventsRange(kind), limit
		if from != nil {
			// From its key, whose later events follow: one key more, for
			// the events of that key not read again.
			r.Begin, keys = c.k.feedEventKey(kind, fromVS), limit+1
		}
		// A key holds one event or more: limit keys hold limit events
		// or more.
		rows := snap.GetRange(r, kv.RangeOptions{Limit: keys})
		if on, err := onF.Get(); err != nil {
			return nil, err
		} else if on == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoFeed, kind)
		}
		pruned, err := prunedF.Get()
		if err != nil {
			return nil, err
		}
		if from != nil && string(from) < string(pruned) {
			return nil, fmt.Errorf("%w: %q: events after %s are gone (pruned through %x); read from \"\" for the oldest kept",
				ErrFeedPruned, kind, after, pruned)
		}
		kvs, err := rows.GetSliceWithError()
		if err != nil {
			return nil, err
		}
		out := make([]FeedEvent, 0, limit)
		for _, e := range kvs {
			evs, err := c.k.decodeEvents(kind, e)
			if err != nil {
				return nil, err
			}
			for _, ev := range evs {
				if len(out) == limit {
					return out, nil
				}
				if ev.Seq > after {
					out = append(out, ev)
				}
			}
		}
		return out, nil
	})
}

// FeedEnd returns the Seq of kind's last event ("" when it has none): a
// reader from there reads only the events that come after ("since=now").
// ErrNoFeed when the kind's feed is off.
func (c *Client) FeedEnd(ctx context.Context, tx kv.ReadTransactor, kind string) (string, error) {
	if err := checkName("kind", kind); err != nil {
		return "", err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (string, error) {
		snap := tr.Snapshot()
		onF, prunedF := snap.Get(c.k.feedKey(kind)), snap.Get(c.k.feedPrunedKey(kind))
		last, err := snap.GetRange(c.k.feedEventsRange(kind), kv.RangeOptions{Limit: 1, Reverse: true}).GetSliceWithError()
		if err != nil {
			return "", err
		}
		if on, err := onF.Get(); err != nil || on == nil {
			if err == nil {
				err = fmt.Errorf("%w: %q", ErrNoFeed, kind)
			}
			return "", err
		}
		if len(last) > 0 {
			evs, err := c.k.decodeEvents(kind, last[0])
			if err != nil || len(evs) == 0 {
				return "", err
			}
			return evs[len(evs)-1].Seq, nil
		}
		// None kept: after the last pruned, if any.
		pruned, err := prunedF.Get()
		return hex.EncodeToString(pruned), err
	})
}

// seqLen is the length of a decoded Seq: the key's versionstamp (12
// bytes) and the event's place among the key's events (2 bytes).
const seqLen = 14

// decodeEvents decodes one key of kind's feed: its events, in order.
func (k keys) decodeEvents(kind string, e kv.KeyValue) ([]FeedEvent, error) {
	bad := fmt.Errorf("fdbjobs: bad feed event %x", e.Key)
	t, err := k.root.Unpack(e.Key)
	if err != nil || len(t) != 3 {
		return nil, bad
	}
	vs, ok := t[2].(tuple.Versionstamp)
	if !ok {
		return nil, bad
	}
	v, err := tuple.Unpack(e.Value)
	if err != nil || len(v) > feedKeyEvents {
		return nil, bad
	}
	base := binary.BigEndian.AppendUint16(vs.TransactionVersion[:], vs.UserVersion)
	out := make([]FeedEvent, 0, len(v))
	for i, x := range v {
		f, ok := x.(tuple.Tuple)
		if !ok || len(f) < 3 {
			return nil, bad
		}
		id, _ := f[0].(string)
		name, _ := f[1].(string)
		at, _ := f[2].(int64)
		ev := FeedEvent{Seq: hex.EncodeToString(binary.BigEndian.AppendUint16(slices.Clip(base), uint16(i))), Kind: kind,
			JobID: id, Event: name, At: time.UnixMilli(at).UTC()}
		if len(f) > 3 {
			if d, ok := f[3].([]byte); ok {
				ev.Data = d
			}
		}
		out = append(out, ev)
	}
	return out, nil
}

// parseSeq decodes a Seq: the versionstamp of its key and its place there.
func parseSeq(seq string) (tuple.Versionstamp, []byte, error) {
	bad := fmt.Errorf("%w: feed seq %q", ErrInvalidArgument, seq)
	b, err := hex.DecodeString(seq)
	if err != nil || len(b) != seqLen {
		return tuple.Versionstamp{}, nil, bad
	}
	vs := tuple.Versionstamp{TransactionVersion: [10]byte(b[:10]), UserVersion: binary.BigEndian.Uint16(b[10:12])}
	if !vs.IsComplete() {
		return tuple.Versionstamp{}, nil, bad // ten 0xff bytes: no commit's
	}
	return vs, b, nil
}

// PruneFeed removes the events of kind's feed older than the feed's keep
// at now, in transactions of a page each, and returns how many it
// removed. The Runtimes that work kind do so at each sweep (SweepPeriod);
// this is for a caller that prunes at times of its own. A reader whose
// place was pruned is told so (ErrFeedPruned). No-op without a feed.
func (c *Client) PruneFeed(ctx context.Context, kind string, now time.Time) (int, error) {
	if err := checkName("kind", kind); err != nil {
		return 0, err
	}
	total := 0
	for {
		p, err := kv.Transact(ctx, c.db, func(tr kv.Transaction) (prunePage, error) {
			return c.prunePage(tr, kind, now)
		})
		total += p.n
		if err != nil || !p.more {
			return total, err
		}
	}
}

// prunePage is what one pruning transaction did: the events it removed,
// and whether more may be due (it read a full page of keys).
type prunePage struct {
	n    int
	more bool
}

// prunePage removes, in tr, the first page's events of kind older than its
// feed's keep at now, and moves the pruned mark past them.
func (c *Client) prunePage(tr kv.Transaction, kind string, now time.Time) (prunePage, error) {
	snap := tr.Snapshot()
	setting, err := snap.Get(c.k.feedKey(kind)).Get()
	if err != nil || setting == nil {
		return prunePage{}, err
	}
	keep, err := decodeFeedKeep(setting)
	if err != nil {
		return prunePage{}, err
	}
	cutoff := now.Add(-keep).UnixMilli()
	r := c.k.feedEventsRange(kind)
	kvs, err := snap.GetRange(r, kv.RangeOptions{Limit: feedPrunePage}).GetSliceWithError()
	if err != nil {
		return prunePage{}, err
	}
	keys, events := 0, 0
	var last FeedEvent
	for _, e := range kvs {
		evs, err := c.k.decodeEvents(kind, e)
		if err != nil {
			return prunePage{}, err
		}
		// A key's events are one commit's: the first one's time is the
		// key's.
		if len(evs) == 0 || evs[0].At.UnixMilli() >= cutoff {
			break
		}
		last, keys, events = evs[len(evs)-1], keys+1, events+len(evs)
	}
	if keys == 0 {
		return prunePage{}, nil
	}
	tr.ClearRange(kv.KeyRange{Begin: r.Begin, End: append(kvs[keys-1].Key, 0)})
	_, seq, _ := parseSeq(last.Seq)
	tr.ByteMax(c.k.feedPrunedKey(kind), seq) // its last event's place
	return prunePage{events, keys == feedPrunePage}, nil
}

// FeedReader reads a kind's feed in order from a place, waiting for new
// events: an in-process subscription. Its Client's own commits wake it at
// once; the events of other Clients (other nodes) it finds by reading
// again every FeedPollDefault (one snapshot range read while idle).
type FeedReader struct {
	c     *Client
	kind  string
	after string
	limit int
	poll  time.Duration
}

// Feed returns a reader of kind's feed from after (a FeedEvent.Seq; ""
// for the oldest kept), with pages of limit events (0: FeedPageDefault).
func (c *Client) Feed(kind, after string, limit int) *FeedReader {
	return &FeedReader{c: c, kind: kind, after: after, limit: limit, poll: FeedPollDefault}
}

// Seq is the Seq of the last event Next returned (or the place the reader
// started from): where a reader that stops should start again.
func (f *FeedReader) Seq() string { return f.after }

// Next returns the next events, in order, waiting until there is at least
// one or ctx ends. Errors are ReadFeed's: after ErrFeedPruned the reader
// stays where it was (start a new one from "" to go on from the oldest
// kept, knowing what was missed).
func (f *FeedReader) Next(ctx context.Context) ([]FeedEvent, error) {
	for {
		woken := f.c.k.feed.wake.wait(f.kind) // before the read: a commit between the two wakes us
		evs, err := f.c.ReadFeed(ctx, nil, f.kind, f.after, f.limit)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			f.after = evs[len(evs)-1].Seq
			return evs, nil
		}
		t := f.c.cfg.Clock.NewTimer(f.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-woken:
		case <-t.Chan():
		}
		t.Stop()
	}
}
