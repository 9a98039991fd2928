package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Defaults of fdbrep migrate-check.
const (
	// MigrateDBDefault is the replicator database checked (-db).
	MigrateDBDefault = "_replicator"
	// MigrateParallelDefault is how many replications are checked at
	// once (each is a few requests to its source and target).
	MigrateParallelDefault = 8
	// migratePageSize is how many documents one GET _all_docs reads.
	migratePageSize = 500
)

// MigrateCheckUsage is fdbrep migrate-check's -h.
const MigrateCheckUsage = `usage: fdbrep migrate-check [flags] URL

Before the replications of the CouchDB at URL move into fdbrep (README,
"Migrating from CouchDB"), says for each document of its replicator database
(-db) whether its replication will go on from its checkpoint: the replication
id fdbrep computes with that server's UUID (GET /, or -uuid), whether it is
CouchDB's (from its _scheduler/docs), whether the source and the target hold
a checkpoint under it, and the sequence the replication would go on from.
Asks what a replication's start asks (its checkpoint documents), and writes
nothing. Credentials for URL: its userinfo, -user/-password, $FDBREP_USER and
$FDBREP_PASSWORD, or the netrc entry of its host; a server admin's, to read the
documents with their endpoints' credentials.

flags:
`

// migrateCmd is one fdbrep migrate-check.
type migrateCmd struct {
	clusterFlags
	db       string
	uuid     string
	parallel int
	env      Env
	r        *redactor
	cl       *client
}

// migrateRow is one document's line.
type migrateRow struct {
	doc, id, couchID string
	source, target   string
	from             string
	keeps            bool
	runs             bool
	failed           bool // its endpoints could not be asked
}

