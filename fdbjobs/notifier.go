package fdbjobs

import (
	"context"
	"encoding/json"
	"hash/maphash"
	"reflect"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/internal/service"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Event is a change of a subscribed job: a new state, for a running job a
// new Update (heartbeat or data), and for a pending job new data (a job
// resubmitted, or taken and given back, between two reads of the
// notifier). State is NotFound, and Data nil, when the job was removed.
type Event struct {
	Type  string
	ID    string
	State State
	Data  json.RawMessage
}

// dataSum is a hash of a job's data, by which a subscription tells new
// data of a pending job from the data it delivered last.
func dataSum(data []byte) uint64 { return maphash.Bytes(dataSeed, data) }

var dataSeed = maphash.MakeSeed()

// final reports whether no event follows e.
func (e Event) final() bool { return e.State == Finished || e.State == NotFound }

// Subscription delivers the events of one job to one subscriber. Events are
// queued without bound until Wait takes them; Unsubscribe drops them.
type Subscription struct {
	Type string
	ID   string

	n      *notifier
	signal chan struct{} // capacity 1: "the queue or closed changed"

	mu     sync.Mutex
	queue  []Event
	closed bool // no event will be added
	// Last state, seq and data (its hash) delivered; guarded by n.mu.
	state State
	seq   tuple.Versionstamp
	data  uint64
}

// Subscribe follows the state of job id of type typ from this node,
// whichever node runs the job. It returns the job's current state and data.
// For a finished job it returns a nil Subscription: nothing more will
// happen. For a missing job or a type without a timeout it returns
// ErrNotFound. The Client must be started (ErrNotStarted): events come from
// the node's notifier for the type, which watches the subscribed jobs'
// rows and reads them when one changes, at most once per
// Config.NotifierHoldoff.
//
// Each call returns a new Subscription; call Unsubscribe when done.
func (c *Client) Subscribe(ctx context.Context, tx kv.ReadTransactor, typ, id string) (*Subscription, State, json.RawMessage, error) {
	if err := checkName("type", typ); err != nil {
		return nil, 0, nil, err
	}
	if err := checkName("job id", id); err != nil {
		return nil, 0, nil, err
	}
	r, err := c.readJobOfType(ctx, tx, typ, id, true)
	if err != nil {
		return nil, 0, nil, err
	}
	if r.state == Finished {
		return nil, Finished, r.data, nil
	}
	n, err := c.notifierFor(typ)
	if err != nil {
		return nil, 0, nil, err
	}
	s := &Subscription{Type: typ, ID: id, n: n, signal: make(chan struct{}, 1), state: r.state, seq: r.seq, data: dataSum(r.data)}
	if !n.add(s) {
		return nil, 0, nil, ErrNotStarted
	}
	return s, r.state, r.data, nil
}

// Wait returns the next event, ctx's error when ctx ends first, or
// ErrSubscriptionClosed after Unsubscribe, after the final event (finished
// or not found) was returned, or when the Client stopped.
func (s *Subscription) Wait(ctx context.Context) (Event, error) {
	for {
		if e, ok, err := s.poll(); ok || err != nil {
			return e, err
		}
		select {
		case <-s.signal:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// WaitState is Wait skipping events whose state is not state; the final
// event is returned whatever its state.
func (s *Subscription) WaitState(ctx context.Context, state State) (Event, error) {
	for {
		e, err := s.Wait(ctx)
		if err != nil || e.State == state || e.final() {
			return e, err
		}
	}
}

// poll takes a queued event if there is one.
func (s *Subscription) poll() (Event, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		e := s.queue[0]
		s.queue = s.queue[1:]
		if len(s.queue) > 0 || s.closed {
			s.wake()
		}
		return e, true, nil
	}
	if s.closed {
		return Event{}, false, ErrSubscriptionClosed
	}
	return Event{}, false, nil
}

func (s *Subscription) wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// push queues e; a final event closes the subscription.
func (s *Subscription) push(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.queue = append(s.queue, e)
	if e.final() {
		s.closed = true
	}
	s.wake()
}

// close ends the subscription, dropping queued events if drop is set.
func (s *Subscription) close(drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if drop {
		s.queue = nil
	}
	s.closed = true
	s.wake()
}

// Unsubscribe ends the subscription and drops the events not yet taken.
// It may be called more than once, and on a nil Subscription.
func (s *Subscription) Unsubscribe() {
	if s == nil {
		return
	}
	s.n.remove(s)
	s.close(true)
}

// WaitAny waits for the next event of any of subs, skipping closed ones.
// It returns ErrSubscriptionClosed when all are closed and drained.
func WaitAny(ctx context.Context, subs ...*Subscription) (Event, *Subscription, error) {
	for {
		open := 0
		for _, s := range subs {
			e, ok, err := s.poll()
			if ok {
				return e, s, nil
			}
			if err == nil {
				open++
			}
		}
		if open == 0 {
			return Event{}, nil, ErrSubscriptionClosed
		}
		cases := make([]reflect.SelectCase, 0, len(subs)+1)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
		for _, s := range subs {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.signal)})
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			return Event{}, nil, ctx.Err()
		}
	}
}

