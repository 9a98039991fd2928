package replicator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// TemplateType is the fdbjobs type of the templates' jobs: one per
// template document (see doc.go, "Templates"), which one replication node
// holds and follows, fenced by its job lock like any job. Its id is the
// document's job id (DocJobID), in a type of its own.
const TemplateType = "rep_template"

// Templates (see doc.go, "Templates").
const (
	// TemplateSideSource and TemplateSideTarget name the endpoint of a
	// template whose server's databases it matches (TemplateSpec.Side).
	TemplateSideSource = "source"
	TemplateSideTarget = "target"
	// TemplatePatternMax bounds a template's pattern, in bytes.
	TemplatePatternMax = 1024
	// TemplateDatabasesDefault is how many databases one template makes
	// replications of at most: the databases past it (in name order)
	// get none, and the template's state says how many.
	TemplateDatabasesDefault = 100_000
	// TemplateDB is what the other endpoint's URL names the matched
	// database with: "http://backup:5984/{db}" or ".../copy-of-{db}".
	TemplateDB = "{db}"
)

// templateDBStored is TemplateDB as an endpoint's stored URL has it
// (percent-encoded by the URL's normalization).
const templateDBStored = "%7Bdb%7D"

// childSep separates a template child's database from its template's
// document id in the view index's document ids (JobData.IndexDocID): a
// byte that valid UTF-8, and so no document id, ever holds.
const childSep = "\xff"

// TemplateSpec is what makes a replication a template: the endpoint (Side)
// that names a server, not a database, and the pattern of that server's
// databases it replicates, a glob (Glob: * any run of characters, ? one)
// or a regular expression (Regex, Go's RE2 syntax, matched against the
// whole name).
type TemplateSpec struct {
	Side  string `json:"side"`
	Glob  string `json:"databases,omitempty"`
	Regex string `json:"regex,omitempty"`
}

// Pattern is the template's pattern as its document wrote it: the glob,
// or the regular expression between slashes.
func (t *TemplateSpec) Pattern() string {
	if t.Regex != "" {
		return "/" + t.Regex + "/"
	}
	return t.Glob
}

// Matcher returns the test of a database name against the pattern. A
// system database (its name starts with "_") matches only a pattern that
// starts with "_" (a regular expression: with "_" or "^_").
func (t *TemplateSpec) Matcher() (func(string) bool, error) {
	re, err := t.regexp()
	if err != nil {
		return nil, err
	}
	system := strings.HasPrefix(t.Glob, "_") || strings.HasPrefix(strings.TrimPrefix(t.Regex, "^"), "_")
	return func(db string) bool { return (system || !strings.HasPrefix(db, "_")) && re.MatchString(db) }, nil
}

