package scheduler

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// Webhook deliveries (replicator/webhooks.go): every replication node runs
// a Runtime of the delivery jobs, whose worker posts a replication's
// queued changes to the webhook's URL one at a time, oldest first.

// Bounds of the webhook Runtime and of one delivery.
const (
	// webhookConcurrency is how many deliveries a node works at once.
	webhookConcurrency = 32
	// WebhookTimeoutDefault bounds one POST to a receiver, from the
	// connect to the end of its answer.
	WebhookTimeoutDefault = 10 * time.Second
	// webhookRetain is how long an ended delivery job is kept (its
	// attempts and errors show in GET /_scheduler/webhooks/{id}).
	webhookRetain = 24 * time.Hour
	// webhookAnswerMax is how much of a receiver's answer is read (to
	// keep its connection); the rest is not.
	webhookAnswerMax = 4 << 10
	// webhookOwnerConcurrency is how many of one user's deliveries a node
	// works at once: a user whose receivers answer slowly holds no more
	// of the node's webhookConcurrency. Another of their deliveries waits
	// up to webhookOwnerWait for one of those to end (deliveries to a
	// receiver that answers at once follow each other), then goes back to
	// the queue for a second, without counting an attempt.
	webhookOwnerConcurrency = 8
	webhookOwnerWait        = 100 * time.Millisecond
	webhookOwnerSnooze      = time.Second
	// webhookHeaderMax bounds a receiver's answer headers.
	webhookHeaderMax = 64 << 10
)

// hookOwners bounds each user's deliveries working on the node. It owns
// its state; the zero value is ready.
type hookOwners struct {
	mu   sync.Mutex // guards sems
	sems map[string]*ownerSem
}

// ownerSem is one user's slots, and how many deliveries hold or wait for
// one (it goes when none does).
type ownerSem struct {
	slots chan struct{}
	refs  int
}

// take waits up to wait (or until ctx ends) for one of owner's
// webhookOwnerConcurrency slots, and reports whether it got one; give
// returns it.
func (h *hookOwners) take(ctx context.Context, owner string, wait time.Duration) bool {
	h.mu.Lock()
	if h.sems == nil {
		h.sems = map[string]*ownerSem{}
	}
	s := h.sems[owner]
	if s == nil {
		s = &ownerSem{slots: make(chan struct{}, webhookOwnerConcurrency)}
		h.sems[owner] = s
	}
	s.refs++
	h.mu.Unlock()
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	h.release(owner, s)
	return false
}

func (h *hookOwners) give(owner string) {
	h.mu.Lock()
	s := h.sems[owner]
	h.mu.Unlock()
	<-s.slots
	h.release(owner, s)
}

func (h *hookOwners) release(owner string, s *ownerSem) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(h.sems, owner)
	}
}

// startWebhooks starts the node's webhook Runtime, until ctx ends or
// stopWebhooks.
func (n *Node) startWebhooks(ctx context.Context, cfg Config) error {
	rt, err := n.store.NewWebhookRuntime(fdbjobs.WorkFunc[replicator.WebhookDelivery](n.workWebhook),
		fdbjobs.WorkerOptions{Concurrency: webhookConcurrency, Timeout: cfg.JobTimeout,
			RetainCompleted: webhookRetain, RetainCancelled: webhookRetain, RetainDiscarded: webhookRetain,
			OnRemove: n.store.Webhooks().RemovedDeliveries},
		fdbjobs.RuntimeOptions{FetchPoll: cfg.acceptWaitMax(), SweepPeriod: cfg.Interval})
	if err != nil {
		return err
	}
	if err := rt.Start(ctx); err != nil {
		return err
	}
	n.webhooks.Store(rt)
	return nil
}

// stopWebhooks stops the webhook Runtime: a delivery it worked goes back,
// for another node.
func (n *Node) stopWebhooks() {
	if rt := n.webhooks.Swap(nil); rt != nil {
		rt.StopAndCancel()
	}
	n.webhookClient().CloseIdleConnections() // their readers go too (through hookOnce: no race with a delivery)
}

