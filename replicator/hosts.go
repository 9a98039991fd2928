package replicator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/clockwait"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Budgets per endpoint host (see doc.go, "Budgets per host"): at most
// [replicator] max_jobs_per_host replications with an endpoint on one host
// run at once in the whole cluster, each holding a place in its hosts'
// partitions of the job layer (fdbjobs ClaimPlaces) while it runs.

// StallBudget is the stall the views show of a job held back by a host's
// budget (JobData.HeldHost): set from its data, never by a run.
const StallBudget = "budget"

// HostOf is the host an endpoint URL's budget counts it against: its
// scheme, host name (lower case, without a final dot; an IP address in
// its canonical form, an IPv4-mapped IPv6 address as IPv4) and port (the
// scheme's default when the URL has none; leading zeros dropped), as
// "https://db.example.com:443"; "" for a URL without a host. One longer
// than a job layer partition allows is named by its hash. Names are not
// resolved: two names of one server count apart.
func HostOf(rawURL string) string { return budgetPart(rawURL, "") }

// HostUserOf is the host and user an endpoint's budget per host and user
// counts it against: HostOf with the user name it logs in with (its
// username, or its token's client id) before the host, as
// "https://alice@db.example.com:443"; "" for an endpoint without one (an
// IAM API key, no credentials).
func HostUserOf(e EndpointSpec) string {
	user := e.Username
	if user == "" && e.Token != nil {
		user = e.Token.ClientID
	}
	if user == "" {
		return ""
	}
	return budgetPart(e.URL, user)
}

// budgetPart is HostOf, with user before the host when not "".
func budgetPart(rawURL, user string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	} else if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(n, 10) // "026984" is 26984
	}
	name := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".") // "h." is h
	if a, err := netip.ParseAddr(name); err == nil {
		name = a.Unmap().WithZone("").String() // ::ffff:7f00:1 is 127.0.0.1
	}
	h := scheme + "://"
	if user != "" {
		h += url.QueryEscape(user) + "@"
	}
	h += net.JoinHostPort(name, port)
	if len(h) > fdbjobs.PartitionMaxBytes {
		sum := sha256.Sum256([]byte(h))
		h = "sha256:" + hex.EncodeToString(sum[:16])
		if user != "" {
			h = "user-" + h // not to be taken for a host's
		}
	}
	return h
}

// IsHostUser reports whether a budget's partition is a host and user's
// (HostUserOf), not a host's.
func IsHostUser(part string) bool {
	return strings.HasPrefix(part, "user-") || strings.Contains(part, "@")
}

// Budgets are a node's budgets of running replications per endpoint host,
// and per host and user (0: none).
type Budgets struct {
	PerHost, PerHostUser int
}

// On reports whether b has a budget.
func (b Budgets) On() bool { return b.PerHost > 0 || b.PerHostUser > 0 }

// LimitOf is b's limit of a budget's partition: PerHost, or PerHostUser
// for a host and user's.
func (b Budgets) LimitOf(part string) int {
	if IsHostUser(part) {
		return b.PerHostUser
	}
	return b.PerHost
}

