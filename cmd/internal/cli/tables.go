package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fdbrep/fdbrep/api"
)

// TableLimitDefault is how many rows jobs and docs ask for (-limit).
const TableLimitDefault = 100

// tableCmd is `fdbrep jobs` or `fdbrep docs`: one GET of a _scheduler
// view printed as a table, once or on every -interval with -watch.
type tableCmd struct {
	clusterFlags
	watch    bool
	asJSON   bool
	wide     bool
	interval time.Duration
	limit    int
	skip     int
	states   string
	env      Env
	r        *redactor
	cl       *client
	path     string
	query    url.Values
	render   func(raw json.RawMessage, wide bool) (string, error)
}

// narrowCellMax is the widest a free-text cell (a stall, an error, an
// endpoint) is printed without -wide; longer ones are cut with "…".
const narrowCellMax = 32

// Jobs runs `fdbrep jobs [flags]`: GET /_scheduler/jobs as a table.
func Jobs(ctx context.Context, args []string, env Env) error {
	t, err := newTableCmd("jobs", JobsUsage, "/_scheduler/jobs", args, env, 1)
	if err != nil {
		return err
	}
	t.render = renderJobs
	return t.run(ctx)
}

// Docs runs `fdbrep docs [flags] [DB [DOC]]`: GET
// /_scheduler/docs[/DB[/DOC]] as a table.
func Docs(ctx context.Context, args []string, env Env) error {
	t, err := newTableCmd("docs", DocsUsage, "/_scheduler/docs", args, env, 2)
	if err != nil {
		return err
	}
	t.render = renderDocs
	if t.states != "" {
		t.query.Set("states", t.states)
	}
	return t.run(ctx)
}

// newTableCmd parses the flags and arguments of a table command whose
// view is at base; each positional argument (a job id, a database and a
// document id) is a path segment after it.
func newTableCmd(name, usage, base string, args []string, env Env, maxArgs int) (*tableCmd, error) {
	t := &tableCmd{env: env, path: base}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() { fmt.Fprint(env.Stderr, usage); fs.PrintDefaults() }
	t.register(fs)
	fs.BoolVar(&t.watch, "watch", false, "refresh every -interval until Ctrl-C (in a pipe: print the table once per interval)")
	fs.DurationVar(&t.interval, "interval", IntervalDefault, "refresh period of -watch")
	fs.BoolVar(&t.asJSON, "json", false, "print the cluster's JSON reply instead of a table")
	fs.BoolVar(&t.wide, "wide", false, "every column, uncut, endpoints as URLs (without it: no USER, STARTED or LAST UPDATED, endpoints as user@host/db, long cells cut)")
	fs.IntVar(&t.limit, "limit", TableLimitDefault, "most rows to show")
	fs.IntVar(&t.skip, "skip", 0, "rows to skip")
	if name == "docs" {
		fs.StringVar(&t.states, "states", "", "only these states, comma-separated: pending, running, crashing, completed, failed")
	}
	pos, err := ParseFlags(fs, args, true)
	if err != nil {
		return nil, err
	}
	t.visited(fs)
	switch {
	case len(pos) > maxArgs:
		return nil, usageError("%s: unexpected arguments %q", name, pos[maxArgs:])
	case t.interval < IntervalMin || t.interval > IntervalMax:
		return nil, usageError("-interval %v: want between %v and %v", t.interval, IntervalMin, IntervalMax)
	case t.limit < 1 || t.skip < 0:
		return nil, usageError("-limit must be at least 1 and -skip at least 0")
	}
	creds, err := t.credentials()
	if err != nil {
		return nil, usageError("%v", err)
	}
	t.r = newRedactor(creds.secrets()...)
	if t.cl, err = newClient(t.clusterURL(ClusterURLDefault), creds); err != nil {
		return nil, usageError("%v", err)
	}
	t.query = url.Values{"limit": {strconv.Itoa(t.limit)}, "skip": {strconv.Itoa(t.skip)}}
	for _, p := range pos {
		t.path += "/" + url.PathEscape(p)
	}
	return t, nil
}

