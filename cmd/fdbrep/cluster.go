package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/cmd/internal/cli"
	"github.com/fdbrep/fdbrep/cmd/internal/node"
	"github.com/fdbrep/fdbrep/pkg/config"
)

// Defaults of the cluster flags.
const (
	// ClusterFrontendsDefault is how many api_frontend nodes cluster runs.
	ClusterFrontendsDefault = 2
	// ClusterReplicationNodesDefault is how many replication nodes it runs.
	ClusterReplicationNodesDefault = 2
	// ClusterBaseBindDefault is the first frontend's address; the others
	// listen on the following ports.
	ClusterBaseBindDefault = "127.0.0.1:5984"
)

// clusterUsage heads fdbrep cluster's -h.
const clusterUsage = `usage: fdbrep cluster [flags] [serve flags]

Runs the topology of docker-compose.yml for development, in this process on
one embedded store: api_frontend nodes on consecutive ports from -base-bind,
and replication nodes, each with its own job-layer client, acceptors and
metrics.

flags:
`

// cluster runs the deployment topology of docker-compose.yml for
// development: several api_frontend nodes on consecutive ports and several
// replication nodes, all in this process on one embedded store (which one
// process at a time can open). Each node has its own job-layer client,
// acceptors, activity monitor and metrics, as separate processes on
// FoundationDB would; what it cannot show is the network separation of the
// roles. Flags after the cluster's own are serve's and apply to every node
// (-config, -data-dir, -in-memory, -log-format, …). When ready is not nil,
// the frontends' addresses are sent on it once every node serves.
func cluster(ctx context.Context, args []string, stderr io.Writer, ready chan<- []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	frontends := fs.Int("frontends", ClusterFrontendsDefault, "api_frontend nodes, on consecutive ports from -base-bind")
	replicators := fs.Int("replication-nodes", ClusterReplicationNodesDefault, "replication nodes")
	base := fs.String("base-bind", ClusterBaseBindDefault, "address of the first frontend; port 0 gives each a free port")
	fs.Usage = func() {
		fmt.Fprint(stderr, clusterUsage)
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "\nEvery other flag is serve's and applies to every node (fdbrep help serve).")
	}
	own, rest := splitClusterArgs(args)
	for _, a := range rest {
		switch a {
		case "-h", "-help", "--help":
			fs.Usage()
			return flag.ErrHelp
		}
	}
	if _, err := cli.ParseFlags(fs, own, false); err != nil {
		return err
	}
	if *frontends < 1 || *replicators < 1 || *frontends > 100 || *replicators > 100 {
		return errors.New("cluster: -frontends and -replication-nodes must be between 1 and 100")
	}
	host, portStr, err := net.SplitHostPort(*base)
	if err != nil {
		return fmt.Errorf("cluster: -base-bind %q: %w", *base, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port+*frontends > 65536 {
		return fmt.Errorf("cluster: -base-bind %q: bad port", *base)
	}

	var nodes []*config.Config
	addNode := func(extra ...string) error {
		sc, err := parseServeFlags(append(append([]string{}, rest...), extra...), stderr)
		var fe *cli.FlagError
		if errors.As(err, &fe) && fe.Unknown != "" {
			// Neither cluster's flag nor serve's: said as cluster's,
			// with the nearest of either.
			fe.Cmd = "cluster"
			fe.Suggest = cmp.Or(fe.Suggest, cli.ClosestFlag(fs, fe.Unknown))
		}
		if err != nil {
			return err
		}
		nodes = append(nodes, sc.cfg)
		return nil
	}
	for i := range *frontends {
		p := 0
		if port != 0 {
			p = port + i
		}
		if err := addNode("-roles", "api_frontend", "-node-name", fmt.Sprintf("frontend%d", i+1),
			"-bind", net.JoinHostPort(host, strconv.Itoa(p))); err != nil {
			return err
		}
	}
	for i := range *replicators {
		if err := addNode("-roles", "replication", "-node-name", fmt.Sprintf("replication%d", i+1)); err != nil {
			return err
		}
	}

	// The nodes' loggers share stderr: one write per log line, serialized.
	stderr = zerolog.SyncWriter(stderr)
	first := nodes[0]
	if first.String("fdb", "backend") != "embedded" {
		return errors.New("cluster: runs on the embedded store only; on FoundationDB run one fdbrep serve per node")
	}
	log, db, err := start(ctx, first, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	// The process runs both roles on one data directory: its nodes seal
	// with the key there unless one is configured (node.DataDirSealing).
	for i, n := range nodes {
		if nodes[i], err = node.DataDirSealing(n, true, log); err != nil {
			return err
		}
	}

	// Every node runs until ctx ends or one of them fails; then all stop.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	addrs := make([]string, *frontends)
	readyc := make(chan string, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodeReady := make(chan string, 1)
			go func() {
				select {
				case a := <-nodeReady:
					if i < len(addrs) {
						addrs[i] = a
					}
					readyc <- a
				case <-ctx.Done():
				}
			}()
			errs[i] = node.Run(ctx, node.Options{Config: n, DB: db, Log: node.NewLog(n, stderr), Version: buildVersion(), Ready: readyAddr(nodeReady)})
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	started := 0
	for started < len(nodes) {
		select {
		case <-readyc:
			started++
		case <-ctx.Done():
			started = len(nodes)
		}
	}
	if ctx.Err() == nil {
		log.Info().Strs("frontends", addrs).Int("replication_nodes", *replicators).Msg("fdbrep cluster up")
		if ready != nil {
			ready <- addrs
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// splitClusterArgs separates cluster's own flags (as -name value or
// -name=value, with one or two dashes) from serve's, which keep their order.
func splitClusterArgs(args []string) (own, rest []string) {
	isOwn := func(name string) bool {
		switch name {
		case "frontends", "replication-nodes", "base-bind":
			return true
		}
		return false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || name == "" {
			rest = append(rest, a)
			continue
		}
		if k, _, ok := strings.Cut(name, "="); ok {
			if isOwn(k) {
				own = append(own, a)
			} else {
				rest = append(rest, a)
			}
			continue
		}
		if isOwn(name) {
			own = append(own, a)
			if i+1 < len(args) {
				own = append(own, args[i+1])
				i++
			}
			continue
		}
		rest = append(rest, a)
	}
	return own, rest
}