// BudgetGroups are the budgets' partitions a replication counts in: its
// source's and target's hosts (one, when both are on the same host) and
// hosts and users, sorted.
func BudgetGroups(s *Spec) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, e := range []EndpointSpec{s.Source, s.Target} {
		for _, g := range []string{HostOf(e.URL), HostUserOf(e)} {
			if g != "" && !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Places are the places a replication takes under b: one in each of its
// BudgetGroups that b limits.
func (b Budgets) Places(s *Spec) []fdbjobs.Place {
	var out []fdbjobs.Place
	for _, g := range BudgetGroups(s) {
		if lim := b.LimitOf(g); lim > 0 {
			out = append(out, fdbjobs.Place{Partition: g, Limit: lim})
		}
	}
	return out
}

// ClaimHosts takes, in tr (the start's transaction), the places for job
// jobID: all of them, or none and the partition whose budget is full (the
// job then waits in its queue of the job layer, woken as a replication of
// that partition leaves its place).
func (s *Store) ClaimHosts(tr kv.Transaction, jobID string, places []fdbjobs.Place) (full string, err error) {
	return s.jobs.ClaimPlaces(tr, JobType, jobID, places)
}

// Partitions are places' partitions.
func Partitions(places []fdbjobs.Place) []string {
	out := make([]string, len(places))
	for i, p := range places {
		out[i] = p.Partition
	}
	return out
}

func (s *Store) hostHeldKey(host string) kv.Key {
	return s.k.root.Pack(tuple.Tuple{keyHostHeld, host})
}

// countHostHeld adds one to host's count of jobs held back by its budget
// (35), in tr: an atomic add, which conflicts with nothing.
func (s *Store) countHostHeld(tr kv.Transaction, host string) {
	tr.Add(s.hostHeldKey(host), kv.Int64(1))
}

// HostsHeld returns the count of jobs held back by the budget of each of
// hosts so far (35), in one snapshot read: a node compares it with its
// last reading to learn which hosts' jobs wait for a turn.
func (s *Store) HostsHeld(ctx context.Context, hosts []string) (map[string]int64, error) {
	out := make(map[string]int64, len(hosts))
	if len(hosts) == 0 {
		return out, nil
	}
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (map[string]int64, error) {
		keys := make([]kv.Key, len(hosts))
		for i, h := range hosts {
			keys[i] = s.hostHeldKey(h)
		}
		ns, err := readCounters(tr.Snapshot(), keys)
		if err != nil {
			return nil, err
		}
		for i, h := range hosts {
			out[h] = ns[i]
		}
		return out, nil
	})
}

// RequestsKind names the job layer's token buckets of the budgets of
// requests per second per host, and per host and user (fdbjobs
// TakeTokens): one per host, and one per host and user.
const RequestsKind = "rep_requests"

// pacerChunk is the share of a second's worth of a host's requests a node
// takes from its bucket at once: a tenth, so that a node makes at most
// about ten takes a second per host it sends requests to.
const pacerChunk = 0.1

// pacerTakeTimeout bounds a take of tokens from the store.
const pacerTakeTimeout = 2 * time.Second

// pacerKeep is how long a node spends tokens it took before they lapse
// (it gives none back).
const pacerKeep = time.Second

// HostPacer paces a node's requests to each endpoint host within the
// cluster-wide budgets of requests per second per host ([replicator]
// max_requests_per_host_per_sec) and per host and user
// (max_requests_per_host_user_per_sec): each host's budget, and each host
// and user's, is a token bucket of the job layer (fdbjobs TakeTokens,
// RequestsKind, partitions HostOf and HostUserOf's), from which the node
// takes a tenth of a second's worth at a time and spends it on its runs'
// requests (engine.Options.Pace) within a second; a request goes once it
// has a token of each. A take that fails (the store does not answer within
// pacerTakeTimeout) lets its request go 1/rate later: the node paces its
// own requests alone meanwhile. Safe for concurrent use.
type HostPacer struct {
	jobs  *fdbjobs.Client
	clock clockwork.Clock
	log   *zerolog.Logger
	m     *Metrics // MetricBudgetRequestWaits; nil: none

	mu       sync.Mutex // guards rate, userRate and buckets
	rate     float64    // per host; 0: no budget
	userRate float64    // per host and user; 0: no budget
	buckets  map[bucketKey]*hostTokens
}

// bucketKey names the tokens a node holds: a host's (user ""), or a host
// and user's.
type bucketKey struct{ host, user string }

// hostTokens are the tokens a node holds of one bucket.
type hostTokens struct {
	part string     // the bucket's partition: HostOf the host, or its host and user's
	take sync.Mutex // one take from the store at a time
	mu   sync.Mutex // guards n and until
	n    int
	// until is when the tokens held lapse.
	until time.Time
}

// pacerBucketsMax bounds the buckets a node remembers: past it, it forgets
// those whose tokens lapsed.
const pacerBucketsMax = 4096

// NewHostPacer returns a pacer with no budget (SetRates sets them) that
// takes tokens through s's job layer Client and counts the requests that
// wait in m (nil: nowhere).
func NewHostPacer(s *Store, clock clockwork.Clock, log *zerolog.Logger, m *Metrics) *HostPacer {
	return &HostPacer{jobs: s.jobs, clock: clock, log: log, m: m, buckets: map[bucketKey]*hostTokens{}}
}

// SetRates sets the budgets of requests per second per host and per host
// and user; 0 removes one.
func (p *HostPacer) SetRates(perHost, perHostUser float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rate, p.userRate = perHost, perHostUser
}

// Wait waits until a request of the node to host (a couch.Options.Pace
// host: scheme and host), logging in as user ("" for none: the user name,
// or a token's client id), fits the host's budget and the host and user's,
// or ctx ends.
func (p *HostPacer) Wait(ctx context.Context, host, user string) error {
	p.mu.Lock()
	rate, userRate := p.rate, p.userRate
	var h, hu *hostTokens
	if rate > 0 {
		h = p.bucket(bucketKey{host, ""})
	}
	if userRate > 0 && user != "" {
		hu = p.bucket(bucketKey{host, user})
	}
	p.mu.Unlock()
	if h != nil && h.part != "" {
		if err := p.wait(ctx, h, rate); err != nil {
			return err
		}
	}
	if hu != nil && hu.part != "" {
		return p.wait(ctx, hu, userRate)
	}
	return nil
}

// bucket returns the tokens of k, made when new. p.mu is held.
func (p *HostPacer) bucket(k bucketKey) *hostTokens {
	if h := p.buckets[k]; h != nil {
		return h
	}
	if len(p.buckets) >= pacerBucketsMax { // bound memory: forget the buckets whose tokens lapsed
		now := p.clock.Now()
		for key, o := range p.buckets {
			o.mu.Lock()
			if now.After(o.until) {
				delete(p.buckets, key)
			}
			o.mu.Unlock()
		}
	}
	h := &hostTokens{part: HostOf(k.host)}
	if k.user != "" {
		h.part = budgetPart(k.host, k.user)
	}
	p.buckets[k] = h
	return h
}

// wait waits for a token of h, whose bucket fills at rate, or ctx's end.
func (p *HostPacer) wait(ctx context.Context, h *hostTokens, rate float64) error {
	for waited := false; ; {
		if h.spend(p.clock.Now()) {
			return nil
		}
		h.take.Lock()
		if h.spend(p.clock.Now()) { // another caller's take came meanwhile
			h.take.Unlock()
			return nil
		}
		chunk := max(1, int(math.Ceil(rate*pacerChunk)))
		tctx, cancel := context.WithTimeout(ctx, pacerTakeTimeout)
		n, next, err := p.jobs.TakeTokens(tctx, nil, RequestsKind, h.part, rate, chunk)
		cancel()
		now := p.clock.Now()
		switch {
		case err != nil && ctx.Err() != nil:
			h.take.Unlock()
			return ctx.Err()
		case err != nil:
			// The store does not answer: this request goes after 1/rate,
			// the other callers waiting their turns behind it.
			p.log.Warn().Err(err).Str("budget", h.part).Msg("replicator: budget of requests per host: taking tokens; pacing this node alone meanwhile")
			if !waited && p.m != nil {
				p.m.Inc(MetricBudgetRequestWaits)
			}
			err = clockwait.Sleep(ctx, p.clock, time.Duration(float64(time.Second)/rate))
			h.take.Unlock()
			return err
		case n > 0:
			h.hold(n-1, now.Add(pacerKeep))
			h.take.Unlock()
			return nil
		}
		h.take.Unlock()
		if !waited && p.m != nil {
			p.m.Inc(MetricBudgetRequestWaits)
		}
		waited = true
		if err := clockwait.Sleep(ctx, p.clock, next.Sub(now)); err != nil {
			return err
		}
	}
}

// spend takes one of the tokens held, if any lives at now.
func (h *hostTokens) spend(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n > 0 && !now.After(h.until) {
		h.n--
		return true
	}
	return false
}

// hold sets the tokens held to n, lapsing at until.
func (h *hostTokens) hold(n int, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n, h.until = n, until
}
