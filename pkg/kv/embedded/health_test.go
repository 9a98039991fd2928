package embedded

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// faultyDisk is an in-memory disk whose writes fail with err while it is
// set: a full disk (ENOSPC) without filling one. Syncs never fail.
type faultyDisk struct {
	mem  *vfs.MemFS
	fail atomic.Pointer[error]
	fs   vfs.FS
}

func newFaultyDisk() *faultyDisk {
	d := &faultyDisk{mem: vfs.NewMem()}
	d.fs = errorfs.Wrap(d.mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if p := d.fail.Load(); p != nil && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) {
			return *p
		}
		return nil
	}))
	return d
}

func (d *faultyDisk) failWrites(err error) { d.fail.Store(&err) }
func (d *faultyDisk) heal()                { d.fail.Store(nil) }

// logLines collects the store's error log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// openDisk opens a store on disk d, logging into log.
func openDisk(t *testing.T, d *faultyDisk, log *logLines, mod ...func(*Options)) *DB {
	t.Helper()
	o := noEnv(Options{InMemory: true, FS: d.fs, testLog: log.add})
	for _, m := range mod {
		m(&o)
	}
	db, err := Open(o)
	require.NoError(t, err)
	return db
}

// waitHealth waits, on signals, until the store's health satisfies ok.
func waitHealth(t *testing.T, db *DB, ok func(error) bool) {
	t.Helper()
	deadline := time.After(time.Minute) // a bound on a hang, not a timing expectation
	for {
		ch := db.health.changes()
		if ok(db.Health()) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("health did not change; it is %v", db.Health())
		}
	}
}

func TestDiskFullRefusesCommitsAndResumesWithoutLoss(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		isFull  bool
		message string
	}{
		{"no space", fmt.Errorf("write: %w", syscall.ENOSPC), true, "the disk is full"},
		{"quota", fmt.Errorf("write: %w", syscall.EDQUOT), true, "the disk is full"},
		{"i/o error", fmt.Errorf("write: %w", syscall.EIO), false, "the disk fails writes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := newFaultyDisk()
			var log logLines
			db := openDisk(t, disk, &log)
			ctx := context.Background()
			put(t, db, "k1", "1")
			require.NoError(t, db.Health())

			disk.failWrites(tc.err)
			tr := newTr(t, db)
			tr.Set(kv.Key("k2"), []byte("2"))
			_, err := waitReady(t, tr.Commit())
			requireCode(t, err, kv.CodeCommitUnknownResult) // in flight when the disk stopped taking writes

			health := db.Health()
			require.True(t, kv.HasCode(health, kv.CodeIOError), "health: %v", health)
			require.Equal(t, tc.isFull, errors.Is(health, kv.ErrStorageFull), "health: %v", health)
			require.Contains(t, health.Error(), tc.message)
			require.Error(t, kv.Health(db))

			// New commits fail at once, not retryably, and did not happen.
			runs := 0
			_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
				runs++
				tr.Set(kv.Key("k3"), []byte("3"))
				return nil, nil
			})
			require.True(t, kv.HasCode(err, kv.CodeIOError), "got %v", err)
			require.Equal(t, tc.isFull, errors.Is(err, kv.ErrStorageFull))
			require.False(t, kv.IsRetryable(err))
			require.Equal(t, 1, runs)
			// Reads go on.
			v, ok := read(t, db, "k1")
			require.True(t, ok)
			require.Equal(t, "1", v)
			require.Equal(t, 1, log.count("commits are refused meanwhile"), "logged once, however often retried")

			disk.heal()
			db.health.wakeWriters()
			waitHealth(t, db, func(err error) bool { return err == nil })
			put(t, db, "k4", "4")
			for key, want := range map[string]string{"k1": "1", "k2": "2", "k4": "4"} {
				v, ok := read(t, db, key)
				require.True(t, ok, key)
				require.Equal(t, want, v, key)
			}
			_, ok = read(t, db, "k3")
			require.False(t, ok, "the refused commit did not happen")
			require.Equal(t, 1, log.count("writes succeed again"))

			// Everything acknowledged, and the commit reported as unknown,
			// is durable.
			require.NoError(t, db.Close())
			db = openDisk(t, disk, &log)
			defer func() { require.NoError(t, db.Close()) }()
			for _, key := range []string{"k1", "k2", "k4"} {
				_, ok := read(t, db, key)
				require.True(t, ok, key)
			}
		})
	}
}

// Close does not wait for writes that wait for the disk: pending commits
// fail and Close says why.
func TestCloseWhileDiskFull(t *testing.T) {
	disk := newFaultyDisk()
	var log logLines
	db := openDisk(t, disk, &log)
	put(t, db, "k1", "1")
	disk.failWrites(syscall.ENOSPC)
	tr := newTr(t, db)
	tr.Set(kv.Key("k2"), []byte("2"))
	f := tr.Commit()
	waitHealth(t, db, func(err error) bool { return err != nil })
	err := db.Close()
	require.ErrorIs(t, err, kv.ErrStorageFull)
	_, err = waitReady(t, f)
	require.True(t, kv.IsMaybeCommitted(err), "got %v", err)
	require.ErrorIs(t, db.Health(), kv.ErrDatabaseClosed)
	// Space returns: the writes complete and pebble closes in the background.
	disk.heal()
	db.health.wakeWriters()
	<-db.stopped
}

func TestBackgroundErrorsMakeTheStoreUnhealthyForAWhile(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var log logLines
	db := openMem(t, func(o *Options) {
		o.Clock, o.testLog = clock, log.add
		o.StorageErrorWindow, o.ErrorLogInterval = time.Minute, time.Minute
	})
	l := db.health.listener()
	for range 1000 { // pebble retries a failed flush at once, again and again
		l.BackgroundError(errors.New("checksum mismatch"))
	}
	err := db.Health()
	require.True(t, kv.HasCode(err, kv.CodeIOError), "got %v", err)
	require.NotErrorIs(t, err, kv.ErrStorageFull)
	require.Equal(t, 1, log.count("background error"), "rate-limited")
	put(t, db, "k", "v") // commits go on: the disk takes writes

	clock.Advance(time.Minute)
	require.NoError(t, db.Health(), "the window passed")
	l.BackgroundError(errors.New("checksum mismatch"))
	require.Equal(t, 2, log.count("background error"))
	require.Contains(t, log.lines[len(log.lines)-1], "999 more like this")
	l.FlushEnd(pebble.FlushInfo{Done: true})
	require.NoError(t, db.Health(), "a successful flush clears it")
}

func TestRateLog(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var lines []string
	l := rateLog{clock: clock, interval: 10 * time.Second, out: func(s string) { lines = append(lines, s) }}
	steps := []struct {
		advance time.Duration
		key     string
		want    string // the line written, or "" for none
	}{
		{0, "a", "a"},
		{time.Second, "a", ""},
		{0, "b", "b"},
		{time.Second, "a", ""},
		{8 * time.Second, "a", "a (and 2 more like this since the last report)"},
		{0, "a", ""},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		before := len(lines)
		l.logf(s.key, "%s", s.key)
		if s.want == "" {
			require.Len(t, lines, before, "step %d", i)
			continue
		}
		require.Len(t, lines, before+1, "step %d", i)
		require.Equal(t, s.want, lines[before], "step %d", i)
	}
}
