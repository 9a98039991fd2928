package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// Defaults of the serve flags.
const (
	// BindDefault is where the HTTP API listens: loopback and CouchDB's
	// port, so a node started by hand is not reachable from the network.
	BindDefault = "127.0.0.1:5984"
	// DataDirDefault is where the embedded store keeps its files.
	DataDirDefault = "./data"
	// ShutdownTimeoutDefault bounds a graceful shutdown.
	ShutdownTimeoutDefault = 30 * time.Second
)

type serveConfig struct {
	bind      string
	dataDir   string
	inMemory  bool
	logFormat string
}

func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.bind, "bind", envOr("FDBREP_BIND", BindDefault), "address of the HTTP API (env FDBREP_BIND)")
	fs.StringVar(&c.dataDir, "data-dir", envOr("FDBREP_DATA_DIR", DataDirDefault), "directory of the embedded store (env FDBREP_DATA_DIR)")
	fs.BoolVar(&c.inMemory, "in-memory", false, "keep the embedded store in memory only: nothing survives a restart")
	fs.StringVar(&c.logFormat, "log-format", envOr("FDBREP_LOG_FORMAT", "console"), "log format: console or json (env FDBREP_LOG_FORMAT)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	if _, _, err := net.SplitHostPort(c.bind); err != nil {
		return c, fmt.Errorf("serve: -bind %q: %w", c.bind, err)
	}
	if c.logFormat != "console" && c.logFormat != "json" {
		return c, fmt.Errorf("serve: -log-format %q: want console or json", c.logFormat)
	}
	if !c.inMemory && c.dataDir == "" {
		return c, errors.New("serve: -data-dir must not be empty")
	}
	return c, nil
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// serve runs a node until ctx ends. When ready is not nil, the listener's
// address is sent on it once the node accepts connections.
func serve(ctx context.Context, args []string, stderr io.Writer, ready chan<- string) error {
	cfg, err := parseServeFlags(args, stderr)
	if err != nil {
		return err
	}
	log := newLogger(cfg.logFormat, stderr)

	opts := embedded.Options{Dir: cfg.dataDir}
	if cfg.inMemory {
		opts = embedded.Options{InMemory: true}
	}
	db, err := embedded.Open(opts)
	if err != nil {
		return fmt.Errorf("open embedded store: %w", err)
	}
	defer db.Close()

	ln, err := net.Listen("tcp", cfg.bind)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(db), ReadHeaderTimeout: 10 * time.Second}
	log.Info().Str("addr", ln.Addr().String()).Str("data_dir", cfg.dataDir).Bool("in_memory", cfg.inMemory).Msg("fdbrep listening")
	if ready != nil {
		ready <- ln.Addr().String()
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeoutDefault)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func newLogger(format string, w io.Writer) zerolog.Logger {
	if format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).With().Timestamp().Logger()
}

func newHandler(db kv.Database) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"couchdb": "Welcome", "vendor": map[string]string{"name": "fdbrep", "version": version}, "version": version})
	})
	mux.HandleFunc("GET /_up", func(w http.ResponseWriter, r *http.Request) {
		// The node is up when the store answers a read.
		if _, err := kv.ReadTransact(r.Context(), db, func(tr kv.ReadTransaction) (int64, error) {
			return tr.GetReadVersion().Get()
		}); err != nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"status": "maintenance_mode", "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
