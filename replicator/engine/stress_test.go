package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
	"github.com/stretchr/testify/require"
)

// killProxy is a TCP relay in front of a peer that the test can kill (every
// connection reset, new ones refused) or stall (connections accepted, nothing
// forwarded), as a peer killed or frozen during a test's cleanup would be.
type killProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]bool
	stalled bool
	dead    bool
	wg      sync.WaitGroup
}

func newKillProxy(t *testing.T, target string) *killProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &killProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.kill)
	return p
}

func (p *killProxy) addr() string { return p.ln.Addr().String() }

func (p *killProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *killProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.mu.Lock()
		stalled := p.stalled
		p.mu.Unlock()
		if stalled {
			continue // held open, never answered, closed by kill
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(up) {
			c.Close()
			continue
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
	}
}

// stall makes new connections hang; existing ones keep working.
func (p *killProxy) stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// freeze makes the peer hang: open connections are cut and new ones are
// accepted but never answered.
func (p *killProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// kill refuses new connections and resets every open one.
func (p *killProxy) kill() {
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return
	}
	p.dead = true
	p.ln.Close()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// stressAction is one thing the test does to a run or its peers.
type stressAction int

const (
	actKillSource stressAction = iota
	actKillTarget
	actStallSource
	actStallTarget
	actStop          // Stop with a context that never ends
	actStopShort     // Stop with a context that ends soon
	actStopCancelled // Stop with an already cancelled context
	actCancel        // cancel the run's context
	actCount
)

func (a stressAction) String() string {
	return [...]string{"kill-source", "kill-target", "stall-source", "stall-target", "stop", "stop-short",
		"stop-cancelled", "cancel"}[a]
}

// TestStopRaces starts runs against pouchdb-server behind killable relays
// and, at random moments, kills or freezes the peers, stops the run (with
// contexts that never end, end soon or have ended), cancels its context, or
// lets the callbacks call Progress, in random orders. Every run must end:
// with its context cancelled or its Stop context ended at once, otherwise
// within the retry limits. A run that does not end fails the test with a
// goroutine dump. FDBREP_STRESS_ITERATIONS raises the iteration count.
func TestStopRaces(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	if s := os.Getenv("FDBREP_STRESS_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	iterations := 16
	if testing.Short() {
		iterations = 4
	}
	if s := os.Getenv("FDBREP_STRESS_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		iterations = n
	}

	srv := startPeer(t, 600)
	host := srv.URL()[len("http://"):]

	for i := 0; i < iterations; i++ {
		srcProxy, tgtProxy := newKillProxy(t, host), newKillProxy(t, host)
		rep := engine.Replication{
			Source:             endpoint(t, authURL(srv, "http://"+srcProxy.addr()+"/src")),
			Target:             endpoint(t, authURL(srv, "http://"+tgtProxy.addr()+"/tgt"+strconv.Itoa(i))),
			CreateTarget:       true,
			Continuous:         rng.IntN(2) == 0,
			WorkerProcesses:    1 + rng.IntN(4),
			WorkerBatchSize:    10 + rng.IntN(100),
			CheckpointInterval: time.Duration(1+rng.IntN(50)) * time.Millisecond,
			ConnectionTimeout:  time.Second,
			RetriesPerRequest:  1 + rng.IntN(2),
		}
		var actions []stressAction
		for n := 1 + rng.IntN(3); n > 0; n-- {
			actions = append(actions, stressAction(rng.IntN(int(actCount))))
		}
		delay := time.Duration(rng.IntN(400)) * time.Millisecond
		gap := time.Duration(rng.IntN(100)) * time.Millisecond
		name := fmt.Sprintf("%d continuous=%v workers=%d actions=%v delay=%v", i, rep.Continuous,
			rep.WorkerProcesses, actions, delay)

		began := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		var run *engine.Run
		ready := make(chan struct{})
		opts := engine.Options{ServerUUID: testUUID, OnCheckpoint: func(engine.Checkpoint) {
			<-ready
			_ = run.Progress()
		}}
		run = engine.Start(ctx, rep, opts)
		close(ready)

		// Poll Progress throughout, as the job layer's heartbeat does: it
		// must never wait on a checkpoint's requests.
		progressDone := make(chan struct{})
		go func() {
			defer close(progressDone)
			for {
				select {
				case <-run.Done():
					return
				case <-time.After(5 * time.Millisecond):
					_ = run.Progress()
				}
			}
		}()

		time.Sleep(delay)
		var stops sync.WaitGroup
		bounded := false // an action that must end the run at once
		for _, a := range actions {
			switch a {
			case actKillSource:
				srcProxy.kill()
			case actKillTarget:
				tgtProxy.kill()
			case actStallSource:
				srcProxy.stall()
			case actStallTarget:
				tgtProxy.stall()
			case actStop:
				stops.Add(1)
				go func() { defer stops.Done(); _ = run.Stop(context.Background()) }()
			case actStopShort:
				bounded = true
				stops.Add(1)
				go func() {
					defer stops.Done()
					sctx, scancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					defer scancel()
					_ = run.Stop(sctx)
				}()
			case actStopCancelled:
				bounded = true
				sctx, scancel := context.WithCancel(context.Background())
				scancel()
				_ = run.Stop(sctx)
			case actCancel:
				bounded = true
				cancel()
			}
			time.Sleep(gap)
		}
		// Without a bounding action the run ends by itself (a one-shot run
		// completes or fails on a dead peer) or, continuous, by a final
		// cancel; dead and stalled peers are given up on within the retry
		// limits (ConnectionTimeout 1 s, at most 2 retries).
		limit := 90 * time.Second
		if bounded {
			limit = 15 * time.Second
		}
		if !bounded && rep.Continuous {
			// A continuous run with live peers runs until cancelled.
			select {
			case <-run.Done():
			case <-time.After(time.Second):
			}
			cancel()
			limit = 15 * time.Second
		}
		select {
		case <-run.Done():
		case <-time.After(limit):
			buf := make([]byte, 1<<22)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("iteration %s: the run did not end within %v; goroutines:\n%s", name, limit, buf)
		}
		_, err := run.Wait()
		t.Logf("iteration %s: ended after %v: %v", name, time.Since(began).Round(time.Millisecond), err)
		stops.Wait()
		<-progressDone
		cancel()
		srcProxy.kill()
		tgtProxy.kill()
	}
}

// TestFrozenSourceEndsContinuousRun freezes the source of a continuous run
// (connections accepted, never answered): the run must fail by itself with
// ErrChangesFeed once the transport has given up on the changes request,
// rather than reconnect forever (or with ErrCheckpoint, when a checkpoint
// under way times out first).
func TestFrozenSourceEndsContinuousRun(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 20)
	srcProxy := newKillProxy(t, srv.URL()[len("http://"):])
	rep := engine.Replication{
		Source: endpoint(t, authURL(srv, "http://"+srcProxy.addr()+"/src")), Target: endpoint(t, srv.AuthDBURL("tgt")),
		CreateTarget: true, Continuous: true, ConnectionTimeout: time.Second, RetriesPerRequest: 1,
		CheckpointInterval: time.Hour,
	}
	run := start(t, rep, engine.Options{})
	run.waitProgress("20 documents written", func(s engine.Stats) bool { return s.DocsWritten >= 20 })
	srcProxy.freeze()
	_, err := run.Wait()
	// The changes request usually notices first; a checkpoint that was
	// under way when the source froze may time out before it.
	require.True(t, errors.Is(err, engine.ErrChangesFeed) || errors.Is(err, engine.ErrCheckpoint), "%v", err)
	require.ErrorIs(t, err, couch.ErrTimeout)
	require.NoError(t, run.ctx.Err(), "the run ended by itself")
}

// TestStopDuringSetup stops runs whose target is frozen while they verify
// the peers: Stop, even with a context that never ends, cancels the setup at
// once (it has nothing to checkpoint) instead of waiting out the requests'
// retries (connection_timeout is left at its 30 s default here).
func TestStopDuringSetup(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	tgtProxy := newKillProxy(t, srv.URL()[len("http://"):])
	tgtProxy.stall()
	rep := engine.Replication{Source: endpoint(t, srv.AuthDBURL("src")), Target: endpoint(t, authURL(srv, "http://"+tgtProxy.addr()+"/tgt"))}
	run := start(t, rep, engine.Options{})
	stopped := make(chan error, 1)
	go func() { stopped <- run.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, engine.ErrStopped)
	case <-time.After(15 * time.Second): // hang detector; the setup alone would take minutes
		buf := make([]byte, 1<<22)
		t.Fatalf("Stop waited for the setup's requests; goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}
	_, _, ok := run.ID()
	require.False(t, ok)
}

// TestStalledPeerEndsRun points a run at a source that accepts connections
// and never answers: the first stalled request ends the run after
// connection_timeout, however many retries_per_request allow (L4: a black
// hole looked healthy for retries × connection_timeout).
func TestStalledPeerEndsRun(t *testing.T) {
	t.Parallel()
	srv := startPeer(t, 0)
	srcProxy := newKillProxy(t, srv.URL()[len("http://"):])
	srcProxy.stall()
	rep := engine.Replication{
		Source: endpoint(t, authURL(srv, "http://"+srcProxy.addr()+"/src")), Target: endpoint(t, srv.AuthDBURL("tgt")),
		CreateTarget: true, ConnectionTimeout: 300 * time.Millisecond, RetriesPerRequest: 10,
	}
	_, err := start(t, rep, engine.Options{}).Wait()
	require.ErrorIs(t, err, couch.ErrTimeout)
	var rerr *couch.RequestError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, 1, rerr.Attempts)
}
