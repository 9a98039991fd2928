package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

func init() { register("kv", runKVBench) }

// runKVBench measures durable read-modify-write transactions (read one key,
// write two keys of -value-bytes) on the embedded store at several client
// counts, next to plain pebble doing the same Get + synced batch, on
// on-disk stores in a temporary directory.
func runKVBench(args []string) error {
	fs := flag.NewFlagSet("kv", flag.ContinueOnError)
	keys := fs.Int("keys", 100_000, "keys preloaded")
	valueBytes := fs.Int("value-bytes", 200, "bytes per value")
	duration := fs.Duration("duration", 3*time.Second, "time per measurement")
	clientList := fs.String("clients", "1,16,64", "comma-separated client counts")
	dir := fs.String("dir", "", "directory for the stores (default: a new temporary directory, removed afterwards)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the embedded store's preload and rows to this file")
	pebbleRow := fs.Bool("pebble", true, "also measure plain pebble for comparison")
	verbose := fs.Bool("v", false, "print the embedded store's counters after each row")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the embedded store's preload and rows to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keys < 2 || *valueBytes < 8 || *duration <= 0 {
		return errors.New("-keys must be at least 2, -value-bytes at least 8, -duration positive")
	}
	clients, err := parseInts("clients", *clientList)
	if err != nil {
		return err
	}
	env := newBenchEnv("kv", *dir)
	defer env.close()
	root, err := env.workDir()
	if err != nil {
		return err
	}
	b := kvBench{keys: *keys, valueBytes: *valueBytes, duration: *duration}

	fmt.Printf("kv benchmark: durable RMW transactions (read 1 key, write 2 keys of %d B), %d keys preloaded, %v per row, GOMAXPROCS=%d\n",
		*valueBytes, *keys, *duration, runtime.GOMAXPROCS(0))
	// Each store is preloaded and measured on its own, one after the other,
	// so that neither's background compactions land in the other's figures
	// (CPU per transaction is the whole process's).
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	// The store measured: the embedded store, or a tenant of the
	// FoundationDB cluster (whose batching the client cannot see).
	var db kv.Database
	var emb *embedded.DB
	if onFDB() {
		var drop func()
		if db, _, drop, err = openFDBStore("kv"); err != nil {
			return err
		}
		defer drop()
		*pebbleRow = false // pebble is the embedded store's reference
	} else {
		if emb, err = embedded.Open(embedded.Options{Dir: filepath.Join(root, "embedded")}); err != nil {
			return err
		}
		db = emb
	}
	if err := b.preloadEmbedded(db); err != nil {
		db.Close()
		return err
	}
	var embRows []kvResult
	for _, c := range clients {
		var before embedded.Stats
		if emb != nil {
			before = emb.Stats()
		}
		e := b.run(c, func(rng *rand.Rand, buf []byte) (time.Duration, int, error) { return b.embeddedTxn(db, rng, buf) })
		if e.err != nil {
			db.Close()
			return e.err
		}
		if emb != nil {
			after := emb.Stats()
			e.perBatch = float64(after.Commits-before.Commits) / float64(max(1, after.Batches-before.Batches))
			e.perSync = float64(after.Commits-before.Commits) / float64(max(1, after.Syncs-before.Syncs))
			if *verbose {
				fmt.Printf("embedded %d clients: %+v\n", c, after)
			}
		}
		embRows = append(embRows, e)
	}
	if emb != nil {
		if err := emb.Close(); err != nil {
			return err
		}
	}
	stopProfile()
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return err
		}
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
		if err != nil {
			return err
		}
	}

	pebRows := make([]kvResult, len(clients))
	if *pebbleRow {
		cache := pebble.NewCache(embedded.CacheSizeDefault)
		defer cache.Unref()
		popts := &pebble.Options{
			Cache:              cache,
			FormatMajorVersion: pebble.FormatValueSeparation,
			Logger:             quietPebbleLogger{},
		}
		popts.Levels[0].FilterPolicy = bloom.FilterPolicy(10) // as the embedded store
		pdb, err := pebble.Open(filepath.Join(root, "pebble"), popts)
		if err != nil {
			return err
		}
		defer pdb.Close()
		if err := b.preloadPebble(pdb); err != nil {
			return err
		}
		for i, c := range clients {
			p := b.run(c, func(rng *rand.Rand, buf []byte) (time.Duration, int, error) { return b.pebbleTxn(pdb, rng, buf) })
			if p.err != nil {
				return p.err
			}
			pebRows[i] = p
		}
	}

	if emb == nil {
		fmt.Printf("\n%-8s %10s %11s %11s %8s %12s\n", "clients", "txn/s", "commit p50", "commit p99", "retries", "client cpu/txn")
		for i, c := range clients {
			e := embRows[i]
			fmt.Printf("%-8d %10.0f %11s %11s %8d %12s\n", c, e.rate, fmtDur(e.p50), fmtDur(e.p99), e.retries, fmtMicros(e.cpuPerTxn))
		}
		fmt.Println("(CPU is this client's; the fdbserver processes' is not counted)")
		return nil
	}
	fmt.Printf("\n%-8s %10s %11s %11s %8s %9s %9s %9s %11s %11s %9s %7s\n",
		"clients", "txn/s", "commit p50", "commit p99", "retries", "txn/batch", "txn/sync", "cpu/txn",
		"pebble tx/s", "pebble p50", "cpu/txn", "ratio")
	for i, c := range clients {
		e, p := embRows[i], pebRows[i]
		ratio := "-"
		if p.rate > 0 {
			ratio = fmt.Sprintf("%.0f%%", 100*e.rate/p.rate)
		}
		fmt.Printf("%-8d %10.0f %11s %11s %8d %9.1f %9.1f %9s %11.0f %11s %9s %7s\n",
			c, e.rate, fmtDur(e.p50), fmtDur(e.p99), e.retries, e.perBatch, e.perSync, fmtMicros(e.cpuPerTxn),
			p.rate, fmtDur(p.p50), fmtMicros(p.cpuPerTxn), ratio)
	}
	return nil
}