// workWebhook delivers the changes queued for its job's webhook and
// replication, oldest first, and ends the job once none is left. An error
// (the receiver's, or the store's) ends the attempt: the job layer tries
// again later, from the same change.
func (n *Node) workWebhook(ctx context.Context, w *fdbjobs.Work[replicator.WebhookDelivery]) error {
	if !n.hookOwners.take(ctx, w.Args.Owner, webhookOwnerWait) {
		return fdbjobs.Snooze(webhookOwnerSnooze)
	}
	defer n.hookOwners.give(w.Args.Owner)
	hooks := n.store.Webhooks()
	h, health, c, err := hooks.Next(ctx, w.Args)
	drop := false // the changes of a replication no longer the owner's to hear
	if err == nil && h != nil && (h.All && (*n.nonAdmins.Load())[h.Owner] || h.Demoted != 0) {
		if drop, err = n.othersReplication(ctx, h, w.Args.JobID); err != nil {
			return err
		}
	}
	for {
		if err != nil {
			return err
		}
		if h == nil || c == nil {
			ended, err := kv.Transact(ctx, n.store, func(tr kv.Transaction) (bool, error) {
				return hooks.EndDelivery(tr, w.Args, func(tr kv.Transaction) error { return w.CompleteTx(ctx, tr) })
			})
			if err != nil || ended {
				return err
			}
			h, health, c, err = hooks.Next(ctx, w.Args) // a change came meanwhile
			continue
		}
		if drop {
			h, health, c, err = hooks.Ack(ctx, w.Args, c, true)
			continue
		}
		now := n.Config().Clock.Now()
		if until := time.UnixMilli(health.Until); now.Before(until) {
			return fdbjobs.Snooze(until.Sub(now)) // its receiver rests after a failure
		}
		if err := n.deliver(ctx, h, c); err != nil {
			if ctx.Err() != nil {
				return err // stopped, not the receiver's failure
			}
			if _, ferr := hooks.Failed(ctx, w.Args, err.Error(), now); ferr != nil {
				return errors.Join(err, ferr)
			}
			return err
		}
		h, health, c, err = hooks.Ack(ctx, w.Args, c, health.Failures == 0)
	}
}

// othersReplication reports whether replication jobID is not h's owner's
// (or is gone: no one's to hear), for h a server admin's webhook whose
// owner is no longer one, which it first makes hear only its owner's
// replications (Webhooks.Demote), or one demoted before.
func (n *Node) othersReplication(ctx context.Context, h *replicator.Webhook, jobID string) (bool, error) {
	if h.All {
		if err := n.store.Webhooks().Demote(ctx, h.Owner, h.ID); err != nil {
			return false, err
		}
		n.Config().Logger.Info().Str("webhook", h.ID).Str("owner", h.Owner).
			Msg("webhooks: the owner is no longer a server admin; the webhook hears only their replications")
	}
	jd, _, err := n.store.Job(ctx, nil, jobID)
	if err != nil {
		return false, err
	}
	return jd == nil || jd.Owner() != h.Owner, nil
}

// deliver posts change c to h's receiver and returns nil once it answered
// 2xx.
func (n *Node) deliver(ctx context.Context, h *replicator.Webhook, c *replicator.WebhookChange) error {
	cfg := n.Config()
	u, err := url.Parse(h.URL)
	if err != nil || !slices.Contains(cfg.Protocols.Endpoints(), u.Scheme) {
		return fmt.Errorf("webhook %s: its url's scheme is not one of valid_endpoint_protocols", h.ID)
	}
	secret, err := replicator.WebhookSecret(cfg.Opener, h)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", h.ID, err)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(c.Body)
	ctx, cancel := context.WithTimeout(ctx, WebhookTimeoutDefault)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(c.Body))
	if err != nil {
		return fmt.Errorf("webhook %s: %w", h.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(replicator.WebhookSignatureHeader, "sha256="+hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set(replicator.WebhookDeliveryHeader, c.DeliveryID())
	req.Header.Set(replicator.WebhookHeader, h.ID)
	// A pooled connection was checked when it was dialled: check its
	// address again against the rules as they are now.
	policy := replicator.WebhookAddresses(cfg.Addresses)
	ctx, refuse := context.WithCancelCause(ctx)
	defer refuse(nil)
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			return
		}
		if a, err := netip.ParseAddrPort(info.Conn.RemoteAddr().String()); err != nil {
			refuse(err)
		} else if err := policy.Check(a); err != nil {
			refuse(err)
		}
	}}))
	resp, err := n.webhookClient().Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			err = cause
		}
		return fmt.Errorf("webhook %s: %w", h.ID, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, webhookAnswerMax)) // to reuse the connection
	if resp.StatusCode/100 != 2 {
		// Its status only: a receiver's body is not for the webhook's
		// owner to read (the URL may be a service they could not reach).
		return fmt.Errorf("webhook %s: the receiver answered %s", h.ID, resp.Status)
	}
	return nil
}

// webhookClient is the HTTP client of deliveries under the node's
// address policy for webhooks (replicator.WebhookAddresses of its config's
// Addresses at each connect); it follows no redirect.
func (n *Node) webhookClient() *http.Client {
	n.hookOnce.Do(func() {
		control := func(network, address string, c syscall.RawConn) error {
			return replicator.WebhookAddresses(n.Config().Addresses).Control()(network, address, c)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil // the receiver's address is the one checked
		tr.DialContext = (&net.Dialer{Timeout: WebhookTimeoutDefault, Control: control}).DialContext
		tr.MaxIdleConnsPerHost = webhookConcurrency
		tr.MaxResponseHeaderBytes = webhookHeaderMax
		n.hookClient = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	})
	return n.hookClient
}
