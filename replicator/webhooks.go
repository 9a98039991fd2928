package replicator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/fdbrep/fdbrep/pkg/tuple"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
)

// Webhooks: a user's standing request to be told, by an HTTP POST to a
// URL of theirs, of their replications' state changes (PUT
// /_scheduler/webhooks/{id}). A webhook of a server admin hears every
// replication's; another user's, the replications they own. Database,
// DocID and Events narrow it.
//
// Delivery. The transaction that changes a replication's state (Store.index,
// which every job write goes through) also queues the change, for each
// webhook that wants it, under (webhook, replication) with the next number
// of that pair (the changes of one replication conflict on its job, so
// their numbers follow their commits), exactly once, and makes
// sure a delivery job (WebhookType) of that pair is pending or running.
// The delivery job's worker, on a replication node, posts the queued
// changes one at a time, oldest first, and clears each once the receiver
// answered 2xx: at least once, in order per replication. An error is an
// error of the job's attempt, retried by the job layer's policy (the
// next attempt starts from the same change); after its last attempt the
// job is discarded and the changes stay queued until the next change of
// that replication asks for a new delivery job. The worker ends its job in
// a transaction that finds the queue empty (EndDelivery), which conflicts
// with a change queued meanwhile, so no change is left without a job.

// WebhookType is the job type of webhook deliveries.
const WebhookType = "rep_webhook"

// Bounds of webhooks.
const (
	// WebhooksPerOwnerMax is the most webhooks one user may have.
	WebhooksPerOwnerMax = 20
	// WebhookQueueMax is the most changes kept for one webhook and one
	// replication while its receiver does not take them: a change beyond
	// it drops the oldest one (the receiver sees a gap in the delivered
	// changes' "from" and "state").
	WebhookQueueMax = 100
	// WebhookIDMax, WebhookURLMax and WebhookSecretMax bound a webhook's
	// id, URL and secret, in bytes.
	WebhookIDMax     = 128
	WebhookURLMax    = 2048
	WebhookSecretMax = 1024
	// WebhookSecretMin is the shortest secret: a signature with a
	// guessable key proves nothing.
	WebhookSecretMin = 16
	// WebhookPauseMin and WebhookPauseMax bound how long a webhook whose
	// receiver failed rests: every delivery to it waits (without counting
	// an attempt) from a failure for WebhookPauseMin, doubled at each
	// failure in a row up to WebhookPauseMax, so that a receiver that is
	// down or slow costs one attempt per pause, not one per replication
	// with changes for it.
	WebhookPauseMin = time.Second
	WebhookPauseMax = 10 * time.Minute
)

// Headers of a delivery.
const (
	// WebhookSignatureHeader carries "sha256=" and the hex HMAC-SHA256 of
	// the body under the webhook's secret (GitHub's X-Hub-Signature-256).
	WebhookSignatureHeader = "X-Fdbrep-Signature-256"
	// WebhookDeliveryHeader names the change: the same at every attempt,
	// so a receiver can drop one it has taken already.
	WebhookDeliveryHeader = "X-Fdbrep-Delivery"
	// WebhookHeader names the webhook.
	WebhookHeader = "X-Fdbrep-Webhook"
)

// WebhookAddresses is the address policy of webhook receivers: p's (the
// rules of replication endpoints and the node's own listeners), with
// loopback denied unless allowed_endpoint_networks names it: a webhook's
// URL is the user's, and a node's loopback is where its own and its
// neighbours' services listen.
func WebhookAddresses(p *couch.AddressPolicy) *couch.AddressPolicy { return p.Strict() }

