package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/api"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

func init() { register("webhooks", runWebhooksBench) }

// runWebhooksBench measures webhook deliveries on one node with the
// default settings (embedded store on disk), a webhook of every change
// posting to a receiver on 127.0.0.1 while, in the same run, a reader
// follows GET /_scheduler/_changes (longpoll) as a poller would: a burst
// of -docs replication documents written at once (each a change: its job
// made pending), timed until the receiver took every change (deliveries
// per second); then one document every -every for -duration, each
// change's lag from its commit to its arrival by either path (p50, p99).
func runWebhooksBench(args []string) error {
	fs := flag.NewFlagSet("webhooks", flag.ContinueOnError)
	docs := fs.Int("docs", 1000, "replication documents")
	duration := fs.Duration("duration", 10*time.Second, "how long the steady phase writes changes")
	every := fs.Duration("every", 50*time.Millisecond, "a change every this long in the steady phase")
	inMemory := fs.Bool("in-memory", false, "use an in-memory store (default: on disk, durable commits)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *docs < 1 || *duration <= 0 || *every <= 0 || *every > *duration {
		return errors.New("-docs, -duration and -every must be positive, -every at most -duration")
	}
	env := newBenchEnv("webhooks", "")
	defer env.close()
	db, err := env.openStore("store", *inMemory)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex // guards hookLags, pollLags, posts
	var hookLags, pollLags []time.Duration
	posts := 0
	lagOf := func(at string) (time.Duration, bool) {
		t, err := time.Parse(time.RFC3339Nano, at)
		return time.Since(t), err == nil
	}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body struct{ Time string }
		if json.Unmarshal(b, &body) == nil {
			if lag, ok := lagOf(body.Time); ok {
				mu.Lock()
				hookLags, posts = append(hookLags, lag), posts+1
				mu.Unlock()
			}
		}
	}))
	defer recv.Close()

	logger := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.ErrorLevel).With().Timestamp().Logger()
	rules := couch.AddressRules{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	cfg := scheduler.Config{Config: replicator.Config{Logger: &logger, Addresses: couch.NewAddressPolicy(rules)}, NodeName: "node0"}
	feJobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return err
	}
	if err := feJobs.Start(ctx); err != nil {
		return err
	}
	defer feJobs.Stop()
	plane, err := control.New(replicator.NewStore(db, feJobs, nil), cfg.Config)
	if err != nil {
		return err
	}
	if err := plane.Init(ctx); err != nil {
		return err
	}
	nodeJobs, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		return err
	}
	if err := nodeJobs.Start(ctx); err != nil {
		return err
	}
	defer nodeJobs.Stop()
	node, err := scheduler.New(replicator.NewStore(db, nodeJobs, nil), nil, cfg)
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	defer node.Stop()
	hook, _ := json.Marshal(map[string]any{"url": recv.URL + "/hook", "secret": "a secret of sixteen bytes or more"})
	if _, _, err := plane.PutWebhook(ctx, api.User{Name: "admin", Roles: []string{"_admin"}}, "bench", hook); err != nil {
		return err
	}
	// The poller: _scheduler/_changes from now, longpoll.
	page, err := plane.SchedulerChanges(ctx, api.Admin(), api.ChangesQuery{Since: "now"})
	if err != nil {
		return err
	}
	go func() {
		since := page.LastSeq
		for ctx.Err() == nil {
			p, err := plane.SchedulerChanges(ctx, api.Admin(), api.ChangesQuery{Since: since, Limit: control.ChangesLimitMax, Wait: time.Minute})
			if err != nil {
				return
			}
			mu.Lock()
			for _, c := range p.Results {
				if lag, ok := lagOf(c.Time); ok {
					pollLags = append(pollLags, lag)
				}
			}
			mu.Unlock()
			since = p.LastSeq
		}
	}()

	fmt.Println("webhooks benchmark: one node, default settings")
	refused := "http://127.0.0.1:1/none"
	doc := func(i int) (string, string, any) {
		return "_replicator", fmt.Sprintf("w%06d", i), map[string]any{"source": refused, "target": refused + "-tgt"}
	}
	taken := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return posts, len(pollLags)
	}
	// A burst: -docs documents at once, each a change; the time until
	// the receiver took them all.
	start := time.Now()
	if err := writeDocs(ctx, db, plane, 0, *docs, doc); err != nil {
		return err
	}
	for {
		if n, _ := taken(); n >= *docs {
			break
		}
		if time.Since(start) > 5*time.Minute {
			n, _ := taken()
			return fmt.Errorf("%d of %d changes delivered in 5 minutes", n, *docs)
		}
		time.Sleep(time.Millisecond)
	}
	burst := time.Since(start)
	fmt.Printf("  burst: %d changes (documents written %d to a transaction) delivered in %v: %.0f deliveries/s\n",
		*docs, benchDocsPerTx, burst.Round(time.Millisecond), float64(*docs)/burst.Seconds())

	// Steady: one document every -every for -duration; each change's lag
	// from its commit, by webhook and by the poller.
	for {
		if _, p := taken(); p >= *docs {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	hookLags, pollLags, posts = nil, nil, 0
	mu.Unlock()
	steady := int(*duration / *every)
	for i := range steady {
		if err := writeDocs(ctx, db, plane, *docs+i, *docs+i+1, doc); err != nil {
			return err
		}
		time.Sleep(*every)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if n, p := taken(); (n >= steady && p >= steady) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	hooks, polls := slices.Clone(hookLags), slices.Clone(pollLags)
	mu.Unlock()
	fmt.Printf("  steady, a change every %v for %v: lag from commit to arrival\n", *every, *duration)
	fmt.Printf("    webhook (POST to the receiver): %d changes, p50 %v, p99 %v\n", len(hooks), pct(hooks, 50), pct(hooks, 99))
	fmt.Printf("    poller (_scheduler/_changes, longpoll): %d changes, p50 %v, p99 %v\n", len(polls), pct(polls, 50), pct(polls, 99))
	if len(polls) > 0 && len(hooks) > 0 {
		fmt.Printf("RATIO webhooks lag-p99 %.2f\n", pct(hooks, 99).Seconds()/pct(polls, 99).Seconds())
	}
	return nil
}
