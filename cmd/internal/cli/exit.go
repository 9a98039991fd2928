package cli

import (
	"context"
	"errors"
	"flag"
)

// Exit codes of the client commands, carried by ExitError.
const (
	// ExitFailure: the replication failed, or the cluster or a peer
	// refused a request.
	ExitFailure = 1
	// ExitUsage: the command line is wrong (flags, arguments, a body the
	// replicator's parser refuses).
	ExitUsage = 2
	// ExitInterrupted: Ctrl-C (SIGINT) or SIGTERM ended the command: a
	// replication, cleanly (cancelled on the cluster, or stopped in
	// process with a final checkpoint), a -watch, or a request in flight.
	// 128 + SIGINT, as shells report an interrupted command.
	ExitInterrupted = 130
)

// interrupted is err, or ExitInterrupted when ctx ended (Ctrl-C) before
// the command did and err is a failure: what failed then failed because
// of the interrupt (a request cancelled), not because of the cluster.
func interrupted(ctx context.Context, err error) error {
	var ee *ExitError
	if err == nil || ctx.Err() == nil || (errors.As(err, &ee) && ee.Code != ExitFailure) || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &ExitError{Code: ExitInterrupted}
}

// ExitError is a command's failure with the process exit code it calls
// for. Err may be nil when the command has already said everything.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Usage texts, printed by -h and fdbrep help.
const (
	ReplicateUsage = `usage: fdbrep replicate [flags] SOURCE TARGET
       fdbrep replicate -cancel [flags] ID | SOURCE TARGET

Replicates the CouchDB database SOURCE to TARGET (http:// or https:// URLs).
With a cluster (-cluster or $FDBREP_CLUSTER) it runs there through POST
/_replicate; without, in this process on an embedded store, from which a rerun
resumes. Shows a progress bar on a terminal, plain lines in a pipe, then a
summary. Ctrl-C cancels (cluster) or stops with a checkpoint (in process).
Exit codes: 0 done, 1 failed, 2 bad command line, 130 interrupted.

flags:
`
	JobsUsage = `usage: fdbrep jobs [flags] [ID]

Prints the cluster's replication jobs (GET /_scheduler/jobs, or one job's,
by replication id or job id or a prefix of one that no other job's id has,
with the documents its target refused) as a table; -watch refreshes it
until Ctrl-C. On a terminal the table fits its width, the widest columns
cut first. IN SYNC is "yes" for a job caught up with its source, else the
time left at its rate when known; STALL is why a job does not move, and for
how long. STATE "parked" is a continuous replication caught up and waiting
for a change to its source without a slot (the views show it running).

flags:
`
	DocsUsage = `usage: fdbrep docs [flags] [DB [DOC]]

Prints the replications of _replicator documents (GET /_scheduler/docs, or
/_scheduler/docs/DB, or one document's, with the documents its target
refused) as a table; -watch refreshes it until Ctrl-C. The table, IN SYNC
and STALL are as in fdbrep jobs.

flags:
`
)