// Webhook is a stored webhook.
type Webhook struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	// All: a server admin's webhook, which hears every replication's
	// changes (else only those Owner owns), while Owner stays one: a
	// delivery whose node finds Owner a configured account that is not a
	// server admin drops the changes of others' replications and Demotes
	// it.
	All bool   `json:"all,omitempty"`
	URL string `json:"url"`
	// Events are the states whose changes it wants (the states of
	// _scheduler/docs, and removed); empty: every change.
	Events []string `json:"events,omitempty"`
	// Database and DocID, when set, keep the changes of that replicator
	// database, and of that document.
	Database string `json:"database,omitempty"`
	DocID    string `json:"doc_id,omitempty"`
	// Secret is the key of the deliveries' signature, sealed when the
	// control plane has a Sealer (WebhookSecret opens it).
	Secret string `json:"secret"`
	// Created is when it was written, in Unix milliseconds.
	Created int64 `json:"created"`
	// Demoted is when it stopped being All (Unix ms), 0 if it never was:
	// changes of others' replications queued before may still wait, and
	// its deliveries drop them.
	Demoted int64 `json:"demoted,omitempty"`
}

// wants reports whether h wants change c.
func (h *Webhook) wants(c StateChange) bool {
	return (h.All || c.Owner == h.Owner) && (h.Database == "" || c.DBName == h.Database) &&
		(h.DocID == "" || c.DocID == h.DocID) && (len(h.Events) == 0 || slices.Contains(h.Events, c.State))
}

// webhookSealScope is the seal context of h's secret.
func webhookSealScope(owner, id string) string { return "webhook\x00" + owner + "\x00" + id }

// webhookOrigin is the binding of a webhook's secret: the origin of its
// URL, so that a sealed secret moved to another webhook's receiver does
// not open.
func webhookOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Scheme + "://" + u.Host
}

// WebhookHealth is how a webhook's receiver has been answering: its
// failures in a row (0 once it took a change), when the last one was and
// what it said, and until when deliveries to it rest.
type WebhookHealth struct {
	Failures  int    `json:"failures,omitempty"`
	LastError string `json:"last_error,omitempty"`
	FailedAt  int64  `json:"failed_at,omitempty"`
	Until     int64  `json:"until,omitempty"`
}

// webhookPause is how long deliveries rest after failures failures in a
// row.
func webhookPause(failures int) time.Duration {
	d := WebhookPauseMin
	for i := 1; i < failures && d < WebhookPauseMax; i++ {
		d *= 2
	}
	return min(d, WebhookPauseMax)
}

// WebhookDelivery is a delivery job's arguments: deliver the queued
// changes of replication JobID to webhook Hook of Owner.
type WebhookDelivery struct {
	Owner string `json:"owner"`
	Hook  string `json:"hook"`
	JobID string `json:"job_id"`
}

// Kind is WebhookType.
func (WebhookDelivery) Kind() string { return WebhookType }

// deliveryID is the job id of the delivery of replication jobID's changes
// to webhook id of owner.
func deliveryID(owner, id, jobID string) string {
	h := sha256.Sum256([]byte(owner + "\x00" + id + "\x00" + jobID))
	return hex.EncodeToString(h[:16])
}

// WebhookChange is a queued change: Body is what is posted, Key its place
// in the queue (DeliveryID, in hex, names it to the receiver).
type WebhookChange struct {
	Key  kv.Key
	Body json.RawMessage
}

