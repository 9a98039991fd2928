package control

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
)

// Webhooks (PUT, GET, DELETE /_scheduler/webhooks/{id}; see
// replicator/webhooks.go): any user but the anonymous one keeps their own,
// by id; a server admin's hears every replication's changes, another
// user's the replications they own.

// webhookDeliveriesMax is the most deliveries GET of one webhook shows.
const webhookDeliveriesMax = 100

// webhookIDPattern is the form of a webhook's id.
var webhookIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._~-]*$`)

// PutWebhook writes webhook id of viewer from body (api.WebhookSpec, every
// field checked, unknown ones refused: ErrBadRequest naming the field; a
// URL a replication endpoint could not have, or that the address rules of
// webhooks deny, ErrForbidden), replacing one of the same id. Its secret
// is sealed when the plane has a Sealer. One transaction.
func (p *Plane) PutWebhook(ctx context.Context, viewer api.User, id string, body json.RawMessage) (api.WebhookResult, bool, error) {
	owner, admin, err := webhookOwner(viewer)
	if err != nil {
		return api.WebhookResult{}, false, err
	}
	if err := checkWebhookID(id); err != nil {
		return api.WebhookResult{}, false, err
	}
	spec, err := parseWebhookSpec(body)
	if err != nil {
		return api.WebhookResult{}, false, err
	}
	if err := p.checkWebhookURL(ctx, spec.URL); err != nil {
		return api.WebhookResult{}, false, err
	}
	h := &replicator.Webhook{ID: id, Owner: owner, All: admin, URL: spec.URL, Events: spec.Events,
		Database: spec.Database, DocID: spec.DocID, Secret: spec.Secret, Created: p.cfg.Clock.Now().UnixMilli()}
	if err := replicator.SealWebhookSecret(p.cfg.Sealer, h); err != nil {
		return api.WebhookResult{}, false, err
	}
	if _, err := p.setup(ctx); err != nil {
		return api.WebhookResult{}, false, err
	}
	// created survives the retry loop: an attempt that wrote a new
	// webhook and committed, though told otherwise, leaves the retry
	// finding it as written.
	created := false
	_, err = kv.Transact(ctx, p.store, func(tr kv.Transaction) (struct{}, error) {
		c, same, err := p.store.Webhooks().Put(ctx, tr, h)
		if err == nil && !same {
			created = c
		}
		return struct{}{}, err
	})
	if err != nil {
		return api.WebhookResult{}, false, err
	}
	return api.WebhookResult{OK: true, ID: id}, created, nil
}

// Webhook returns webhook id of viewer (of user, for a server admin who
// names one) with its deliveries, or ErrNotFound.
func (p *Plane) Webhook(ctx context.Context, viewer api.User, user, id string) (api.Webhook, error) {
	owner, err := webhooksOf(viewer, user)
	if err != nil {
		return api.Webhook{}, err
	}
	h, err := kv.ReadTransact(ctx, p.store, func(tr kv.ReadTransaction) (*replicator.Webhook, error) {
		return p.store.Webhooks().Get(ctx, tr, owner, id)
	})
	if err != nil {
		return api.Webhook{}, err
	}
	ds, err := p.store.Webhooks().Deliveries(ctx, owner, id, webhookDeliveriesMax)
	if err != nil {
		return api.Webhook{}, err
	}
	hl, err := p.store.Webhooks().Health(ctx, owner, id)
	if err != nil {
		return api.Webhook{}, err
	}
	out := webhookView(h)
	if hl.Failures > 0 {
		out.Failures, out.LastError = hl.Failures, hl.LastError
		out.RestingUntil = time.UnixMilli(hl.Until).UTC().Format(time.RFC3339Nano)
	}
	for _, d := range ds {
		out.Deliveries = append(out.Deliveries, deliveryView(d))
	}
	return out, nil
}

// Webhooks lists viewer's webhooks (user's, for a server admin who names
// one), by id.
func (p *Plane) Webhooks(ctx context.Context, viewer api.User, user string) (api.WebhookList, error) {
	owner, err := webhooksOf(viewer, user)
	if err != nil {
		return api.WebhookList{}, err
	}
	hs, err := kv.ReadTransact(ctx, p.store, func(tr kv.ReadTransaction) ([]replicator.Webhook, error) {
		return p.store.Webhooks().List(ctx, tr, owner)
	})
	if err != nil {
		return api.WebhookList{}, err
	}
	out := api.WebhookList{Webhooks: make([]api.Webhook, 0, len(hs))}
	for i := range hs {
		out.Webhooks = append(out.Webhooks, webhookView(&hs[i]))
	}
	return out, nil
}

// DeleteWebhook removes webhook id of viewer (of user, for a server admin
// who names one), with the changes queued for it (ErrNotFound when it does
// not exist).
func (p *Plane) DeleteWebhook(ctx context.Context, viewer api.User, user, id string) (api.WebhookResult, error) {
	owner, err := webhooksOf(viewer, user)
	if err != nil {
		return api.WebhookResult{}, err
	}
	// found survives the retry loop: an attempt that removed the webhook
	// and committed, though told otherwise, leaves the retry finding none.
	found := false
	_, err = kv.Transact(ctx, p.store, func(tr kv.Transaction) (struct{}, error) {
		ok, err := p.store.Webhooks().Delete(ctx, tr, owner, id)
		found = found || ok
		return struct{}{}, err
	})
	if err != nil {
		return api.WebhookResult{}, err
	}
	if !found {
		return api.WebhookResult{}, replicator.NewReason(replicator.ErrNotFound, "missing")
	}
	return api.WebhookResult{OK: true, ID: id}, nil
}

// webhookOwner is whose webhooks viewer keeps, and whether they hear
// every replication (a server admin's); the anonymous user has none.
func webhookOwner(viewer api.User) (string, bool, error) {
	if viewer.Name == "" {
		return "", false, replicator.NewReason(replicator.ErrUnauthorized, "You are not authorized: log in to keep webhooks.")
	}
	return viewer.Name, viewer.IsAdmin(), nil
}

// webhooksOf is whose webhooks viewer reads or removes: user's when named
// (a server admin may name anyone, another user only themselves:
// ErrForbidden), else their own.
func webhooksOf(viewer api.User, user string) (string, error) {
	owner, _, err := webhookOwner(viewer)
	switch {
	case err != nil:
		return "", err
	case user == "" || user == owner:
		return owner, nil
	case !viewer.IsAdmin():
		return "", replicator.NewReason(replicator.ErrForbidden, "only server admins read or remove other users' webhooks")
	}
	return user, nil
}

func checkWebhookID(id string) error {
	if len(id) > replicator.WebhookIDMax || !webhookIDPattern.MatchString(id) {
		return replicator.NewReason(replicator.ErrBadRequest,
			"webhook id %q: 1 to %d letters, digits, '.', '_', '~' or '-', starting with a letter or digit", id, replicator.WebhookIDMax)
	}
	return nil
}

// parseWebhookSpec reads and checks a PUT body.
func parseWebhookSpec(body json.RawMessage) (api.WebhookSpec, error) {
	bad := func(format string, a ...any) (api.WebhookSpec, error) {
		return api.WebhookSpec{}, replicator.NewReason(replicator.ErrBadRequest, format, a...)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return bad("the body must be a JSON object: {\"url\": …, \"secret\": …, \"events\": […]}")
	}
	for k := range raw {
		if !slices.Contains([]string{"url", "events", "database", "doc_id", "secret"}, k) {
			return bad("unknown field `%s`: a webhook has url, secret, events, database and doc_id", k)
		}
	}
	var spec api.WebhookSpec
	str := func(name string, dst *string, max int) error {
		v, ok := raw[name]
		if !ok {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return replicator.NewReason(replicator.ErrBadRequest, "`%s` must be a string", name)
		}
		if len(*dst) > max {
			return replicator.NewReason(replicator.ErrBadRequest, "`%s` of %d bytes: at most %d", name, len(*dst), max)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		dst  *string
		max  int
	}{{"url", &spec.URL, replicator.WebhookURLMax}, {"secret", &spec.Secret, replicator.WebhookSecretMax},
		{"database", &spec.Database, fdbjobs.MaxNameSize}, {"doc_id", &spec.DocID, fdbjobs.MaxNameSize}} {
		if err := str(f.name, f.dst, f.max); err != nil {
			return api.WebhookSpec{}, err
		}
	}
	switch {
	case spec.URL == "":
		return bad("`url` is required: where the changes are posted")
	case len(spec.Secret) < replicator.WebhookSecretMin:
		return bad("`secret` is required, at least %d bytes: each delivery is signed with it (%s)",
			replicator.WebhookSecretMin, replicator.WebhookSignatureHeader)
	case spec.Secret == replicator.Redacted:
		return bad("`secret` is %s, what reads show: give the secret itself", replicator.Redacted)
	}
	if v, ok := raw["events"]; ok {
		if err := json.Unmarshal(v, &spec.Events); err != nil || spec.Events == nil {
			return bad("`events` must be an array of states")
		}
		known := append(replicator.ViewStates(), replicator.StateRemoved)
		for i, e := range spec.Events {
			spec.Events[i] = strings.ToLower(e)
			if !slices.Contains(known, spec.Events[i]) {
				return bad("`events`: unknown state %q; choose from %s", e, strings.Join(known, ", "))
			}
		}
		slices.Sort(spec.Events)
		spec.Events = slices.Compact(spec.Events)
	}
	return spec, nil
}

// checkWebhookURL refuses a URL that is not absolute http(s) with a
// scheme valid_endpoint_protocols allows, or whose host the address rules
// of webhooks deny (replicator.WebhookAddresses), its name resolved now.
func (p *Plane) checkWebhookURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" || strings.ContainsFunc(raw, unicode.IsSpace) {
		return replicator.NewReason(replicator.ErrBadRequest, "`url`: an absolute http or https URL without credentials, fragment or spaces")
	}
	allowed := p.conf().Protocols.Endpoints()
	if !slices.Contains(allowed, u.Scheme) {
		return replicator.NewReason(replicator.ErrForbidden, "`url`: its scheme %q is not one of valid_endpoint_protocols (%s)",
			u.Scheme, strings.Join(allowed, ", "))
	}
	if err := replicator.WebhookAddresses(p.cfg.Addresses).CheckURL(ctx, u, true); err != nil {
		return replicator.NewReason(replicator.ErrForbidden, "`url`: %s", strings.TrimPrefix(err.Error(), "couch: "))
	}
	return nil
}

func webhookView(h *replicator.Webhook) api.Webhook {
	return api.Webhook{ID: h.ID, URL: h.URL, Events: append([]string{}, h.Events...), Database: h.Database, DocID: h.DocID,
		Secret: replicator.Redacted, AllReplications: h.All, Created: time.UnixMilli(h.Created).UTC().Format(time.RFC3339)}
}

func deliveryView(d replicator.DeliveryInfo) api.WebhookDelivery {
	out := api.WebhookDelivery{JobID: d.JobID, State: d.Job.State, Attempt: d.Job.Attempt,
		MaxAttempts: cmp.Or(d.Job.MaxAttempts, fdbjobs.MaxAttemptsDefault), Queued: d.Queued, Dropped: d.Dropped}
	switch d.Job.State {
	case fdbjobs.StateAvailable, fdbjobs.StateScheduled:
		out.State = fdbjobs.StatePending
	case fdbjobs.StateRetrying:
		out.NextAttempt = d.Job.ScheduledAt.UTC().Format(time.RFC3339)
	}
	for _, e := range d.Job.Errors {
		out.Errors = append(out.Errors, api.WebhookError{Attempt: e.Attempt, At: e.At.UTC().Format(time.RFC3339), Error: e.Error})
	}
	return out
}
