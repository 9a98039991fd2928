package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Env is what the commands get from the binary: where to write, and the
// node-wide defaults an in-process replication runs with.
type Env struct {
	Stdout, Stderr io.Writer
	// JobDefaults returns [replicator]'s defaults of the replications'
	// tunables (worker_processes, …), as a node applies them; nil: the
	// engine's defaults.
	JobDefaults func() (replicator.JobDefaults, error)
	// Client returns [replicator]'s TLS and authentication settings of
	// the endpoints, as a node reads them; nil: Go's TLS defaults and
	// session authentication.
	Client func() (engine.ClientSettings, error)
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// replicateCmd is one `fdbrep replicate`: its flags, the POST /_replicate
// body they make, and where it writes.
type replicateCmd struct {
	clusterFlags
	continuous, createTarget, detach, local, cancel bool
	filter, selector, dataDir, progress             string
	docIDs, queryParams, options                    listFlag
	interval                                        time.Duration

	env   Env
	r     *redactor
	creds *credSource
	args  []string
	body  map[string]any
	spec  *replicator.Spec // nil for a cancel by id
	start time.Time
}

// usageError marks a bad command line (ExitUsage).
func usageError(format string, a ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, a...)}
}

func newReplicateCmd(args []string, env Env) (*replicateCmd, error) {
	c := &replicateCmd{env: env, start: time.Now()}
	fs := flag.NewFlagSet("replicate", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() { fmt.Fprint(env.Stderr, ReplicateUsage); fs.PrintDefaults() }
	c.register(fs)
	fs.BoolVar(&c.continuous, "continuous", false, "keep replicating new changes until Ctrl-C (or -detach)")
	fs.BoolVar(&c.createTarget, "create-target", false, "create the target database if it does not exist")
	fs.StringVar(&c.filter, "filter", "", "filter function: ddoc/name, or _doc_ids, _selector, _view")
	fs.Var(&c.docIDs, "doc-ids", "replicate only these documents: comma-separated ids or a JSON array; repeatable")
	fs.StringVar(&c.selector, "selector", "", "replicate only documents matching this Mango selector (JSON)")
	fs.Var(&c.queryParams, "query-param", "a filter query parameter, key=value; repeatable")
	fs.Var(&c.options, "opt", "any other field of the _replicate body, key=value (a JSON value or a string), e.g. worker_processes=8; repeatable")
	fs.BoolVar(&c.detach, "detach", false, "with -cluster and -continuous: start the replication, print its id and exit")
	fs.BoolVar(&c.cancel, "cancel", false, "with -cluster: cancel a replication given by its id (or a prefix of it no other job's id has), or by SOURCE TARGET and the flags that started it")
	fs.BoolVar(&c.local, "local", false, "run in process even when "+EnvCluster+" names a cluster")
	fs.StringVar(&c.dataDir, "data-dir", "", "embedded store of in-process replications (default "+DataDirDefault+")")
	fs.StringVar(&c.progress, "progress", ProgressDefault, "progress display: auto (a bar on a terminal, plain lines otherwise), bar or plain")
	fs.DurationVar(&c.interval, "interval", IntervalDefault, "how often progress is sampled")
	pos, err := ParseFlags(fs, args, true)
	if err != nil {
		return nil, err
	}
	c.visited(fs)
	c.args = pos
	if c.creds, err = c.credentials(); err != nil {
		return nil, usageError("%v", err)
	}
	c.r = newRedactor(c.creds.secrets()...)
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// validate checks the flags against each other and builds the body.
func (c *replicateCmd) validate() error {
	cluster := c.clusterURL("")
	switch {
	case c.local && c.set["cluster"]:
		return usageError("-local and -cluster exclude each other")
	case c.local:
		cluster = ""
	}
	if c.local || cluster == "" {
		c.local = true
		switch {
		case c.detach:
			return usageError("-detach needs a cluster: an in-process replication lasts as long as the command")
		case c.cancel:
			return usageError("-cancel needs a cluster (-cluster or %s)", EnvCluster)
		}
	} else {
		c.cluster = cluster
	}
	if c.detach && !c.continuous {
		return usageError("-detach is for -continuous replications (a one-shot POST /_replicate waits for the end)")
	}
	if c.progress != ProgressAuto && c.progress != ProgressBar && c.progress != ProgressPlain {
		return usageError("-progress %q: want %s, %s or %s", c.progress, ProgressAuto, ProgressBar, ProgressPlain)
	}
	if c.interval < IntervalMin || c.interval > IntervalMax {
		return usageError("-interval %v: want between %v and %v", c.interval, IntervalMin, IntervalMax)
	}
	if c.cancel && len(c.args) == 1 {
		c.body = map[string]any{"replication_id": c.args[0], "cancel": true}
		return nil
	}
	if len(c.args) != 2 {
		return usageError("want SOURCE and TARGET (got %s); see fdbrep help replicate", plural(len(c.args), "argument", "arguments"))
	}
	body, err := c.makeBody()
	if err != nil {
		return usageError("%s", c.r.String(err.Error()))
	}
	req, err := replicator.ParseRequest(mustJSON(body))
	if err != nil {
		// The cluster would refuse it with the same reason.
		return usageError("%s", c.r.String(err.Error()))
	}
	c.body, c.spec = body, req.Spec
	if c.cancel {
		c.body["cancel"] = true
	}
	return nil
}

// makeBody builds the POST /_replicate body of the flags: -opt fields
// first, then the named flags, then the endpoints.
func (c *replicateCmd) makeBody() (map[string]any, error) {
	body := map[string]any{}
	for _, o := range c.options {
		k, v, ok := strings.Cut(o, "=")
		switch {
		case !ok || k == "":
			return nil, fmt.Errorf("-opt %q: want key=value", o)
		case k == "source" || k == "target" || k == "cancel":
			return nil, fmt.Errorf("-opt %s: give it as an argument or flag", k)
		}
		body[k] = jsonOrString(v)
	}
	if c.continuous {
		body["continuous"] = true
	}
	if c.createTarget {
		body["create_target"] = true
	}
	if c.filter != "" {
		body["filter"] = c.filter
	}
	if len(c.docIDs) > 0 {
		var ids []string
		for _, v := range c.docIDs {
			if strings.HasPrefix(strings.TrimSpace(v), "[") {
				var list []string
				if err := json.Unmarshal([]byte(v), &list); err != nil {
					return nil, fmt.Errorf("-doc-ids %s: not a JSON array of strings", v)
				}
				ids = append(ids, list...)
				continue
			}
			ids = append(ids, strings.Split(v, ",")...)
		}
		body["doc_ids"] = ids
	}
	if c.selector != "" {
		if !json.Valid([]byte(c.selector)) {
			return nil, fmt.Errorf("-selector: not JSON: %s", c.selector)
		}
		body["selector"] = json.RawMessage(c.selector)
	}
	if len(c.queryParams) > 0 {
		qp := map[string]string{}
		for _, q := range c.queryParams {
			k, v, ok := strings.Cut(q, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("-query-param %q: want key=value", q)
			}
			qp[k] = v
		}
		body["query_params"] = qp
	}
	body["source"] = c.creds.endpoint(c.args[0])
	body["target"] = c.creds.endpoint(c.args[1])
	return body, nil
}

// jsonOrString is v as JSON when it is JSON, else as a string.
func jsonOrString(v string) any {
	if json.Valid([]byte(v)) {
		return json.RawMessage(v)
	}
	return v
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and raw JSON always marshal
	}
	return b
}

// Replicate runs `fdbrep replicate [flags] SOURCE TARGET` (see
// ReplicateUsage): with a cluster, through its POST /_replicate; without,
// in process on an embedded store. Errors are *ExitError with the exit
// code (ExitUsage, ExitFailure, ExitInterrupted), or flag.ErrHelp.
func Replicate(ctx context.Context, args []string, env Env) error {
	c, err := newReplicateCmd(args, env)
	if err != nil {
		return err
	}
	if c.local {
		return interrupted(ctx, c.runLocal(ctx))
	}
	return interrupted(ctx, c.runCluster(ctx))
}

// what describes the replication for the first line of output.
func (c *replicateCmd) what() string {
	kind := "one-shot"
	if c.spec.Continuous {
		kind = "continuous"
	}
	return fmt.Sprintf("%s -> %s (%s)", c.spec.Source.Redacted(), c.spec.Target.Redacted(), kind)
}

// outcome is how a replication ended, for the summary.
type outcome struct {
	verb     string // "completed", "cancelled", "stopped", "failed"
	repID    string
	stats    engine.Stats
	startSeq string // the sequence this run started from ("" unknown)
	note     string // a last line, e.g. how to resume
}

// summary prints the final summary: counts as the cluster shows them
// (cumulative over the replication's runs), and the run's duration.
func (c *replicateCmd) summary(o outcome) {
	out := c.env.Stdout
	c.r.Printf(out, "Replication %s after %s\n", o.verb, time.Since(c.start).Round(100*time.Millisecond))
	row := func(k string, v any) { c.r.Printf(out, "  %-20s %v\n", k+":", v) }
	if o.repID != "" {
		row("replication id", o.repID)
	}
	row("docs read", o.stats.DocsRead)
	row("docs written", o.stats.DocsWritten)
	row("doc write failures", o.stats.DocWriteFailures)
	row("revisions checked", o.stats.RevisionsChecked)
	row("missing revisions", o.stats.MissingRevisionsFound)
	if o.stats.ChangesPending != nil {
		row("changes pending", *o.stats.ChangesPending)
	}
	if o.startSeq != "" && o.startSeq != "0" {
		row("resumed from seq", o.startSeq)
	}
	if o.stats.ThroughSeq != "" {
		row("through seq", o.stats.ThroughSeq)
	}
	if o.note != "" {
		c.r.Printf(out, "%s\n", o.note)
	}
}

// fail reports a replication that failed (ExitFailure).
func (c *replicateCmd) fail(err error) error {
	return &ExitError{Code: ExitFailure, Err: errors.New(c.r.String("replication failed: " + err.Error()))}
}
