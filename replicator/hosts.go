package replicator

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
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
