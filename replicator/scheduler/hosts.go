package scheduler

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/fdbrep/fdbrep/replicator"
)

// probeTimeout bounds one probe of a host (Engine.Probe).
const probeTimeout = 10 * time.Second

// hostWatch is what the node knows of the hosts its jobs crashed on
// without an answer (engine.UnreachableHost): for each host's base URL,
// the jobs that wait out a backoff because of it. Guarded by Node.mu.
type hostWatch map[string]map[string]bool

// watchHost remembers that job crashed because host did not answer.
func (n *Node) watchHost(host, jobID string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosts == nil {
		n.hosts = hostWatch{}
	}
	if n.hosts[host] == nil {
		n.hosts[host] = map[string]bool{}
	}
	n.hosts[host][jobID] = true
}

// probeHosts asks each watched host, in a goroutine of its own (one at a
// time), whether it answers again (see doc.go, "Hosts that answer
// again"); for each that does, its jobs' backoffs end at once
// (Store.EndBackoff), and they run within the next interval, as fair
// share allows. A job no longer crashing is forgotten; one whose backoff
// could not be ended (a store error) is tried again at the next interval.
// Called from the interval loop.
func (n *Node) probeHosts(ctx context.Context) {
	n.mu.Lock()
	if n.probing || len(n.hosts) == 0 || n.stopping {
		n.mu.Unlock()
		return
	}
	n.probing = true
	hosts := make(map[string][]string, len(n.hosts))
	for h, jobs := range n.hosts {
		for id := range jobs {
			hosts[h] = append(hosts[h], id)
		}
		slices.Sort(hosts[h])
	}
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		defer func() {
			n.mu.Lock()
			n.probing = false
			n.mu.Unlock()
		}()
		for host, ids := range hosts {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			err := n.eng.Probe(pctx, host)
			cancel()
			if err != nil || ctx.Err() != nil {
				continue
			}
			n.retryHost(ctx, host, ids)
		}
	}()
}

// retryHost ends the backoff of the jobs ids that crashed on host, which
// answers again.
func (n *Node) retryHost(ctx context.Context, host string, ids []string) {
	cfg := n.Config()
	for _, id := range ids {
		d, err := n.store.EndBackoff(ctx, id, cfg.Clock.Now(), nil)
		switch {
		case err == nil:
			n.forgetHost(host, id)
			cfg.Logger.Info().Str("job_id", id).Str("rep_id", d.RepID).Str("db", d.DBName).Str("doc_id", d.DocID).
				Str("host", host).Int("error_count", d.ErrorCount).Msg("replication retried: its host answers again")
		case errors.Is(err, replicator.ErrConflict) || errors.Is(err, replicator.ErrNotFound):
			n.forgetHost(host, id) // running, done or gone: nothing to retry
		case ctx.Err() == nil:
			cfg.Logger.Warn().Err(err).Str("job_id", id).Str("host", host).Msg("replicator: ending a backoff; again at the next interval")
		}
	}
}

// forgetHost drops job from host's watch.
func (n *Node) forgetHost(host, jobID string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.hosts[host], jobID)
	if len(n.hosts[host]) == 0 {
		delete(n.hosts, host)
	}
}
