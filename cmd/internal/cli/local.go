package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Defaults of in-process replications.
const (
	// DataDirDefault is where the embedded store of in-process
	// replications lives: fdbrep/replicate under the per-user data
	// directory ($XDG_DATA_HOME, else ~/.local/share; on macOS
	// ~/Library/Application Support, on Windows %AppData%).
	DataDirDefault = "<user data dir>/fdbrep/replicate"
	// StopTimeoutDefault bounds the final checkpoint of an in-process
	// replication stopped by Ctrl-C; then its requests are cancelled and a
	// rerun resumes from the checkpoint before.
	StopTimeoutDefault = 30 * time.Second
)

// defaultDataDir resolves DataDirDefault.
func defaultDataDir() (string, error) {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		var err error
		switch runtime.GOOS {
		case "darwin", "windows", "ios", "plan9":
			base, err = os.UserConfigDir()
		default:
			var home string
			home, err = os.UserHomeDir()
			base = filepath.Join(home, ".local", "share")
		}
		if err != nil {
			return "", fmt.Errorf("no per-user data directory (%v): pass -data-dir", err)
		}
	}
	return filepath.Join(base, "fdbrep", "replicate"), nil
}

// openLocal opens the embedded store and returns the installation's server
// UUID (created on first use), the first input of replication ids.
func openLocal(ctx context.Context, dir string) (*embedded.DB, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("data directory: %w", err)
	}
	db, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		return nil, "", fmt.Errorf("cannot open the embedded store in %s (another fdbrep process may have it open: pass another -data-dir): %w", dir, err)
	}
	nop := zerolog.Nop()
	jobs, err := fdbjobs.New(db, fdbjobs.Config{Logger: &nop})
	if err == nil {
		var uuid string
		if uuid, err = replicator.NewStore(db, jobs, nil).Setup(ctx, replicator.JobTimeoutDefault, 0); err == nil {
			return db, uuid, nil
		}
	}
	_ = db.Close()
	return nil, "", fmt.Errorf("embedded store in %s: %w", dir, err)
}

// runLocal runs the replication in this process, as a replication node
// would run it: the node's defaults applied, the engine, checkpoints on the
// peers under a replication id that stays the same across runs (the
// store's server UUID). Ctrl-C stops it with a final checkpoint.
func (c *replicateCmd) runLocal(ctx context.Context) error {
	dir := c.dataDir
	if dir == "" {
		var err error
		if dir, err = defaultDataDir(); err != nil {
			return usageError("%v", err)
		}
	}
	rep, err := c.spec.Replication()
	if err != nil {
		return usageError("%s", c.r.String(err.Error()))
	}
	if c.env.JobDefaults != nil {
		defaults, err := c.env.JobDefaults()
		if err != nil {
			return usageError("%v", err)
		}
		rep = defaults.Apply(rep, c.spec)
	}
	var client engine.ClientSettings
	if c.env.Client != nil {
		if client, err = c.env.Client(); err != nil {
			return usageError("%v", err)
		}
	}
	db, uuid, err := openLocal(ctx, dir)
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: err}
	}
	defer db.Close()
	c.r.Printf(c.env.Stdout, "Replicating %s in process (store %s)\n", c.what(), dir)

	d := newDisplay(c.progress, c.env.Stdout, c.r)
	log := zerolog.New(zerolog.ConsoleWriter{Out: redactWriter{d.logs(c.env.Stderr), c.r}, NoColor: true, TimeFormat: time.RFC3339}).
		Level(zerolog.WarnLevel).With().Timestamp().Logger()
	run := engine.Start(context.Background(), rep, engine.Options{ServerUUID: uuid, Logger: log, Client: client})
	repID := func() string {
		_, full, _ := run.ID()
		return full
	}
	state := func() string {
		if _, _, ok := run.ID(); ok {
			return "running"
		}
		return "starting"
	}
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s := sample{state: state(), stats: run.Progress()}
			if st := run.Sync().Stall; st != nil {
				s.stall = st.Reason + ": " + st.Detail
			}
			d.update(s)
		case <-run.Done():
			res, err := run.Wait()
			if err != nil {
				d.done(false)
				c.summary(outcome{verb: "failed", repID: repID(), stats: run.Progress()})
				return c.fail(err)
			}
			d.update(sample{state: "completed", stats: res.Stats})
			d.done(true)
			o := outcome{verb: "completed", repID: repID(), stats: res.Stats, startSeq: seqText(res.StartSeq)}
			if res.NoChanges {
				o.note = "Nothing to replicate: the target was up to date."
			}
			c.summary(o)
			return nil
		case <-ctx.Done():
			stopCtx, cancel := context.WithTimeout(context.Background(), StopTimeoutDefault)
			err := run.Stop(stopCtx)
			cancel()
			res, _ := run.Wait()
			d.done(false)
			o := outcome{verb: "stopped", repID: repID(), stats: run.Progress(), startSeq: seqText(res.StartSeq),
				note: "Interrupted: stopped with a final checkpoint; run the same command again to resume."}
			if err != nil {
				o.note = c.r.String("Interrupted; no final checkpoint (" + err.Error() + "): a rerun resumes from the last one written, if any.")
			}
			c.summary(o)
			return &ExitError{Code: ExitInterrupted}
		}
	}
}

// redactWriter redacts each write (one log line) before passing it on.
type redactWriter struct {
	w io.Writer
	r *redactor
}

func (w redactWriter) Write(p []byte) (int, error) {
	if _, err := w.w.Write([]byte(w.r.String(string(p)))); err != nil {
		return 0, err
	}
	return len(p), nil
}