func (t *TemplateSpec) regexp() (*regexp.Regexp, error) {
	if t.Regex != "" {
		return regexp.Compile("^(?:" + t.Regex + ")$")
	}
	var b strings.Builder
	b.WriteString("^")
	for _, r := range t.Glob {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// dbNameChars are the characters of CouchDB's database names.
const dbNameChars = "abcdefghijklmnopqrstuvwxyz0123456789_$()+-/"

// parseTemplate parses the "databases" of endpoint name (its object's
// member v): a glob string, or {"regex": "..."}.
func parseTemplate(v json.RawMessage, name string) (*TemplateSpec, error) {
	t := &TemplateSpec{Side: name}
	var glob string
	var obj struct {
		Regex *string `json:"regex"`
	}
	strict := func() error {
		d := json.NewDecoder(bytes.NewReader(v))
		d.DisallowUnknownFields()
		return d.Decode(&obj)
	}
	switch {
	case isNull(v):
	case json.Unmarshal(v, &glob) == nil:
		if glob == "" || len(glob) > TemplatePatternMax {
			return nil, newReason(ErrBadRequest, "`%s.databases` must be a pattern of 1 to %d bytes", name, TemplatePatternMax)
		}
		if i := strings.IndexFunc(glob, func(r rune) bool { return r != '*' && r != '?' && !strings.ContainsRune(dbNameChars, r) }); i >= 0 {
			return nil, newReason(ErrBadRequest, "`%s.databases`: %q can match no database: a pattern has the characters of database names "+
				"(a-z, 0-9, _$()+-/), * (any characters) and ? (one); for more, write {\"regex\": \"...\"}", name, glob[i:i+1])
		}
		t.Glob = glob
	case isObject(v) && strict() == nil && obj.Regex != nil:
		if *obj.Regex == "" || len(*obj.Regex) > TemplatePatternMax {
			return nil, newReason(ErrBadRequest, "`%s.databases.regex` must be a regular expression of 1 to %d bytes", name, TemplatePatternMax)
		}
		t.Regex = *obj.Regex
		_, err := regexp.Compile(t.Regex) // its own text in the error
		if err == nil {
			_, err = t.regexp()
		}
		if err != nil {
			return nil, newReason(ErrBadRequest, "`%s.databases.regex` is not a valid regular expression: %s", name,
				strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		return t, nil
	}
	switch {
	case t.Glob != "":
	case isObject(v):
		return nil, newReason(ErrBadRequest, "`%s.databases` must be {\"regex\": \"...\"}, with no other member", name)
	default:
		return nil, newReason(ErrBadRequest, "`%s.databases` must be a pattern such as \"userdb-*\", or {\"regex\": \"^userdb-[0-9a-f]+$\"}", name)
	}
	return t, nil
}

// checkTemplate checks a parsed replication that may be a template: at
// most one endpoint names databases, {db} only in the other endpoint of a
// template, and a template's replication of a database is valid.
func (s *Spec) checkTemplate() error {
	for _, ep := range []struct {
		name string
		e    EndpointSpec
	}{{"source", s.Source}, {"target", s.Target}} {
		if _, q, ok := strings.Cut(ep.e.URL, "?"); ok && (strings.Contains(q, templateDBStored) || strings.Contains(q, TemplateDB)) {
			return newReason(ErrBadRequest, "`%s`: %s names the database in the URL's path, not in its query string", ep.name, TemplateDB)
		}
		if strings.Contains(ep.e.URL, templateDBStored) && (s.Template == nil || s.Template.Side == ep.name) {
			return newReason(ErrBadRequest, "`%s` names %s, which only the other endpoint of a template may: "+
				"a template's source (or target) is {\"url\": \"http://server/\", \"databases\": \"userdb-*\"}", ep.name, TemplateDB)
		}
	}
	if s.Template == nil {
		return nil
	}
	_, err := s.Child(s.Template.sample())
	return err
}

// sample is a database name the pattern matches, when it is a glob (a
// name made of its literal characters and "a" for its wildcards; for a
// regular expression, "a"), with which a template is checked as it is
// written.
func (t *TemplateSpec) sample() string {
	if t.Glob == "" {
		return "a"
	}
	name := strings.NewReplacer("*", "a", "?", "a").Replace(t.Glob)
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		name = "a" + name // a database name starts with a letter
	}
	return name
}

// Child returns the replication a template makes for database db of its
// server: the template's endpoint names db, and TemplateDB in the other's
// URL is replaced by db. Its errors wrap ErrBadRequest.
func (s *Spec) Child(db string) (*Spec, error) {
	if s.Template == nil {
		return nil, newReason(ErrBadRequest, "not a template")
	}
	c := *s
	c.Template = nil
	pat, other := &c.Source, &c.Target
	if s.Template.Side == TemplateSideTarget {
		pat, other = other, pat
	}
	server := strings.TrimSuffix(pat.URL, "/") + "/"
	esc := url.PathEscape(db)
	pat.URL = server + esc + "/"
	named := strings.Contains(other.URL, templateDBStored)
	other.URL = strings.ReplaceAll(other.URL, templateDBStored, esc)
	if _, err := c.Replication(); err != nil {
		return nil, err
	}
	if rest, ok := strings.CutPrefix(other.URL, server); ok {
		// The other endpoint is on the template's server. Named after db,
		// a database the template matches would get a replication of its
		// own, and so on without end; a fixed one would replicate into
		// itself.
		name, err := url.PathUnescape(strings.TrimSuffix(rest, "/"))
		match, merr := s.Template.Matcher()
		side := map[string]string{TemplateSideSource: "target", TemplateSideTarget: "source"}[s.Template.Side]
		switch {
		case err != nil || merr != nil:
		case named && match(name):
			return nil, newReason(ErrBadRequest, "the %s of database %s would be %s, which the template matches too: "+
				"a template would replicate into its own databases without end", side, db, name)
		case name == db:
			return nil, newReason(ErrBadRequest, "the %s of database %s would be itself", side, db)
		}
	}
	return &c, nil
}

// ShowTemplateURL shows TemplateDB in a stored URL as its document wrote
// it.
func ShowTemplateURL(u string) string { return strings.ReplaceAll(u, templateDBStored, TemplateDB) }

// ChildJobID is the job id of the replication a template document makes
// for database db: "<db instance uuid>:<database>|<doc id>", which no
// document's job id (DocJobID) is, as database names hold no "|".
func ChildJobID(dbUUID, docID, db string) string { return dbUUID + ":" + db + "|" + docID }

// IndexDocID is the document id the view index lists the job under: its
// document's, and for a template's replication the database after it
// (a byte no document id holds between them), so that a template's
// replications list right after it, by database.
func (d *JobData) IndexDocID() string {
	if d.TemplateDB == "" {
		return d.DocID
	}
	return d.DocID + childSep + d.TemplateDB
}

// indexJobID is the job id of the job the view index lists under
// indexDocID (IndexDocID) in database instance dbUUID.
func indexJobID(dbUUID, indexDocID string) string {
	if doc, db, ok := strings.Cut(indexDocID, childSep); ok {
		return ChildJobID(dbUUID, doc, db)
	}
	return DocJobID(dbUUID, indexDocID)
}

// TemplateData is a template job's data: the template (its document's
// replication, credentials sealed as the document has them) and how its
// node follows the template's server.
type TemplateData struct {
	Rep         *Spec  `json:"rep"`
	DBName      string `json:"db_name"`
	DBUUID      string `json:"db_uuid"`
	DocID       string `json:"doc_id"`
	DocOwner    string `json:"doc_owner,omitempty"`
	UserLimited bool   `json:"user_limited,omitempty"`
	// Ending: the document was deleted or no longer is a template; the
	// job removes the template's replications, then ends.
	Ending bool `json:"ending,omitempty"`
	// Mode is how it follows its server (WatchDBUpdates or WatchPoll, ""
	// before its first listing), Reason why it polls, Since the
	// _db_updates sequence it has followed up to, FeedTried when a
	// polling template last asked for the feed (Unix ms).
	Mode      string `json:"mode,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Since     string `json:"since,omitempty"`
	FeedTried int64  `json:"feed_tried,omitempty"`
	// Listed is when its last whole listing of the server's databases
	// ended (Unix ms), Databases how many replications it has, and
	// Unmade how many matching databases got none (a bound or a limit),
	// UnmadeReason why.
	Listed       int64  `json:"listed,omitempty"`
	Databases    int    `json:"databases"`
	Unmade       int    `json:"unmade,omitempty"`
	UnmadeReason string `json:"unmade_reason,omitempty"`
	// Error is why it cannot list or follow its server now ("" once the
	// server answers again).
	Error string `json:"error,omitempty"`
	// Node is the node that follows it, and Updated when it last wrote
	// (Unix ms).
	Node    string `json:"node,omitempty"`
	Updated int64  `json:"updated,omitempty"`
}

// Kind is TemplateType: template jobs are the arguments of a job layer
// Runtime's worker (Templates.NewRuntime).
func (TemplateData) Kind() string { return TemplateType }

// Encode encodes the template's data.
func (t *TemplateData) Encode() json.RawMessage {
	b, _ := json.Marshal(t)
	return b
}

// SealScope is the sealing scope of the template's credentials: its
// document's, which its replications share.
func (t *TemplateData) SealScope() string { return DocScope(t.DBName, t.DocID) }

// DecodeTemplateData decodes a template job's data: the Runtime's envelope
// of its TemplateData, or the TemplateData alone (as Templates.Put adds it).
func DecodeTemplateData(raw json.RawMessage) (*TemplateData, error) {
	t := &TemplateData{}
	if err := fdbjobs.UnmarshalArgs(raw, t); err != nil {
		return nil, fmt.Errorf("replicator: template data: %w", err)
	}
	return t, nil
}

// Templates are the template replications' jobs (TemplateType), one per
// template document, and the replications each makes of the databases
// its pattern matches (its children, in the view index).
type Templates struct {
	s *Store
}

// Templates returns the template documents' jobs and their replications.
func (s *Store) Templates() *Templates { return s.templates }

// NewRuntime returns a job layer Runtime that works the template
// jobs with worker: the one runner of held template jobs.
func (tp *Templates) NewRuntime(worker fdbjobs.Worker[TemplateData], opts fdbjobs.WorkerOptions, ropts fdbjobs.RuntimeOptions) (*fdbjobs.Runtime, error) {
	return newRuntime(tp.s, worker, opts, ropts)
}

// Get returns template job id's data and state, nil when there is
// none.
func (tp *Templates) Get(ctx context.Context, tr kv.ReadTransactor, id string) (*TemplateData, fdbjobs.State, error) {
	st, raw, err := tp.s.jobs.Job(ctx, tr, TemplateType, id)
	if errors.Is(err, fdbjobs.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	t, err := DecodeTemplateData(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("%v", err) // corrupt data is no retryable kv error
	}
	return t, st, nil
}

// Put makes t the template of its document, in tr (the
// document's write): unless the template job id already follows the same
// template, it replaces that job (a running one's worker stops within the
// watch latency) by a pending one, which lists the server again and
// replaces the replications the change touched. It reports whether it
// wrote.
func (tp *Templates) Put(ctx context.Context, tr kv.Transaction, id string, t *TemplateData, jobTimeout time.Duration) (bool, error) {
	old, st, err := tp.Get(ctx, tr, id)
	if err != nil {
		return false, err
	}
	if old != nil && st != fdbjobs.Finished && !old.Ending && !t.Ending && sameTemplate(old, t) {
		return false, nil
	}
	if old != nil && old.Ending && t.Ending && st != fdbjobs.Finished {
		return false, nil // being ended already
	}
	if old == nil && t.Ending {
		return false, nil
	}
	if old != nil {
		if err := tp.s.jobs.Remove(ctx, tr, TemplateType, id); err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
			return false, err
		}
	}
	if _, err := tp.s.jobs.TypeTimeout(ctx, tr, TemplateType); errors.Is(err, fdbjobs.ErrNotFound) {
		if err := tp.s.jobs.SetTypeTimeout(ctx, tr, TemplateType, jobTimeout); err != nil {
			return false, err
		}
	} else if err != nil {
		return false, err
	}
	return true, tp.s.jobs.Add(ctx, tr, TemplateType, id, t.Encode(), 0)
}

// End ends the template of job id, if it has one, in tr (the
// write that deletes its document or makes it something else): its job,
// replaced by one marked Ending, removes the template's replications and
// ends. It reports whether there was one to end.
func (tp *Templates) End(ctx context.Context, tr kv.Transaction, id string, jobTimeout time.Duration) (bool, error) {
	old, st, err := tp.Get(ctx, tr, id)
	if err != nil || old == nil || st == fdbjobs.Finished {
		return false, err
	}
	end := *old
	end.Ending, end.Mode, end.Since, end.Reason, end.Error = true, "", "", "", ""
	return tp.Put(ctx, tr, id, &end, jobTimeout)
}

func sameTemplate(a, b *TemplateData) bool {
	return a.DocOwner == b.DocOwner && a.UserLimited == b.UserLimited && a.Rep != nil && b.Rep != nil &&
		*a.Rep.Template == *b.Rep.Template && SameReplication(a.Rep, b.Rep) && a.Rep.Paused == b.Rep.Paused
}

// Children returns up to limit databases, after after ("" for the first),
// that template document docID of database instance dbUUID has a
// replication of, in name order, from the view index.
func (tp *Templates) Children(tr kv.ReadTransaction, dbUUID, docID, after string, limit int) ([]string, error) {
	prefix := docID + childSep
	rng := kv.KeyRange{Begin: tp.s.k.dbJobKey(dbUUID, prefix), End: tp.s.k.dbJobKey(dbUUID, prefix+"\xff")}
	if after != "" {
		rng.Begin = append(tp.s.k.dbJobKey(dbUUID, prefix+after), 0)
	}
	kvs, err := tr.GetRange(rng, kv.RangeOptions{Limit: limit}).GetSliceWithError()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(kvs))
	for _, e := range kvs {
		t, err := tp.s.k.dbJobs.Unpack(e.Key)
		if err != nil || len(t) != 2 {
			continue
		}
		id, _ := t[1].(string)
		out = append(out, strings.TrimPrefix(id, prefix))
	}
	return out, nil
}

// PutChild makes sure template t has its replication of database db, as
// the template now says, in tr: a replication it has already (in any
// state: a one-shot one that completed is not run again) is left alone
// unless the template changed it, which replaces it as a document's write
// does. A user who is not a server admin is held to
// MaxReplicationsPerUser (an error wrapping ErrForbidden). It reports
// whether it wrote.
func (tp *Templates) PutChild(ctx context.Context, tr kv.Transaction, c *Config, t *TemplateData, db string) (bool, error) {
	spec, err := t.Rep.Child(db)
	if err != nil {
		return false, err
	}
	id := ChildJobID(t.DBUUID, t.DocID, db)
	old, oldState, err := tp.s.Job(ctx, tr, id)
	if err != nil {
		return false, err
	}
	if old != nil && old.Rep != nil && SameReplication(old.Rep, spec) && (old.State == StatePaused) == spec.Paused {
		return false, nil
	}
	if t.UserLimited {
		if err := tp.s.CheckUserCount(tr, c, t.DocOwner, Counted(old, oldState, t.DocOwner)); err != nil {
			return false, err
		}
	}
	now := c.Clock.Now()
	d := &JobData{Rep: spec, DocOwner: t.DocOwner, DBName: t.DBName, DBUUID: t.DBUUID, DocID: t.DocID, TemplateDB: db, UserLimited: t.UserLimited}
	Lifecycle{MaxHistory: c.MaxHistory}.Transform(d, Change{Kind: Added, At: now})
	if spec.Paused {
		d.State, d.StateInfo = StatePaused, PausedInfo(now)
		if old != nil && oldState == fdbjobs.Running {
			d.Node = old.Node
		}
		if err := tp.s.PauseJob(ctx, tr, id, old, d); err != nil {
			return false, err
		}
		return true, tp.s.SetSchedule(ctx, tr, id, spec, old)
	}
	if err := tp.s.EnqueueJob(ctx, tr, c, now, id, old, d); err != nil {
		return false, err
	}
	return true, tp.s.SetSchedule(ctx, tr, id, spec, old)
}

// RemoveChild removes template document docID's replication of database
// db, if it has one, in tr (a running one stops within the watch
// latency). It reports whether there was one.
func (tp *Templates) RemoveChild(ctx context.Context, tr kv.Transaction, dbUUID, docID, db string) (bool, error) {
	id := ChildJobID(dbUUID, docID, db)
	old, _, err := tp.s.Job(ctx, tr, id)
	if err != nil || old == nil {
		return false, err
	}
	if err := tp.s.RemoveJob(ctx, tr, id, old); err != nil {
		return false, err
	}
	return true, tp.s.SetSchedule(ctx, tr, id, nil, old)
}

// setup registers the template type with jobTimeout and a few
// shards (templates are few).
func (tp *Templates) setup(ctx context.Context, jobTimeout time.Duration) error {
	return tp.s.setupType(ctx, TemplateType, jobTimeout, watchShards)
}

// Holds fails with fdbjobs.ErrHalt, in tr, when job is no longer its
// worker's: the writes a template makes of its replications are fenced by
// its job's lock, so that a template replaced or taken over writes
// nothing more.
func (s *Store) Holds(tr kv.Transaction, job *fdbjobs.Job) error {
	w, held, err := s.jobs.WatchHold(tr, job)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("job %q: %w", job.ID, fdbjobs.ErrHalt)
	}
	w.Cancel()
	return nil
}
