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
	args     []string // the positional arguments
	render   func(raw json.RawMessage, v view) (string, error)
	// jobPrefix is jobs' ID argument, which may be the prefix of a job's
	// id, until fetch resolved it.
	jobPrefix string
}

// narrowCellMax is the widest a free-text cell (a stall, an error, an
// endpoint) is printed without -wide, in cells; longer ones are cut with
// "…".
const narrowCellMax = 40

// view is how a table is shown.
type view struct {
	// wide: every column, uncut (-wide).
	wide bool
	// width is the terminal's, in cells, that the table is fitted to
	// (cutting its widest columns first); 0: no limit (a pipe, or -wide).
	width int
	// now is what the durations of the STALL column count to.
	now time.Time
}

// Jobs runs `fdbrep jobs [flags]`: GET /_scheduler/jobs as a table.
func Jobs(ctx context.Context, args []string, env Env) error {
	t, err := newTableCmd("jobs", JobsUsage, "/_scheduler/jobs", args, env, 1)
	if err != nil {
		return err
	}
	t.render = renderJobs
	if len(t.args) == 1 {
		t.jobPrefix = t.args[0]
	}
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
	t.args = pos
	for _, p := range pos {
		t.path += "/" + url.PathEscape(p)
	}
	return t, nil
}

// run prints the table once, or with -watch on every interval until ctx
// ends (a terminal's screen is redrawn, a pipe gets one table per
// interval). A watch survives a cluster that does not answer, showing the
// error instead; a single print fails with it. A watch ended by Ctrl-C,
// or a print interrupted, is ExitInterrupted.
func (t *tableCmd) run(ctx context.Context) error {
	if !t.watch {
		text, err := t.fetch(ctx)
		if err != nil {
			return interrupted(ctx, &ExitError{Code: ExitFailure, Err: errors.New(t.r.String(err.Error()))})
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
			return &ExitError{Code: ExitInterrupted}
		}
		if err != nil {
			text = "error: " + err.Error() + "\n"
		}
		header := fmt.Sprintf("Every %v: %s on %s    %s", t.interval, t.path, t.cl, time.Now().Format(time.RFC3339))
		if w := terminalWidth(t.env.Stdout); w > 0 {
			header = cutCells(header, w)
		}
		header += "\n\n"
		if tty {
			header = "\x1b[H\x1b[2J" + header // home, clear screen
		}
		t.r.Printf(t.env.Stdout, "%s%s\n", header, text)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return &ExitError{Code: ExitInterrupted}
		}
	}
}

// fetch GETs the view and renders it. A job id that no job has, taken
// for the prefix of one (jobByPrefix), is replaced by that job's id for
// this fetch and the next ones.
func (t *tableCmd) fetch(ctx context.Context) (string, error) {
	var raw json.RawMessage
	err := t.cl.get(ctx, t.path, t.query, &raw)
	if notFound(err) && t.jobPrefix != "" {
		id, perr := jobByPrefix(ctx, t.cl, t.jobPrefix)
		switch {
		case perr != nil:
			return "", perr
		case id != "":
			t.path, t.jobPrefix = "/_scheduler/jobs/"+url.PathEscape(id), ""
			err = t.cl.get(ctx, t.path, t.query, &raw)
		}
	}
	if err != nil {
		return "", t.cl.explain(err)
	}
	if t.asJSON {
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return "", err
		}
		return b.String() + "\n", nil
	}
	return t.render(raw, t.view())
}

// view is how the next table is shown: unless -wide, fitted to the
// terminal's width as it is now.
func (t *tableCmd) view() view {
	v := view{wide: t.wide, now: time.Now()}
	if !t.wide {
		v.width = terminalWidth(t.env.Stdout)
	}
	return v
}

// endpoint is an endpoint as a narrow table shows it: user@host/db,
// without the scheme and the redacted password (-wide: as the view has
// it).
func (v view) endpoint(s *string) string {
	e := orDash(s)
	u, err := url.Parse(e)
	if v.wide || err != nil || u.Host == "" {
		return v.cut(e)
	}
	out := u.Host + strings.TrimSuffix(u.EscapedPath(), "/")
	if u.User != nil {
		out = u.User.Username() + "@" + out
	}
	return v.cut(out)
}