// run prints the table once, or with -watch on every interval until ctx
// ends (a terminal's screen is redrawn, a pipe gets one table per
// interval). A watch survives a cluster that does not answer, showing the
// error instead; a single print fails with it.
func (t *tableCmd) run(ctx context.Context) error {
	if !t.watch {
		text, err := t.fetch(ctx)
		if err != nil {
			return &ExitError{Code: ExitFailure, Err: errors.New(t.r.String(err.Error()))}
		}
		t.r.Printf(t.env.Stdout, "%s", text)
		return nil
	}
	tty := isTerminal(t.env.Stdout)
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		text, err := t.fetch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			text = "error: " + err.Error() + "\n"
		}
		header := fmt.Sprintf("Every %v: %s on %s    %s\n\n", t.interval, t.path, t.cl, time.Now().Format(time.RFC3339))
		if tty {
			header = "\x1b[H\x1b[2J" + header // home, clear screen
		}
		t.r.Printf(t.env.Stdout, "%s%s\n", header, text)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
	}
}

// fetch GETs the view and renders it.
func (t *tableCmd) fetch(ctx context.Context) (string, error) {
	var raw json.RawMessage
	if err := t.cl.get(ctx, t.path, t.query, &raw); err != nil {
		return "", t.cl.explain(err)
	}
	if t.asJSON {
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return "", err
		}
		return b.String() + "\n", nil
	}
	return t.render(raw, t.wide)
}

// endpoint is an endpoint as a narrow table shows it: user@host/db,
// without the scheme and the redacted password (-wide: as the view has
// it).
func endpoint(s *string, wide bool) string {
	v := orDash(s)
	u, err := url.Parse(v)
	if wide || err != nil || u.Host == "" {
		return cut(v, wide)
	}
	out := u.Host + strings.TrimSuffix(u.EscapedPath(), "/")
	if u.User != nil {
		out = u.User.Username() + "@" + out
	}
	return cut(out, wide)
}

// cut shortens a free-text cell to narrowCellMax runes unless wide.
func cut(s string, wide bool) string {
	r := []rune(s)
	if wide || len(r) <= narrowCellMax {
		return s
	}
	return string(r[:narrowCellMax-1]) + "…"
}

// columns keeps, unless wide, the columns of header and rows whose
// headers are not in wideOnly.
func columns(header []string, rows [][]string, wide bool, wideOnly ...string) ([]string, [][]string) {
	if wide {
		return header, rows
	}
	var keep []int
	for i, h := range header {
		if !slices.Contains(wideOnly, h) {
			keep = append(keep, i)
		}
	}
	pick := func(r []string) []string {
		out := make([]string, len(keep))
		for j, i := range keep {
			out[j] = r[i]
		}
		return out
	}
	narrow := make([][]string, len(rows))
	for i, r := range rows {
		narrow[i] = pick(r)
	}
	return pick(header), narrow
}

// table lays rows out in aligned columns.
func table(header []string, rows [][]string, footer string) string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
	b.WriteString(footer)
	return b.String()
}

// orDash is *s, or "-" for nil or empty.
func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// counts are a view entry's written and pending columns, or its error.
func counts(raw json.RawMessage) (written, pending, errText string) {
	i := decodeInfo(raw)
	if i.Error != "" {
		return "-", "-", i.Error + ": " + i.Reason
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "-", "-", ""
	}
	pending = "-"
	if i.ChangesPending != nil {
		pending = strconv.FormatInt(*i.ChangesPending, 10)
	}
	return strconv.FormatInt(i.DocsWritten, 10), pending, ""
}

// syncCols are a view entry's IN SYNC and STALL columns.
func syncCols(raw json.RawMessage) (inSync, stall string) {
	i := decodeInfo(raw)
	inSync, stall = "-", "-"
	switch {
	case i.CaughtUp == nil:
	case *i.CaughtUp:
		inSync = "yes"
	case i.ETASec != nil:
		inSync = "in " + (time.Duration(*i.ETASec) * time.Second).String()
	default:
		inSync = "no"
	}
	if i.Stall != nil {
		stall = i.Stall.Reason + " since " + i.Stall.Since
		if i.Stall.Until != nil {
			stall += " until " + *i.Stall.Until
		}
	}
	return inSync, stall
}

// failedDocs lists the documents an entry's target refused (one
// entry's view), after its table.
func failedDocs(raw json.RawMessage) string {
	i := decodeInfo(raw)
	if len(i.FailedDocs) == 0 {
		return ""
	}
	rows := make([][]string, 0, len(i.FailedDocs))
	for _, f := range i.FailedDocs {
		rows = append(rows, []string{f.Time, f.ID, f.Rev, strconv.Itoa(f.Status), f.Error + ": " + f.Reason})
	}
	return "\nRefused by the target (the last " + strconv.Itoa(len(rows)) + "):\n" +
		table([]string{"TIME", "DOC ID", "REV", "STATUS", "ERROR"}, rows, "")
}