type kvBench struct {
	keys, valueBytes int
	duration         time.Duration
}

type kvResult struct {
	rate     float64
	p50, p99 time.Duration
	retries  int
	err      error

	perBatch, perSync float64 // embedded: commits per leader batch and per WAL sync
	cpuPerTxn         time.Duration
}

func (b kvBench) key(i int) []byte { return []byte(fmt.Sprintf("bench/%08d", i)) }

func (b kvBench) value(rng *rand.Rand, buf []byte) []byte {
	for i := 8; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], rng.Uint64())
	}
	return buf
}

func (b kvBench) preloadEmbedded(db kv.Database) error {
	rng := rand.New(rand.NewPCG(1, 1))
	buf := make([]byte, b.valueBytes)
	const chunk = 2_000 // about 400 kB per transaction
	for start := 0; start < b.keys; start += chunk {
		_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
			for i := start; i < min(start+chunk, b.keys); i++ {
				tr.Set(kv.Key(b.key(i)), b.value(rng, buf))
			}
			return nil, nil
		})
		if err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	return nil
}

func (b kvBench) preloadPebble(db *pebble.DB) error {
	rng := rand.New(rand.NewPCG(1, 1))
	buf := make([]byte, b.valueBytes)
	batch := db.NewBatch()
	for i := range b.keys {
		if err := batch.Set(b.key(i), b.value(rng, buf), nil); err != nil {
			return err
		}
	}
	return batch.Commit(pebble.Sync)
}

// embeddedTxn runs one RMW transaction and returns its commit latency.
func (b kvBench) embeddedTxn(db kv.Database, rng *rand.Rand, buf []byte) (time.Duration, int, error) {
	k1, k2 := b.key(rng.IntN(b.keys)), b.key(rng.IntN(b.keys))
	var commit time.Duration
	attempts := 0
	tr, err := db.CreateTransaction()
	if err != nil {
		return 0, 0, err
	}
	defer tr.Cancel()
	for {
		attempts++
		err := func() error {
			v, err := tr.Get(kv.Key(k1)).Get()
			if err != nil {
				return err
			}
			out := b.value(rng, buf)
			if len(v) >= 8 {
				binary.LittleEndian.PutUint64(out, binary.LittleEndian.Uint64(v)+1)
			}
			tr.Set(kv.Key(k1), out)
			tr.Set(kv.Key(k2), out)
			start := time.Now()
			_, err = tr.Commit().Get()
			commit = time.Since(start)
			return err
		}()
		if err == nil {
			return commit, attempts - 1, nil
		}
		var e kv.Error
		if !errors.As(err, &e) {
			return 0, 0, err
		}
		if _, err := tr.OnError(e).Get(); err != nil {
			return 0, 0, err
		}
	}
}

func (b kvBench) pebbleTxn(db *pebble.DB, rng *rand.Rand, buf []byte) (time.Duration, int, error) {
	k1, k2 := b.key(rng.IntN(b.keys)), b.key(rng.IntN(b.keys))
	v, closer, err := db.Get(k1)
	if err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return 0, 0, err
	}
	out := b.value(rng, buf)
	if err == nil {
		if len(v) >= 8 {
			binary.LittleEndian.PutUint64(out, binary.LittleEndian.Uint64(v)+1)
		}
		closer.Close()
	}
	batch := db.NewBatch()
	defer batch.Close()
	if err := batch.Set(k1, out, nil); err != nil {
		return 0, 0, err
	}
	if err := batch.Set(k2, out, nil); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	err = batch.Commit(pebble.Sync)
	return time.Since(start), 0, err
}

// run drives txn from the given number of clients for the duration.
func (b kvBench) run(clients int, txn func(*rand.Rand, []byte) (time.Duration, int, error)) kvResult {
	var stop atomic.Bool
	var wg sync.WaitGroup
	lat := make([][]time.Duration, clients)
	retries := make([]int, clients)
	errs := make([]error, clients)
	cpu0 := cpuTime()
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			buf := make([]byte, b.valueBytes)
			for !stop.Load() {
				d, r, err := txn(rng, buf)
				if err != nil {
					errs[c] = err
					return
				}
				lat[c] = append(lat[c], d)
				retries[c] += r
			}
		})
	}
	time.Sleep(b.duration)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	var all []time.Duration
	res := kvResult{}
	for c := range clients {
		all = append(all, lat[c]...)
		res.retries += retries[c]
		if errs[c] != nil && res.err == nil {
			res.err = errs[c]
		}
	}
	slices.Sort(all)
	if len(all) > 0 {
		res.p50 = all[len(all)/2]
		res.p99 = all[len(all)*99/100]
	}
	res.rate = float64(len(all)) / elapsed.Seconds()
	if len(all) > 0 {
		res.cpuPerTxn = cpu / time.Duration(len(all))
	}
	return res
}

func fmtMicros(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/1e3) }

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// quietPebbleLogger drops pebble's informational messages.
type quietPebbleLogger struct{}

func (quietPebbleLogger) Infof(string, ...any) {}
func (quietPebbleLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietPebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