// cut shortens a free-text cell to narrowCellMax cells unless wide.
func (v view) cut(s string) string {
	if v.wide {
		return s
	}
	return cutCells(s, narrowCellMax)
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

// table lays rows out in aligned columns fitted to the view's width
// (layout), then the footer, then which columns that width left out.
func (v view) table(header []string, rows [][]string, fit columnsFit, footer string) string {
	out, dropped := layout(header, rows, v.width, fit)
	out += footer
	if len(dropped) > 0 {
		out += "(" + strings.Join(dropped, ", ") + " left out at this width; -wide shows every column)\n"
	}
	return out
}

// How the tables fit a terminal: counts and states are never cut; the
// columns least needed to follow the jobs go first.
var (
	jobsFit = columnsFit{keep: []string{"STATE", "WRITTEN", "PENDING", "IN SYNC"},
		drop: []string{"NODE", "SOURCE", "TARGET", "PENDING", "LAST EVENT", "DOC"}}
	docsFit = columnsFit{keep: []string{"STATE", "ERRORS", "WRITTEN", "PENDING", "IN SYNC"},
		drop: []string{"NODE", "SOURCE", "TARGET", "PENDING", "ERRORS", "DATABASE"}}
	failedFit = columnsFit{keep: []string{"STATUS"}, drop: []string{"REV", "TIME"}}
)

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
func (v view) syncCols(raw json.RawMessage) (inSync, stall string) {
	i := decodeInfo(raw)
	inSync, stall = "-", "-"
	switch {
	case i.CaughtUp == nil:
	case *i.CaughtUp:
		inSync = "yes"
	case i.ETASec != nil:
		inSync = "in " + span(time.Duration(*i.ETASec)*time.Second)
	default:
		inSync = "no"
	}
	if i.Stall != nil {
		stall = v.cut(v.stall(i.Stall))
	}
	return inSync, stall
}

// stall is a STALL cell: with -wide, the reason and the view's times
// ("backing_off since 2026-11-23T23:00:38Z until 2026-11-23T23:01:08Z");
// else the reason, how long it has lasted and, for a job backing off,
// when it is retried ("backing_off for 2m10s, retry in 30s"), which fit
// a narrow column where the timestamps were cut.
func (v view) stall(s *api.StallInfo) string {
	since, err := time.Parse(time.RFC3339, s.Since)
	if v.wide || err != nil {
		out := s.Reason + " since " + s.Since
		if s.Until != nil {
			out += " until " + *s.Until
		}
		return out
	}
	out := s.Reason + " for " + span(v.now.Sub(since))
	if s.Until != nil {
		if until, err := time.Parse(time.RFC3339, *s.Until); err == nil {
			out += ", retry in " + span(until.Sub(v.now))
		}
	}
	return out
}

// span is a duration as a table shows it, to the second under an hour,
// to the minute under a day, then to the hour: "45s", "2m10s", "3h12m",
// "2d3h" (a negative one, from clocks apart, is 0s).
func span(d time.Duration) string {
	s := int64(max(d, 0).Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}

// failedDocs lists the documents an entry's target refused (one
// entry's view), after its table.
func (v view) failedDocs(raw json.RawMessage) string {
	i := decodeInfo(raw)
	if len(i.FailedDocs) == 0 {
		return ""
	}
	rows := make([][]string, 0, len(i.FailedDocs))
	for _, f := range i.FailedDocs {
		rows = append(rows, []string{f.Time, f.ID, f.Rev, strconv.Itoa(f.Status), f.Error + ": " + f.Reason})
	}
	return "\nRefused by the target (the last " + strconv.Itoa(len(rows)) + "):\n" +
		v.table([]string{"TIME", "DOC ID", "REV", "STATUS", "ERROR"}, rows, failedFit, "")
}

func renderJobs(raw json.RawMessage, v view) (string, error) {
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
		inSync, stall := v.syncCols(j.Info)
		rows = append(rows, []string{id, doc, stateCol(j.State, j.Info), v.endpoint(j.Source), v.endpoint(j.Target), orDash(j.Node),
			orDash(j.User), written, pending, inSync, stall, j.StartTime, v.cut(last)})
	}
	header, rows := columns([]string{"ID", "DOC", "STATE", "SOURCE", "TARGET", "NODE", "USER", "WRITTEN", "PENDING", "IN SYNC", "STALL", "STARTED", "LAST EVENT"},
		rows, v.wide, "USER", "STARTED")
	out := v.table(header, rows, jobsFit, footer(len(list.Jobs), list.Offset, list.TotalRows, "job", "jobs"))
	if len(list.Jobs) == 1 {
		out += v.failedDocs(list.Jobs[0].Info)
	}
	return out, nil
}

func renderDocs(raw json.RawMessage, v view) (string, error) {
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
		inSync, stall := v.syncCols(d.Info)
		rows = append(rows, []string{d.Database, docIDCol(d), stateCol(d.State, d.Info), v.endpoint(d.Source), v.endpoint(d.Target), orDash(d.Node),
			strconv.Itoa(d.ErrorCount), written, pending, inSync, stall, d.LastUpdated, v.cut(errText)})
	}
	header, rows := columns([]string{"DATABASE", "DOC ID", "STATE", "SOURCE", "TARGET", "NODE", "ERRORS", "WRITTEN", "PENDING", "IN SYNC", "STALL", "LAST UPDATED", "ERROR"},
		rows, v.wide, "LAST UPDATED")
	out := v.table(header, rows, docsFit, footer(len(list.Docs), list.Offset, list.TotalRows, "document", "documents"))
	if len(list.Docs) == 1 {
		out += v.failedDocs(list.Docs[0].Info)
	}
	return out, nil
}

// docIDCol is a row's DOC ID: its document's id, and for a template's
// replication the database it replicates ("users [userdb-1]"), for the
// template's own row its pattern ("users [template userdb-*]").
func docIDCol(d api.DocInfo) string {
	switch t := d.Template; {
	case t == nil:
		return d.DocID
	case t.Database != "":
		return d.DocID + " [" + t.Database + "]"
	}
	return d.DocID + " [template " + d.Template.Databases + "]"
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

// footer says how many rows of how many were shown, of a thing called
// one, or many in the plural.
func footer(n, offset, total int, one, many string) string {
	switch {
	case n == total:
		return plural(total, one, many) + "\n"
	case n == 0:
		return fmt.Sprintf("none of the %s past -skip %d\n", plural(total, one, many), offset)
	}
	return fmt.Sprintf("%s %d-%d of %d (-limit, -skip)\n", many, offset+1, offset+n, total)
}

// plural is n and the noun it counts: "1 job", "0 jobs", "2 jobs".
func plural[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