// notifier serves the subscriptions of one type on one node.
type notifier struct {
	c   *Client
	typ string
	seq uint64 // its number among the Client's notifiers
	svc service.Base

	poke chan struct{}

	mu      sync.Mutex
	subs    map[string]map[*Subscription]bool
	stopped bool
	batch   kv.Batch // owned by the loop
}

func newNotifier(c *Client, typ string, seq uint64) *notifier {
	return &notifier{c: c, typ: typ, seq: seq, poke: make(chan struct{}, 1), subs: map[string]map[*Subscription]bool{}, batch: c.cfg.batch(batchMax)}
}

func (n *notifier) start(ctx context.Context) { _, _ = n.svc.Start(ctx, nil, n.run) }

// stop ends the loop and closes every subscription (their queued events
// stay readable).
func (n *notifier) stop() {
	n.svc.Stop()
	n.mu.Lock()
	n.stopped = true
	subs := n.subs
	n.subs = map[string]map[*Subscription]bool{}
	n.mu.Unlock()
	for _, m := range subs {
		for s := range m {
			s.close(false)
		}
	}
}

func (n *notifier) add(s *Subscription) bool {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return false
	}
	m := n.subs[s.ID]
	if m == nil {
		m = map[*Subscription]bool{}
		n.subs[s.ID] = m
	}
	m[s] = true
	n.mu.Unlock()
	// Check the new subscription at once: the job may have changed between
	// Subscribe's read and now.
	select {
	case n.poke <- struct{}{}:
	default:
	}
	return true
}

func (n *notifier) remove(s *Subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m := n.subs[s.ID]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(n.subs, s.ID)
		}
	}
}

// NotifierWatchMax is the most subscribed jobs of a type a notifier
// watches on one node; the jobs beyond are read every NotifierPoll.
// FoundationDB allows 10,000 watches per client by default.
const NotifierWatchMax = 1000

// NotifierPoll is how often a notifier with more than NotifierWatchMax
// subscribed jobs reads them all, watches or not.
const NotifierPoll = time.Second

// run serves the subscriptions: each round it watches the rows of the
// subscribed jobs (up to NotifierWatchMax of them), then reads them all
// and queues the events due; it waits for a watch to fire (a job
// changed), a new subscription, NotifierPoll when some jobs are
// unwatched, or, after a read that failed, watchRetryDefault; and it
// rests NotifierHoldoff between rounds. Setting the
// watches before reading means no change falls between a read and the
// watch that follows it.
func (n *notifier) run(ctx context.Context) {
	log := n.c.cfg.Logger
	holdoff := n.c.cfg.NotifierHoldoff
	var wb kv.Backoff // after failed watches
	for {
		select {
		case <-n.poke:
		default:
		}
		n.mu.Lock()
		ids := make([]string, 0, len(n.subs))
		for id := range n.subs {
			ids = append(ids, id)
		}
		n.mu.Unlock()
		watched := ids[:min(len(ids), NotifierWatchMax)]
		var fired <-chan struct{}
		var watches []kv.FutureNil
		if len(watched) > 0 {
			var err error
			watches, err = kv.Transact(ctx, n.c.db, func(tr kv.Transaction) ([]kv.FutureNil, error) {
				ws := make([]kv.FutureNil, len(watched))
				for i, id := range watched {
					ws[i] = tr.Watch(n.c.k.dataKey(n.typ, id))
				}
				return ws, nil
			})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Warn().Err(err).Str("type", n.typ).Msg("fdbjobs: notifier watch failed")
				if !sleepCtx(ctx, max(holdoff, watchRetryDefault)) {
					return
				}
				continue
			}
			fired = anyDone(ctx, watches)
		}
		var poll <-chan time.Time
		var t *time.Timer
		if err := n.process(ctx); err != nil && ctx.Err() == nil {
			// A change between a subscriber's own read and this round's
			// watches is seen only by this read: read again soon
			// rather than wait for a change that may never come.
			log.Warn().Err(err).Str("type", n.typ).Msg("fdbjobs: notifier read failed; it reads again")
			t = time.NewTimer(max(holdoff, watchRetryDefault))
			poll = t.C
		} else if len(ids) > len(watched) {
			t = time.NewTimer(NotifierPoll)
			poll = t.C
		}
		select {
		case <-ctx.Done():
		case <-fired:
		case <-n.poke:
			// Put it back: the next round reads the new subscription.
			select {
			case n.poke <- struct{}{}:
			default:
			}
		case <-poll:
		}
		if t != nil {
			t.Stop()
		}
		var failed kv.FutureNil
		for _, w := range watches {
			if w.IsReady() {
				if _, err := w.Get(); err != nil && failed == nil {
					failed = w
				}
			}
			w.Cancel()
		}
		if ctx.Err() != nil {
			return
		}
		if failed != nil && !afterWatch(ctx, &wb, failed) {
			return
		}
		if !sleepCtx(ctx, holdoff) {
			return
		}
	}
}