// DeliveryID is the change's delivery id: the same at every attempt, and
// another for every other change (a hash of its place and its body, which
// holds the time it was made).
func (c WebhookChange) DeliveryID() string {
	h := sha256.New()
	h.Write(c.Key)
	h.Write(c.Body)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// webhookBody is what a delivery posts.
type webhookBody struct {
	Webhook  string `json:"webhook"`
	JobID    string `json:"job_id"`
	Database string `json:"database,omitempty"`
	DocID    string `json:"doc_id,omitempty"`
	State    string `json:"state"`
	From     string `json:"from,omitempty"`
	Node     string `json:"node,omitempty"`
	Time     string `json:"time"`
}

// Webhooks are the stored webhooks, their queued changes and their
// deliveries' index.
//
//	(hooks, Owner, ID) -> JSON Webhook
//	(all, Owner, ID) -> "": the webhooks that hear every replication
//	(queue, Owner, ID, JobID, N) -> JSON body: queued changes, in order
//	(deliveries, Owner, ID, JobID) -> int64 LE: the delivery jobs of a
//	webhook, with the changes dropped from their queues
//	(health, Owner, ID) -> JSON WebhookHealth, while its receiver fails
//	(seqs, Owner, ID, JobID) -> int64 LE: the last change's number in the
//	queue, while a delivery lasts
type Webhooks struct {
	s                                           *Store
	hooks, all, queue, deliveries, health, seqs subspace.Subspace
	clock                                       func() time.Time
}

// Webhooks returns the store's webhooks.
func (s *Store) Webhooks() *Webhooks { return s.webhooks }

// Put writes h (replacing the webhook of that owner and id), in tr, and
// reports whether it is new, and whether the store held h as it is
// already (an earlier attempt of the caller's that did commit). A new one
// beyond WebhooksPerOwnerMax is ErrForbidden. A replaced webhook keeps its
// queued changes; one that was All and is no longer is marked Demoted.
func (w *Webhooks) Put(ctx context.Context, tr kv.Transaction, h *Webhook) (created, same bool, err error) {
	key := w.hooks.Pack(tuple.Tuple{h.Owner, h.ID})
	old, err := tr.Get(key).Get()
	if err != nil {
		return false, false, err
	}
	if was := (Webhook{}); old != nil && json.Unmarshal(old, &was) == nil && !h.All {
		if h.Demoted = was.Demoted; was.All && h.Demoted == 0 {
			h.Demoted = w.clock().UnixMilli()
		}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return false, false, err
	}
	if bytes.Equal(old, b) {
		return false, true, nil
	}
	if old == nil {
		kvs, err := tr.GetRange(prefixRange(w.hooks, tuple.Tuple{h.Owner}), kv.RangeOptions{Limit: WebhooksPerOwnerMax}).GetSliceWithError()
		if err != nil {
			return false, false, err
		}
		if len(kvs) >= WebhooksPerOwnerMax {
			return false, false, newReason(ErrForbidden, "you have %d webhooks, the most a user may have: delete one first", WebhooksPerOwnerMax)
		}
	}
	tr.Set(key, b)
	if all := w.all.Pack(tuple.Tuple{h.Owner, h.ID}); h.All {
		tr.Set(all, nil)
	} else {
		tr.Clear(all)
	}
	return old == nil, false, nil
}

// Demote makes webhook id of owner hear only its owner's replications
// from now on (owner is no longer a server admin), and marks it Demoted;
// nothing when it does already or is gone.
func (w *Webhooks) Demote(ctx context.Context, owner, id string) error {
	_, err := kv.Transact(ctx, w.s.db, func(tr kv.Transaction) (struct{}, error) {
		h, err := w.Get(ctx, tr, owner, id)
		if errors.Is(err, ErrNotFound) || err == nil && !h.All {
			return struct{}{}, nil
		}
		if err != nil {
			return struct{}{}, err
		}
		h.All = false
		_, _, err = w.Put(ctx, tr, h)
		return struct{}{}, err
	})
	return err
}

// Get returns webhook id of owner, or ErrNotFound.
func (w *Webhooks) Get(ctx context.Context, tr kv.ReadTransaction, owner, id string) (*Webhook, error) {
	v, err := tr.Get(w.hooks.Pack(tuple.Tuple{owner, id})).Get()
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, newReason(ErrNotFound, "missing")
	}
	var h Webhook
	if err := json.Unmarshal(v, &h); err != nil {
		return nil, fmt.Errorf("replicator: webhook %q of %q: %w", id, owner, err)
	}
	return &h, nil
}

