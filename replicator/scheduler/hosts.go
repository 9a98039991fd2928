package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/replicator"
)

// probeTimeout bounds one probe of a host (Engine.Probe).
const probeTimeout = 10 * time.Second

// hostProber is the node's part that knows the hosts its jobs crashed on
// without an answer (engine.UnreachableHost): for each host's base URL,
// the jobs that wait out a backoff because of it, and whether a probe
// runs. It owns its state (its own mutex); the zero value is ready.
type hostProber struct {
	mu      sync.Mutex // guards hosts and probing
	hosts   map[string]map[string]bool
	probing bool // a probeHosts goroutine runs
}

// watch remembers that job crashed because host did not answer.
func (p *hostProber) watch(host, jobID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hosts == nil {
		p.hosts = map[string]map[string]bool{}
	}
	if p.hosts[host] == nil {
		p.hosts[host] = map[string]bool{}
	}
	p.hosts[host][jobID] = true
}

// forget drops job from host's watch.
func (p *hostProber) forget(host, jobID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.hosts[host], jobID)
	if len(p.hosts[host]) == 0 {
		delete(p.hosts, host)
	}
}

// begin returns the watched hosts with their jobs (sorted) and marks a
// probe running, or nil when one runs or nothing is watched.
func (p *hostProber) begin() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probing || len(p.hosts) == 0 {
		return nil
	}
	p.probing = true
	hosts := make(map[string][]string, len(p.hosts))
	for h, jobs := range p.hosts {
		for id := range jobs {
			hosts[h] = append(hosts[h], id)
		}
		slices.Sort(hosts[h])
	}
	return hosts
}

// end marks the probe that begin started done.
func (p *hostProber) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probing = false
}

// watchHost remembers that job crashed because host did not answer.
func (n *Node) watchHost(host, jobID string) { n.hosts.watch(host, jobID) }

// probeHosts asks each watched host, in a goroutine of its own (one at a
// time), whether it answers again (see doc.go, "Hosts that answer
// again"); for each that does, its jobs' backoffs end at once
// (Store.EndBackoff), and they run within the next interval, as fair
// share allows. A job no longer crashing is forgotten; one whose backoff
// could not be ended (a store error) is tried again at the next interval.
// Called from the interval loop.
func (n *Node) probeHosts() {
	hosts := n.hosts.begin()
	if hosts == nil {
		return
	}
	probe := func(ctx context.Context) {
		defer n.hosts.end()
		for host, ids := range hosts {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			err := n.eng.Probe(pctx, host)
			cancel()
			if err != nil || ctx.Err() != nil {
				continue
			}
			n.retryHost(ctx, host, ids)
		}
	}
	if !n.spawn(probe) { // stopping
		n.hosts.end()
	}
}

// retryHost ends the backoff of the jobs ids that crashed on host, which
// answers again.
func (n *Node) retryHost(ctx context.Context, host string, ids []string) {
	cfg := n.Config()
	for _, id := range ids {
		d, err := n.store.EndBackoff(ctx, id, cfg.Clock.Now(), nil)
		switch {
		case err == nil:
			n.hosts.forget(host, id)
			cfg.Logger.Info().Str("job_id", id).Str("rep_id", d.RepID).Str("db", d.DBName).Str("doc_id", d.DocID).
				Str("host", host).Int("error_count", d.ErrorCount).Msg("replication retried: its host answers again")
		case errors.Is(err, replicator.ErrConflict) || errors.Is(err, replicator.ErrNotFound):
			n.hosts.forget(host, id) // running, done or gone: nothing to retry
		case ctx.Err() == nil:
			cfg.Logger.Warn().Err(err).Str("job_id", id).Str("host", host).Msg("replicator: ending a backoff; again at the next interval")
		}
	}
}
