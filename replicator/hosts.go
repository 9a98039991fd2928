package replicator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/fdbrep/fdbrep/fdbjobs"
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
// scheme, host name (lower case) and port (the scheme's default when the
// URL has none), as "https://db.example.com:443"; "" for a URL without a
// host. One longer than a job layer partition allows is named by its hash.
func HostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	h := scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
	if len(h) > fdbjobs.PartitionMaxBytes {
		sum := sha256.Sum256([]byte(h))
		h = "sha256:" + hex.EncodeToString(sum[:16])
	}
	return h
}

// BudgetHosts are the hosts a replication's budget counts it against: its
// source's and its target's (one, when both are on the same host), sorted.
func BudgetHosts(s *Spec) []string {
	if s == nil {
		return nil
	}
	var hs []string
	for _, e := range []EndpointSpec{s.Source, s.Target} {
		if h := HostOf(e.URL); h != "" && !slices.Contains(hs, h) {
			hs = append(hs, h)
		}
	}
	slices.Sort(hs)
	return hs
}

// ClaimHosts takes, in tr (the start's transaction), a place for job jobID
// in each of hosts' budgets of limit running replications: all of them, or
// none and the host whose budget is full (the job then waits in its queue
// of the job layer, woken as a replication of the host leaves its place).
func (s *Store) ClaimHosts(tr kv.Transaction, jobID string, hosts []string, limit int) (full string, err error) {
	return s.jobs.ClaimPlaces(tr, JobType, jobID, hosts, limit)
}

func (s *Store) hostHeldKey(host string) kv.Key {
	return s.root.Pack(tuple.Tuple{keyHostHeld, host})
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