func renderJobs(raw json.RawMessage, wide bool) (string, error) {
	var list api.JobList
	var one api.JobInfo
	switch {
	case json.Unmarshal(raw, &one) == nil && one.JobID != "":
		// /_scheduler/jobs/{id} is one entry, not a list.
		list = api.JobList{TotalRows: 1, Jobs: []api.JobInfo{one}}
	case json.Unmarshal(raw, &list) != nil:
		return "", errors.New("unexpected _scheduler/jobs reply")
	}
	rows := make([][]string, 0, len(list.Jobs))
	for _, j := range list.Jobs {
		id := orDash(j.ID)
		if j.ID == nil {
			id = "(job " + j.JobID + ")"
		}
		doc := "-"
		if j.DocID != nil {
			doc = orDash(j.Database) + "/" + *j.DocID
		}
		written, pending, errText := counts(j.Info)
		last := ""
		if len(j.History) > 0 {
			last = j.History[0].Type
			if j.History[0].Reason != "" {
				last += ": " + j.History[0].Reason
			}
		}
		if errText != "" {
			last = errText
		}
		inSync, stall := syncCols(j.Info)
		rows = append(rows, []string{id, doc, stateCol(j.State, j.Info), endpoint(j.Source, wide), endpoint(j.Target, wide), orDash(j.Node),
			orDash(j.User), written, pending, inSync, cut(stall, wide), j.StartTime, cut(last, wide)})
	}
	header, rows := columns([]string{"ID", "DOC", "STATE", "SOURCE", "TARGET", "NODE", "USER", "WRITTEN", "PENDING", "IN SYNC", "STALL", "STARTED", "LAST EVENT"},
		rows, wide, "USER", "STARTED")
	out := table(header, rows, footer(len(list.Jobs), list.Offset, list.TotalRows, "jobs"))
	if len(list.Jobs) == 1 {
		out += failedDocs(list.Jobs[0].Info)
	}
	return out, nil
}

func renderDocs(raw json.RawMessage, wide bool) (string, error) {
	var list api.DocList
	var one api.DocInfo
	switch {
	case json.Unmarshal(raw, &one) == nil && one.DocID != "":
		// /_scheduler/docs/{db}/{doc} is one entry, not a list.
		list = api.DocList{TotalRows: 1, Docs: []api.DocInfo{one}}
	case json.Unmarshal(raw, &list) != nil:
		return "", errors.New("unexpected _scheduler/docs reply")
	}
	rows := make([][]string, 0, len(list.Docs))
	for _, d := range list.Docs {
		written, pending, errText := counts(d.Info)
		inSync, stall := syncCols(d.Info)
		rows = append(rows, []string{d.Database, d.DocID, stateCol(d.State, d.Info), endpoint(d.Source, wide), endpoint(d.Target, wide), orDash(d.Node),
			strconv.Itoa(d.ErrorCount), written, pending, inSync, cut(stall, wide), d.LastUpdated, cut(errText, wide)})
	}
	header, rows := columns([]string{"DATABASE", "DOC ID", "STATE", "SOURCE", "TARGET", "NODE", "ERRORS", "WRITTEN", "PENDING", "IN SYNC", "STALL", "LAST UPDATED", "ERROR"},
		rows, wide, "LAST UPDATED")
	out := table(header, rows, footer(len(list.Docs), list.Offset, list.TotalRows, "documents"))
	if len(list.Docs) == 1 {
		out += failedDocs(list.Docs[0].Info)
	}
	return out, nil
}

// stateCol is a job's STATE: its view state, or "parked" for a running
// replication that is parked (caught up, waiting for a change to its
// source without a slot; the views show it running, with info.parked).
func stateCol(state string, info json.RawMessage) string {
	if state == "running" && decodeInfo(info).Parked != nil {
		return "parked"
	}
	return state
}

// footer says how many rows of how many were shown.
func footer(n, offset, total int, what string) string {
	switch {
	case n == total:
		return fmt.Sprintf("%d %s\n", total, what)
	case n == 0:
		return fmt.Sprintf("none of the %d %s past -skip %d\n", total, what, offset)
	}
	return fmt.Sprintf("%s %d-%d of %d (-limit, -skip)\n", what, offset+1, offset+n, total)
}
