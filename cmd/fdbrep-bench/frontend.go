package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/cmd/internal/wire"
	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
)

func init() { register("frontend", runFrontendBench) }

// runFrontendBench measures the HTTP API of an api_frontend node: -docs
// replication documents written by -clients concurrent clients over
// loopback HTTP (each write one transaction that also creates the job),
// then as many document reads, then _all_docs and _scheduler/docs pages.
// No replication node runs, so the jobs stay pending.
func runFrontendBench(args []string) error {
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	docs := fs.Int("docs", 5000, "documents written")
	clients := fs.Int("clients", 8, "concurrent HTTP clients")
	inMemory := fs.Bool("in-memory", false, "use an in-memory store (default: on disk, durable commits)")
	noJobs := fs.Bool("no-jobs", false, "do not wire the replicator (documents only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *docs < 1 || *clients < 1 {
		return errors.New("-docs and -clients must be positive")
	}
	env := newBenchEnv("frontend", "")
	defer env.close()
	db, err := env.openStore("store", *inMemory)
	if err != nil {
		return err
	}
	ctx := context.Background()
	accounts, _, err := frontend.NewAccounts(map[string]string{"admin": "pw"}, nil, nil, frontend.AccountsOptions{PRF: "sha256", Iterations: 600000})
	if err != nil {
		return err
	}
	logger := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel)
	fo := frontend.Options{DB: db, Accounts: accounts, Logger: &logger}
	if !*noJobs {
		jobs, err := fdbjobs.New(db, fdbjobs.Config{})
		if err != nil {
			return err
		}
		if err := jobs.Start(ctx); err != nil {
			return err
		}
		defer jobs.Stop()
		plane, err := control.New(replicator.NewStore(db, jobs, nil), replicator.Config{})
		if err != nil {
			return err
		}
		if err := plane.Init(ctx); err != nil {
			return err
		}
		wire.Frontend(&fo, plane)
	}
	srv, err := frontend.New(fo)
	if err != nil {
		return err
	}
	if err := srv.Init(ctx); err != nil {
		return err
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients}}

	do := func(method, path string, body []byte) (time.Duration, error) {
		req, _ := http.NewRequest(method, ts.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.SetBasicAuth("admin", "pw")
		start := time.Now()
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode >= 300 {
			return 0, fmt.Errorf("%s %s: %d", method, path, res.StatusCode)
		}
		return time.Since(start), nil
	}
	phase := func(name string, n int, req func(i int) (string, string, []byte)) error {
		lat := make([]time.Duration, n)
		var wg sync.WaitGroup
		errc := make(chan error, *clients)
		start := time.Now()
		for c := 0; c < *clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				for i := c; i < n; i += *clients {
					m, p, b := req(i)
					d, err := do(m, p, b)
					if err != nil {
						errc <- err
						return
					}
					lat[i] = d
				}
			}(c)
		}
		wg.Wait()
		close(errc)
		if err := <-errc; err != nil {
			return err
		}
		el := time.Since(start)
		slices.Sort(lat)
		fmt.Printf("%-22s %7d requests  %8.0f req/s  p50 %7.2f ms  p99 %7.2f ms\n", name, n,
			float64(n)/el.Seconds(), ms(lat[n/2]), ms(lat[n*99/100]))
		return nil
	}
	fmt.Printf("frontend: %d docs, %d clients, store %s, jobs %v\n", *docs, *clients, map[bool]string{true: "in-memory", false: "on disk"}[*inMemory], !*noJobs)
	if err := phase("PUT doc (+job)", *docs, func(i int) (string, string, []byte) {
		return "PUT", fmt.Sprintf("/_replicator/rep-%08d", i),
			[]byte(fmt.Sprintf(`{"source":"http://src.example/db%d","target":"http://tgt.example/db%d","continuous":true}`, i, i))
	}); err != nil {
		return err
	}
	if err := phase("GET doc", *docs, func(i int) (string, string, []byte) {
		return "GET", fmt.Sprintf("/_replicator/rep-%08d", i), nil
	}); err != nil {
		return err
	}
	pages := max(*docs/100, 1)
	if err := phase("GET _all_docs (100)", pages, func(i int) (string, string, []byte) {
		return "GET", fmt.Sprintf("/_replicator/_all_docs?limit=100&skip=%d", (i*100)%*docs), nil
	}); err != nil {
		return err
	}
	if !*noJobs {
		if err := phase("GET _scheduler/docs", min(pages, 50), func(i int) (string, string, []byte) {
			return "GET", "/_scheduler/docs/_replicator?limit=100", nil
		}); err != nil {
			return err
		}
	}
	return nil
}