// List returns owner's webhooks, by id.
func (w *Webhooks) List(ctx context.Context, tr kv.ReadTransaction, owner string) ([]Webhook, error) {
	kvs, err := tr.GetRange(prefixRange(w.hooks, tuple.Tuple{owner}), kv.RangeOptions{}).GetSliceWithError()
	if err != nil {
		return nil, err
	}
	out := make([]Webhook, 0, len(kvs))
	for _, e := range kvs {
		var h Webhook
		if err := json.Unmarshal(e.Value, &h); err != nil {
			return nil, fmt.Errorf("replicator: a webhook of %q: %w", owner, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// Delete removes webhook id of owner with its queued changes, its
// receiver's health and its deliveries' index, in tr, and reports whether
// it existed. Its delivery jobs find it gone and end.
func (w *Webhooks) Delete(ctx context.Context, tr kv.Transaction, owner, id string) (bool, error) {
	key := w.hooks.Pack(tuple.Tuple{owner, id})
	v, err := tr.Get(key).Get()
	if err != nil || v == nil {
		return false, err
	}
	tr.Clear(key)
	tr.Clear(w.all.Pack(tuple.Tuple{owner, id}))
	tr.ClearRange(prefixRange(w.queue, tuple.Tuple{owner, id}))
	tr.Clear(w.health.Pack(tuple.Tuple{owner, id}))
	tr.ClearRange(prefixRange(w.deliveries, tuple.Tuple{owner, id}))
	tr.ClearRange(prefixRange(w.seqs, tuple.Tuple{owner, id}))
	return true, nil
}

// hookChange is a state change of job jobID, which the transaction that
// makes it queues for the webhooks that want it.
type hookChange struct {
	jobID string
	c     StateChange
}

// enqueue queues changes for the webhooks that want them, in tr (the
// transaction that makes them: Store.index), and makes sure each
// (webhook, replication) with a change has a delivery job pending or
// running. The webhooks are read at snapshot: a webhook written
// meanwhile hears the changes after it.
func (w *Webhooks) enqueue(tr kv.Transaction, changes []hookChange) error {
	if len(changes) == 0 {
		return nil
	}
	snap := tr.Snapshot()
	reads := map[string]kv.RangeResult{}
	all := snap.GetRange(subspaceRange(w.all), kv.RangeOptions{})
	for _, ch := range changes {
		if o := ch.c.Owner; o != "" && reads[o] == nil {
			reads[o] = snap.GetRange(prefixRange(w.hooks, tuple.Tuple{o}), kv.RangeOptions{})
		}
	}
	var hooks []*Webhook
	seen := map[[2]string]bool{}
	add := func(v []byte) error {
		var h Webhook
		if err := json.Unmarshal(v, &h); err != nil {
			return fmt.Errorf("replicator: a webhook: %w", err)
		}
		if k := [2]string{h.Owner, h.ID}; !seen[k] {
			seen[k] = true
			hooks = append(hooks, &h)
		}
		return nil
	}
	for _, f := range reads {
		kvs, err := f.GetSliceWithError()
		if err != nil {
			return err
		}
		for _, e := range kvs {
			if err := add(e.Value); err != nil {
				return err
			}
		}
	}
	marks, err := all.GetSliceWithError()
	if err != nil {
		return err
	}
	var others []kv.FutureByteSlice // the admins' webhooks not read yet, read at once
	for _, e := range marks {
		t, err := w.all.Unpack(e.Key)
		if err != nil || len(t) != 2 {
			return fmt.Errorf("replicator: a webhook mark: %v", err)
		}
		owner, _ := t[0].(string)
		id, _ := t[1].(string)
		if !seen[[2]string{owner, id}] {
			others = append(others, snap.Get(w.hooks.Pack(tuple.Tuple{owner, id})))
		}
	}
	for _, f := range others {
		v, err := f.Get()
		if err != nil {
			return err
		}
		if v != nil {
			if err := add(v); err != nil {
				return err
			}
		}
	}
	if len(hooks) == 0 {
		return nil
	}
	now := w.clock().UTC().Format(time.RFC3339Nano)
	ensured := map[string]bool{}
	for _, ch := range changes {
		for _, h := range hooks {
			if !h.wants(ch.c) {
				continue
			}
			if err := w.push(tr, h, ch, now); err != nil {
				return err
			}
			id := deliveryID(h.Owner, h.ID, ch.jobID)
			if ensured[id] {
				continue
			}
			ensured[id] = true
			if err := w.ensureDelivery(tr, id, WebhookDelivery{Owner: h.Owner, Hook: h.ID, JobID: ch.jobID}); err != nil {
				return err
			}
		}
	}
	return nil
}

// push queues change ch for h, dropping the oldest queued one when the
// queue holds WebhookQueueMax already.
func (w *Webhooks) push(tr kv.Transaction, h *Webhook, ch hookChange, now string) error {
	body, err := json.Marshal(webhookBody{Webhook: h.ID, JobID: ch.jobID, Database: ch.c.DBName, DocID: ch.c.DocID,
		State: ch.c.State, From: ch.c.From, Node: ch.c.Node, Time: now})
	if err != nil {
		return err
	}
	// The queue's numbers: the counter is read (not at snapshot) by the
	// changes of one replication, which conflict on its job already.
	ck := w.seqs.Pack(tuple.Tuple{h.Owner, h.ID, ch.jobID})
	v, err := tr.Get(ck).Get()
	if err != nil {
		return err
	}
	n := kv.DecodeInt64(v) + 1
	tr.Set(ck, kv.Int64(n))
	// The oldest queued, at snapshot: the worker's clears do not conflict
	// with this change.
	first, err := tr.Snapshot().GetRange(prefixRange(w.queue, tuple.Tuple{h.Owner, h.ID, ch.jobID}), kv.RangeOptions{Limit: 1}).GetSliceWithError()
	if err != nil {
		return err
	}
	if len(first) > 0 {
		t, err := w.queue.Unpack(first[0].Key)
		if err != nil || len(t) != 4 {
			return fmt.Errorf("replicator: a webhook queue key: %v", err)
		}
		if n0, _ := t[3].(int64); n-n0 >= WebhookQueueMax {
			tr.Clear(first[0].Key)
			tr.Add(w.deliveries.Pack(tuple.Tuple{h.Owner, h.ID, ch.jobID}), kv.Int64(1)) // counted as dropped
		}
	}
	tr.Set(w.queue.Pack(tuple.Tuple{h.Owner, h.ID, ch.jobID, n}), body)
	return nil
}

// ensureDelivery makes sure delivery job id is pending or running, in tr:
// it reads the job's row, so that a worker ending it (EndDelivery, which
// reads the queue) and this change conflict, and one sees the other.
func (w *Webhooks) ensureDelivery(tr kv.Transaction, id string, d WebhookDelivery) error {
	ctx := context.Background() // the store's calls in a caller's transaction do no I/O of their own
	st, _, err := w.s.jobs.Job(ctx, tr, WebhookType, id)
	switch {
	case errors.Is(err, fdbjobs.ErrNotFound):
	case err != nil:
		return err
	case st == fdbjobs.Pending || st == fdbjobs.Running:
		return nil
	}
	if _, err := w.s.jobs.Insert(ctx, tr, d, fdbjobs.InsertOptions{ID: id}); err != nil {
		return err
	}
	tr.Add(w.deliveries.Pack(tuple.Tuple{d.Owner, d.Hook, d.JobID}), kv.Int64(0)) // listed; its dropped count kept
	return nil
}

// Next returns webhook d.Hook, its receiver's health and the oldest
// change queued for d (nil when none), from one snapshot. A webhook that
// no longer exists is nil.
func (w *Webhooks) Next(ctx context.Context, d WebhookDelivery) (*Webhook, WebhookHealth, *WebhookChange, error) {
	o, err := kv.ReadTransact(ctx, w.s.db, func(tr kv.ReadTransaction) (nextChange, error) { return w.next(tr, d) })
	return o.h, o.hl, o.c, err
}

// nextChange is what Next and Ack read.
type nextChange struct {
	h  *Webhook
	hl WebhookHealth
	c  *WebhookChange
}

func (w *Webhooks) next(tr kv.ReadTransaction, d WebhookDelivery) (nextChange, error) {
	hf := tr.Get(w.hooks.Pack(tuple.Tuple{d.Owner, d.Hook}))
	lf := tr.Get(w.health.Pack(tuple.Tuple{d.Owner, d.Hook}))
	cf := tr.GetRange(prefixRange(w.queue, tuple.Tuple{d.Owner, d.Hook, d.JobID}), kv.RangeOptions{Limit: 1})
	hv, err := hf.Get()
	if err != nil || hv == nil {
		return nextChange{}, err
	}
	var o nextChange
	o.h = &Webhook{}
	if err := json.Unmarshal(hv, o.h); err != nil {
		return nextChange{}, fmt.Errorf("replicator: webhook %q of %q: %w", d.Hook, d.Owner, err)
	}
	if lv, err := lf.Get(); err != nil {
		return nextChange{}, err
	} else if lv != nil {
		_ = json.Unmarshal(lv, &o.hl) // unreadable: healthy
	}
	kvs, err := cf.GetSliceWithError()
	if err != nil || len(kvs) == 0 {
		return o, err
	}
	o.c = &WebhookChange{Key: kvs[0].Key, Body: kvs[0].Value}
	return o, nil
}

// Health returns the health of webhook id of owner's receiver.
func (w *Webhooks) Health(ctx context.Context, owner, id string) (WebhookHealth, error) {
	return kv.ReadTransact(ctx, w.s.db, func(tr kv.ReadTransaction) (WebhookHealth, error) {
		var hl WebhookHealth
		v, err := tr.Get(w.health.Pack(tuple.Tuple{owner, id})).Get()
		if err == nil && v != nil {
			_ = json.Unmarshal(v, &hl)
		}
		return hl, err
	})
}

// Failed records a failure of webhook d.Hook's receiver, reason, at now
// (once: a retry after a commit that did commit finds it), so that
// deliveries to it rest webhookPause of its failures in a row. It returns
// until when.
func (w *Webhooks) Failed(ctx context.Context, d WebhookDelivery, reason string, now time.Time) (time.Time, error) {
	return kv.Transact(ctx, w.s.db, func(tr kv.Transaction) (time.Time, error) {
		key := w.health.Pack(tuple.Tuple{d.Owner, d.Hook})
		var hl WebhookHealth
		if v, err := tr.Get(key).Get(); err != nil {
			return time.Time{}, err
		} else if v != nil {
			_ = json.Unmarshal(v, &hl)
		}
		if exists, err := tr.Get(w.hooks.Pack(tuple.Tuple{d.Owner, d.Hook})).Get(); err != nil || exists == nil {
			return time.Time{}, err // deleted meanwhile: nothing to record
		}
		if hl.FailedAt == now.UnixMilli() && hl.LastError == reason {
			return time.UnixMilli(hl.Until), nil // this failure, recorded by an attempt that did commit
		}
		hl.Failures++
		until := now.Add(webhookPause(hl.Failures))
		hl.LastError, hl.FailedAt, hl.Until = reason, now.UnixMilli(), until.UnixMilli()
		b, err := json.Marshal(hl)
		if err != nil {
			return time.Time{}, err
		}
		tr.Set(key, b)
		return until, nil
	})
}

// Ack clears a delivered change of delivery d, and the failures of its
// webhook's receiver when there were some (healthy: whether there were
// none, as Next read it), and returns what Next would then, in the same
// transaction.
func (w *Webhooks) Ack(ctx context.Context, d WebhookDelivery, c *WebhookChange, healthy bool) (*Webhook, WebhookHealth, *WebhookChange, error) {
	o, err := kv.Transact(ctx, w.s.db, func(tr kv.Transaction) (nextChange, error) {
		tr.Clear(c.Key)
		if !healthy {
			tr.Clear(w.health.Pack(tuple.Tuple{d.Owner, d.Hook}))
		}
		return w.next(tr, d)
	})
	return o.h, o.hl, o.c, err
}

// EndDelivery finishes delivery d, in tr, when its queue is empty
// (complete: the worker's Work.CompleteTx), and reports whether it did.
// A change queued meanwhile conflicts with it (ensureDelivery).
func (w *Webhooks) EndDelivery(tr kv.Transaction, d WebhookDelivery, complete func(kv.Transaction) error) (bool, error) {
	kvs, err := tr.GetRange(prefixRange(w.queue, tuple.Tuple{d.Owner, d.Hook, d.JobID}), kv.RangeOptions{Limit: 1}).GetSliceWithError()
	if err != nil || len(kvs) > 0 {
		return false, err
	}
	tr.Clear(w.seqs.Pack(tuple.Tuple{d.Owner, d.Hook, d.JobID})) // the next change starts the numbers again
	return true, complete(tr)
}

// DeliveryInfo is one replication's deliveries to a webhook: its delivery
// job as the job layer shows it, and the changes still queued.
type DeliveryInfo struct {
	JobID  string
	Job    fdbjobs.JobRow
	Queued int
	// Dropped counts the changes dropped because WebhookQueueMax were
	// queued already.
	Dropped int64
}

// Deliveries returns the delivery jobs of webhook id of owner that the
// job layer still keeps (WebhookRetain after they end), with each one's
// queued changes (WebhookQueueMax at most), at most limit.
func (w *Webhooks) Deliveries(ctx context.Context, owner, id string, limit int) ([]DeliveryInfo, error) {
	return kv.ReadTransact(ctx, w.s.db, func(tr kv.ReadTransaction) ([]DeliveryInfo, error) {
		kvs, err := tr.GetRange(prefixRange(w.deliveries, tuple.Tuple{owner, id}), kv.RangeOptions{Limit: limit}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		out := make([]DeliveryInfo, 0, len(kvs))
		for _, e := range kvs {
			t, err := w.deliveries.Unpack(e.Key)
			if err != nil || len(t) != 3 {
				return nil, fmt.Errorf("replicator: a delivery index key: %v", err)
			}
			jobID, _ := t[2].(string)
			row, err := w.s.jobs.GetJob(ctx, tr, WebhookType, deliveryID(owner, id, jobID))
			if errors.Is(err, fdbjobs.ErrNotFound) {
				continue // removed since; OnRemove clears its entry
			}
			if err != nil {
				return nil, err
			}
			q, err := tr.GetRange(prefixRange(w.queue, tuple.Tuple{owner, id, jobID}), kv.RangeOptions{Limit: WebhookQueueMax}).GetSliceWithError()
			if err != nil {
				return nil, err
			}
			out = append(out, DeliveryInfo{JobID: jobID, Job: row, Queued: len(q), Dropped: kv.DecodeInt64(e.Value)})
		}
		return out, nil
	})
}

// RemovedDeliveries clears the index entries of delivery jobs the job
// layer's sweeper removes, in its transaction (WorkerOptions.OnRemove).
func (w *Webhooks) RemovedDeliveries(ctx context.Context, tr kv.Transaction, jobs []fdbjobs.RemovedJob) error {
	for _, j := range jobs {
		var d WebhookDelivery
		if err := json.Unmarshal(j.Data, &d); err != nil {
			continue // not ours to index
		}
		tr.Clear(w.deliveries.Pack(tuple.Tuple{d.Owner, d.Hook, d.JobID}))
	}
	return nil
}

// setupWebhooks registers WebhookType with jobTimeout.
func (s *Store) setupWebhooks(ctx context.Context, jobTimeout time.Duration) error {
	return s.setupType(ctx, WebhookType, jobTimeout, watchShards)
}

// NewWebhookRuntime returns the job layer's Runtime of the webhook
// deliveries (a replication node runs one).
func (s *Store) NewWebhookRuntime(work fdbjobs.Worker[WebhookDelivery], opts fdbjobs.WorkerOptions, ropts fdbjobs.RuntimeOptions) (*fdbjobs.Runtime, error) {
	return newRuntime(s, work, opts, ropts)
}