// anyDone returns a channel closed when the first of ws is done, or ctx
// ends.
func anyDone(ctx context.Context, ws []kv.FutureNil) <-chan struct{} {
	done := make(chan struct{})
	var once sync.Once
	for _, w := range ws {
		go func() {
			select {
			case <-w.Done():
			case <-ctx.Done():
			}
			once.Do(func() { close(done) })
		}()
	}
	return done
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// process reads every subscribed job and sends the events due.
func (n *notifier) process(ctx context.Context) error {
	n.mu.Lock()
	ids := make([]string, 0, len(n.subs))
	for id := range n.subs {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	rows := make(map[string]*row, len(ids))
	for i := 0; i < len(ids); {
		end := min(len(ids), i+n.batch.Size())
		got, err := n.readBatch(ctx, ids[i:end], rows)
		if err != nil {
			if err := n.batch.Retry(ctx, err); err != nil {
				return gaveUp("notifier", err)
			}
			continue
		}
		n.batch.Done()
		switch {
		case got < end-i:
			n.batch.Fit(got) // ended by its bytes: rows this size fit so many
		case got == n.batch.Size():
			n.batch.Grow()
		}
		i += got
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		r := rows[id]
		for s := range n.subs[id] {
			var e Event
			switch {
			case r == nil:
				e = Event{Type: n.typ, ID: id, State: NotFound}
			case r.state != s.state || (r.state == Running && r.seq != s.seq) || (r.state == Pending && dataSum(r.data) != s.data):
				e = Event{Type: n.typ, ID: id, State: r.state, Data: r.data}
				s.state, s.seq, s.data = r.state, r.seq, dataSum(r.data)
			default:
				continue
			}
			s.push(e)
			if e.final() {
				delete(n.subs[id], s)
			}
		}
		if len(n.subs[id]) == 0 {
			delete(n.subs, id)
		}
	}
	return nil
}

// readBatch reads the rows of ids, or of as many of them as about
// foldBatchBytes of rows take (at least readAhead), into into, in one
// transaction attempt, and returns how many it read.
func (n *notifier) readBatch(ctx context.Context, ids []string, into map[string]*row) (int, error) {
	if h := n.c.hooks.notifierBatch; h != nil {
		if err := h(len(ids)); err != nil {
			return 0, err
		}
	}
	rows, err := once(ctx, n.c.db, func(tr kv.Transaction) ([]*row, error) {
		var out []*row
		read := 0
		for i := 0; i < len(ids) && (i == 0 || read < foldBatchBytes); i += readAhead {
			chunk := ids[i:min(i+readAhead, len(ids))]
			futs := make([]kv.FutureByteSlice, len(chunk))
			for j, id := range chunk {
				futs[j] = tr.Snapshot().Get(n.c.k.dataKey(n.typ, id))
			}
			rs, err := decodeRows(futs)
			if err != nil {
				return nil, err
			}
			for _, r := range rs {
				if r != nil {
					read += len(r.data)
				}
			}
			out = append(out, rs...)
		}
		return out, nil
	})
	if err != nil {
		return 0, err
	}
	for i, r := range rows {
		into[ids[i]] = r
	}
	return len(rows), nil
}
