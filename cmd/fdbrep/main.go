// Command fdbrep runs fdbrep nodes.
//
//	fdbrep serve [flags]   run a node (see fdbrep serve -h)
//	fdbrep version         print the version
//
// Until the HTTP API lands, serve opens the store and answers GET / and
// GET /_up, which is enough to check a deployment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "fdbrep:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: fdbrep serve [flags] | fdbrep version")
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr, nil)
	case "version":
		fmt.Fprintln(stdout, "fdbrep", version)
		return nil
	default:
		return fmt.Errorf("unknown command %q (want serve or version)", args[0])
	}
}