// MigrateCheck runs `fdbrep migrate-check [flags] URL`.
func MigrateCheck(ctx context.Context, args []string, env Env) error {
	c := &migrateCmd{env: env}
	fs := flag.NewFlagSet("migrate-check", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() { fmt.Fprint(env.Stderr, MigrateCheckUsage); fs.PrintDefaults() }
	c.registerCreds(fs)
	fs.StringVar(&c.db, "db", MigrateDBDefault, "the replicator database to check")
	fs.StringVar(&c.uuid, "uuid", "", "compute the ids with this server UUID (default: the server's, from GET /; give fdbrep's [couchdb] uuid if it differs)")
	fs.IntVar(&c.parallel, "parallel", MigrateParallelDefault, "replications checked at once")
	pos, err := ParseFlags(fs, args, true)
	if err != nil {
		return err
	}
	c.visited(fs)
	if len(pos) != 1 {
		return usageError("migrate-check: want the URL of one CouchDB server, e.g. http://admin:pass@old:5984; see fdbrep help migrate-check")
	}
	if c.parallel < 1 {
		return usageError("-parallel must be at least 1")
	}
	creds, err := c.credentials()
	if err != nil {
		return usageError("%v", err)
	}
	c.r = newRedactor(creds.secrets()...)
	if c.cl, err = newClient(pos[0], creds); err != nil {
		return usageError("%v", strings.Replace(err.Error(), "cluster URL", "URL", 1))
	}
	c.r.add(c.cl.creds.Password)
	err = c.run(ctx)
	if err != nil {
		err = &ExitError{Code: ExitFailure, Err: errors.New(c.r.String(err.Error()))}
	}
	return interrupted(ctx, err)
}

// refused is a request the server answered with an error, in one line.
func (c *migrateCmd) refused(what string, err error) error {
	var ae *apiError
	if !errors.As(err, &ae) {
		return fmt.Errorf("migrate-check: %s: %w", what, err)
	}
	switch unauthorized := ae.Status == http.StatusUnauthorized; {
	case unauthorized && c.cl.creds.User == "":
		return fmt.Errorf("migrate-check: %s wants credentials (%s): give a server admin's in the URL, -user/-password or netrc", c.cl, ae)
	case unauthorized:
		return fmt.Errorf("migrate-check: %s refused the credentials (%s): give a server admin's in the URL, -user/-password or netrc", c.cl, ae)
	case ae.Status == http.StatusForbidden:
		return fmt.Errorf("migrate-check: %s: %s: a server admin's credentials read the replication documents with their endpoints' credentials", c.cl, ae)
	}
	return fmt.Errorf("migrate-check: %s, %s: %w", c.cl, what, ae)
}

func (c *migrateCmd) run(ctx context.Context) error {
	var welcome struct {
		UUID    string `json:"uuid"`
		Version string `json:"version"`
	}
	if err := c.cl.get(ctx, "/", nil, &welcome); err != nil {
		return c.refused("GET /", err)
	}
	if _, err := c.cl.session(ctx); err != nil {
		return c.refused("GET /_session", err)
	}
	uuid := c.uuid
	if uuid == "" {
		if uuid = welcome.UUID; uuid == "" {
			return fmt.Errorf("migrate-check: %s reports no server UUID in GET /: give it with -uuid", c.cl)
		}
	}
	docs, err := c.replicatorDocs(ctx)
	if err != nil {
		return err
	}
	couchIDs := c.couchIDs(ctx)
	var client engine.ClientSettings
	if c.env.Client != nil {
		if client, err = c.env.Client(); err != nil {
			return err
		}
	}
	rows := make([]migrateRow, len(docs))
	reps := make([]*engine.Replication, len(docs))
	for i, d := range docs {
		rows[i], reps[i] = c.parse(d, couchIDs)
	}
	sem := make(chan struct{}, c.parallel)
	var wg sync.WaitGroup
	for i, rep := range reps {
		if rep == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.probe(ctx, &rows[i], *rep, engine.Options{ServerUUID: uuid, Client: client}, couchIDs)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	c.print(rows, uuid)
	return nil
}

// repDoc is a document of the replicator database.
type repDoc struct {
	id   string
	body json.RawMessage
}

// replicatorDocs reads the database's documents, but its design
// documents, migratePageSize at a time.
func (c *migrateCmd) replicatorDocs(ctx context.Context) ([]repDoc, error) {
	var out []repDoc
	start := ""
	for {
		q := url.Values{"include_docs": {"true"}, "limit": {strconv.Itoa(migratePageSize + 1)}}
		if start != "" {
			q.Set("startkey", strconv.Quote(start))
		}
		var page struct {
			Rows []struct {
				ID  string          `json:"id"`
				Doc json.RawMessage `json:"doc"`
			} `json:"rows"`
		}
		if err := c.cl.get(ctx, "/"+url.PathEscape(c.db)+"/_all_docs", q, &page); err != nil {
			return nil, c.refused("GET /"+c.db+"/_all_docs", err)
		}
		rows := page.Rows
		more := len(rows) > migratePageSize
		if more {
			start, rows = rows[migratePageSize].ID, rows[:migratePageSize]
		}
		for _, r := range rows {
			if !strings.HasPrefix(r.ID, "_design/") {
				out = append(out, repDoc{id: r.ID, body: r.Doc})
			}
		}
		if !more {
			return out, nil
		}
	}
}

// couchIDs are the replication ids CouchDB's _scheduler/docs shows for the
// database's documents (none when it does not answer: an older CouchDB,
// or not an admin).
func (c *migrateCmd) couchIDs(ctx context.Context) map[string]string {
	ids := map[string]string{}
	for skip := 0; ; skip += migratePageSize {
		var page struct {
			Docs []struct {
				DocID string  `json:"doc_id"`
				ID    *string `json:"id"`
			} `json:"docs"`
		}
		q := url.Values{"limit": {strconv.Itoa(migratePageSize)}, "skip": {strconv.Itoa(skip)}}
		if c.cl.get(ctx, "/_scheduler/docs/"+url.PathEscape(c.db), q, &page) != nil {
			return ids
		}
		for _, d := range page.Docs {
			if d.ID != nil {
				ids[d.DocID] = *d.ID
			}
		}
		if len(page.Docs) < migratePageSize {
			return ids
		}
	}
}

// parse is a document's row before its replication is probed, and the
// replication (nil for one that will not run: completed, failed, or that
// fdbrep's parser refuses). Its passwords join the redacted secrets.
func (c *migrateCmd) parse(d repDoc, couchIDs map[string]string) (migrateRow, *engine.Replication) {
	row := migrateRow{doc: d.id, id: "-", couchID: "-", source: "-", target: "-"}
	if id, ok := couchIDs[d.id]; ok {
		row.couchID = id
	}
	var state struct {
		State string `json:"_replication_state"`
	}
	_ = json.Unmarshal(d.body, &state)
	spec, err := replicator.ParseSpec(d.body)
	var rep engine.Replication
	if err == nil {
		c.r.add(spec.Source.Password, spec.Target.Password)
		rep, err = spec.Replication()
	}
	switch {
	case err != nil:
		row.from = "not run: " + replicator.Reason(err)
		return row, nil
	case state.State == "completed" || state.State == "failed":
		row.from = "not run: " + state.State + " (as in CouchDB)"
		return row, nil
	}
	row.runs = true
	return row, &rep
}

// probe fills in row what the replication's start would find.
func (c *migrateCmd) probe(ctx context.Context, row *migrateRow, rep engine.Replication, opts engine.Options, couchIDs map[string]string) {
	p, err := engine.FindCheckpoint(ctx, rep, opts)
	if p.ID != "" {
		row.id = p.ID
		if couchIDs[row.doc] == p.ID {
			row.couchID = "same"
		}
	}
	if err != nil {
		row.from, row.failed = "? "+err.Error(), true
		return
	}
	row.source, row.target = yesNo(p.OnSource), yesNo(p.OnTarget)
	switch {
	case p.Start.Found && p.Start.MigratedFrom != "":
		row.keeps, row.from = true, fmt.Sprintf("its checkpoint, %s (under %s)", p.Start.Since, p.Start.MigratedFrom)
	case p.Start.Found:
		row.keeps, row.from = true, "its checkpoint, "+p.Start.Since
	case len(rep.SinceSeq) > 0:
		row.from = "since_seq " + p.Start.Since + " (no checkpoint)"
	default:
		row.from = "the start, 0 (no checkpoint)"
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// print writes the table and its summary.
func (c *migrateCmd) print(rows []migrateRow, uuid string) {
	header := []string{"DOC", "REPLICATION ID", "COUCHDB'S ID", "ON SOURCE", "ON TARGET", "GOES ON FROM"}
	cells := make([][]string, len(rows))
	runs, keeps, failed := 0, 0, 0
	for i, r := range rows {
		cells[i] = []string{r.doc, r.id, r.couchID, r.source, r.target, r.from}
		switch {
		case r.keeps:
			keeps++
		case r.failed:
			failed++
		}
		if r.runs {
			runs++
		}
	}
	v := view{width: terminalWidth(c.env.Stdout)}
	footer := fmt.Sprintf("\n%s, server UUID %s, database %s: %d of %d replications that will run go on from their checkpoints; %d start over",
		c.cl, uuid, c.db, keeps, runs, runs-keeps-failed)
	if failed > 0 {
		footer += fmt.Sprintf("; %d could not be checked (?)", failed)
	}
	footer += ".\n"
	c.r.Printf(c.env.Stdout, "%s", v.table(header, cells, migrateFit, footer))
}

// migrateFit: the verdict is never cut.
var migrateFit = columnsFit{keep: []string{"ON SOURCE", "ON TARGET"}, drop: []string{"COUCHDB'S ID", "ON SOURCE", "ON TARGET"}}
