package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// soakTrickle writes documents to the live sources all along, and
// remembers when each write was sent.
type soakTrickle struct {
	base    string
	user    string
	pass    string
	sources []string
	client  *http.Client
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	sent    map[string]time.Time // "source/id" -> when its write was sent
	written int
	errs    int
}

func (tr *soakTrickle) put(src, id string, n int) {
	tr.mu.Lock()
	tr.sent[src+"/"+id] = time.Now()
	tr.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"n": n, "even": n%2 == 0})
	req, _ := http.NewRequest("PUT", tr.base+"/"+url.PathEscape(src)+"/"+url.PathEscape(id), bytes.NewReader(b))
	req.SetBasicAuth(tr.user, tr.pass)
	req.Header.Set("Content-Type", "application/json")
	res, err := tr.client.Do(req)
	ok := err == nil && res.StatusCode == http.StatusCreated
	if err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	tr.mu.Lock()
	if ok {
		tr.written++
	} else {
		tr.errs++
	}
	tr.mu.Unlock()
}

func (tr *soakTrickle) run(seed uint64) {
	defer close(tr.done)
	rng := rand.New(rand.NewPCG(seed, 0x7c1))
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-tr.stop:
			return
		case <-tick.C:
		}
		tr.put(tr.sources[rng.IntN(len(tr.sources))], fmt.Sprintf("live-%06d", i), i)
	}
}

func (tr *soakTrickle) sentAt(src, id string) time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.sent[src+"/"+id]
}

// --- operations ------------------------------------------------------

// op applies one operation, drawn at random.
func (s *soak) op() {
	type choice struct {
		w  int
		ok bool
		f  func()
	}
	var cancellable, deletable []string
	for _, p := range s.posts {
		if p.v.cont && p.v.works() && p.v.retired.IsZero() && p.v.failed.IsZero() {
			cancellable = append(cancellable, strconv.Itoa(p.n))
		}
	}
	for db := range s.dbs {
		if db != "_replicator" {
			deletable = append(deletable, db)
		}
	}
	elapsed := time.Since(s.began)
	killDue := s.kills == 0 && elapsed > time.Until(s.deadline) // no kill yet, half the time gone
	canKill := time.Since(s.lastRestart) > 8*time.Second && time.Until(s.deadline) > 10*time.Second
	choices := []choice{
		{30, true, s.opPutDoc},
		{10, len(s.docs) > 0, s.opDeleteDoc},
		{5, true, func() { s.opReplicate(false) }},
		{3, true, func() { s.opReplicate(true) }},
		{3, len(cancellable) > 0, s.opCancel},
		{2, len(s.dbs) < len(soakDBSlots), s.opCreateDB},
		{1, len(deletable) > 0, s.opDeleteDB},
		{2, true, s.opMaxJobs},
		{1, true, s.opMaxChurn},
		{3, canKill, s.opKill},
	}
	if killDue && canKill {
		s.opKill()
		return
	}
	total := 0
	for _, c := range choices {
		if c.ok {
			total += c.w
		}
	}
	x := s.rng.IntN(total)
	for _, c := range choices {
		if !c.ok {
			continue
		}
		if x < c.w {
			c.f()
			return
		}
		x -= c.w
	}
}

// newVersion draws a replication: continuous or one-shot, its source, its
// filter. failing is the chance of a failing source.
func (s *soak) newVersion(cont *bool, failing float64) *soakVersion {
	s.nextKey++
	v := &soakVersion{key: fmt.Sprintf("%s-t%05d", s.prefix, s.nextKey)}
	if cont != nil {
		v.cont = *cont
	} else {
		v.cont = s.rng.IntN(100) < 60
	}
	switch {
	case s.rng.Float64() < failing && s.rng.IntN(2) == 0:
		v.src = "missing"
	case s.rng.Float64() < failing/2:
		v.src = "closed"
	case v.cont:
		v.src, v.source = "live", s.lives[s.rng.IntN(len(s.lives))]
	default:
		v.src, v.source = "static", s.statics[s.rng.IntN(len(s.statics))]
	}
	if v.works() {
		switch x := s.rng.IntN(100); {
		case x < 20:
			v.filter = "selector"
		case x < 35:
			v.filter = "doc_ids"
		}
	}
	s.versions[v.key] = v
	return v
}

// soakDocIDs is the doc_ids filter of the versions that have one.
var soakDocIDs = []string{"doc-00000001", "doc-00000002", "doc-00000005", "doc-00000008", "live-000003"}

// spec is the replication's body (document or POST /_replicate).
func (s *soak) spec(v *soakVersion) map[string]any {
	b := map[string]any{"target": s.couch.AuthDBURL(v.key), "create_target": true}
	if v.cont {
		b["continuous"] = true
	}
	switch v.src {
	case "missing":
		b["source"] = s.couch.AuthDBURL(s.prefix + "-missing")
	case "closed":
		b["source"] = s.closed
	default:
		b["source"] = s.couch.AuthDBURL(v.source)
	}
	switch v.filter {
	case "selector":
		b["selector"] = map[string]any{"even": true}
	case "doc_ids":
		b["doc_ids"] = soakDocIDs
	}
	return b
}

func soakDBPath(db string) string { return "/" + url.PathEscape(db) }

// rev returns the current revision of a replication document ("" and
// false after a problem).
func (s *soak) rev(db, doc string) (string, bool) {
	raw, ok := s.must("read "+db+"/"+doc, "GET", soakDBPath(db)+"/"+url.PathEscape(doc), nil, http.StatusOK)
	if !ok {
		return "", false
	}
	var d struct {
		Rev string `json:"_rev"`
	}
	if err := json.Unmarshal(raw, &d); err != nil || d.Rev == "" {
		s.problem("read %s/%s: no _rev in %s", db, doc, raw)
		return "", false
	}
	return d.Rev, true
}

// writeDoc writes (PUT, body) or deletes (body nil) a document that
// exists, retrying when the replicator's own write of its state got in
// first (409).
func (s *soak) writeDoc(db, doc string, body map[string]any) bool {
	for range 5 {
		rev, ok := s.rev(db, doc)
		if !ok {
			return false
		}
		var status int
		var raw []byte
		var err error
		if body == nil {
			status, raw, err = s.do("DELETE", soakDBPath(db)+"/"+url.PathEscape(doc)+"?rev="+url.QueryEscape(rev), nil)
		} else {
			body["_rev"] = rev
			status, raw, err = s.do("PUT", soakDBPath(db)+"/"+url.PathEscape(doc), body)
		}
		switch {
		case err == nil && (status == http.StatusOK || status == http.StatusCreated):
			return true
		case err == nil && status == http.StatusConflict:
			continue
		default:
			s.problem("write %s/%s: answered %d %s (error %v)", db, doc, status, bytes.TrimSpace(raw), err)
			return false
		}
	}
	s.problem("write %s/%s: 409 five times in a row", db, doc)
	return false
}

func (s *soak) pickDB(rng *rand.Rand) string {
	dbs := make([]string, 0, len(s.dbs))
	for db := range s.dbs {
		dbs = append(dbs, db)
	}
	sort.Strings(dbs)
	return dbs[rng.IntN(len(dbs))]
}

// retire notes that v stopped being wanted at at.
func (s *soak) retire(v *soakVersion, at time.Time, why string) {
	if v.retired.IsZero() {
		v.retired, v.why = at, why
	}
}

func (s *soak) opPutDoc() {
	db := s.pickDB(s.rng)
	doc := fmt.Sprintf("d%d", s.rng.IntN(soakDBSlots[db]))
	v := s.newVersion(nil, 0.25)
	v.db, v.doc = db, doc
	old := s.docs[db+"/"+doc]
	body := s.spec(v)
	if old != nil {
		if !s.writeDoc(db, doc, body) {
			return
		}
	} else if _, ok := s.must("create "+db+"/"+doc, "PUT", soakDBPath(db)+"/"+url.PathEscape(doc), body, http.StatusCreated); !ok {
		return
	}
	now := time.Now()
	if old != nil {
		s.retire(old, now, "its document was updated")
		s.logOp("update %s/%s: %s replaces %s", db, doc, v, old.key)
	} else {
		s.logOp("create %s/%s: %s", db, doc, v)
	}
	v.created = now
	s.docs[db+"/"+doc] = v
	s.stats["op put"]++
}

func (s *soak) opDeleteDoc() {
	keys := make([]string, 0, len(s.docs))
	for k := range s.docs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	k := keys[s.rng.IntN(len(keys))]
	v := s.docs[k]
	if !s.writeDoc(v.db, v.doc, nil) {
		return
	}
	s.retire(v, time.Now(), "its document was deleted")
	delete(s.docs, k)
	s.logOp("delete %s: %s", k, v.key)
	s.stats["op delete"]++
}

func (s *soak) opReplicate(cont bool) {
	failing := 0.2
	if cont {
		failing = 0.15
	}
	v := s.newVersion(&cont, failing)
	p := &soakPost{n: len(s.posts) + 1, v: v, body: s.spec(v), sent: time.Now()}
	v.post = p
	s.posts = append(s.posts, p)
	b, _ := json.Marshal(p.body)
	base := s.base()
	s.waiters.Add(1)
	go func() {
		defer s.waiters.Done()
		req, _ := http.NewRequest("POST", base+"/_replicate", bytes.NewReader(b))
		req.SetBasicAuth("adm", s.pass)
		req.Header.Set("Content-Type", "application/json")
		a := soakAnswer{p: p}
		res, err := s.postCl.Do(req)
		if err == nil {
			a.status = res.StatusCode
			a.raw, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		a.err, a.at = err, time.Now()
		s.answers <- a
	}()
	s.logOp("POST /_replicate #%d: %s", p.n, v)
	s.stats["op replicate"]++
}

// answered checks the answer of a POST /_replicate.
func (s *soak) answered(a soakAnswer) {
	p, v := a.p, a.p.v
	s.pump() // the job's lines, logged before its answer
	if since, what := s.awaited(p); s.late(since, a.at) {
		// What checkRuns reports of a POST still waiting, for one whose
		// answer came late while the loop did not look.
		s.problem("liveness: POST /_replicate #%d (%s) answered only at +%v; its job %s at +%v", p.n, v, s.since(a.at), what, s.since(since))
	}
	p.answered, p.status, p.answer = a.at, a.status, string(bytes.TrimSpace(a.raw))
	var body map[string]any
	_ = json.Unmarshal(a.raw, &body)
	ok, _ := body["ok"].(bool)
	switch {
	case a.err != nil:
		if s.lastKill.After(p.sent) && !a.at.Before(s.lastKill) {
			p.cut = true // the process died under it
			s.logOp("POST /_replicate #%d: cut by a kill", p.n)
			return
		}
		s.problem("POST /_replicate #%d (%s): %v, with no kill while it waited", p.n, v, a.err)
	case !p.cancelled.IsZero() && a.status == http.StatusNotFound:
		// cancelled while its client waited
	case !v.works() && a.status >= 400 && body["error"] != nil:
		// a failing source: the transient job fails
	case !v.works() && v.cont && a.status == http.StatusAccepted && ok:
		// a continuous job answers once it runs, before its first steps
		// find the source failing (then it fails, being transient), as
		// CouchDB's does
	// The job's line may follow the answer by a moment (checkRuns).
	case v.works() && !v.cont && a.status == http.StatusOK && ok:
		p.expect = "completed"
	case v.works() && v.cont && a.status == http.StatusAccepted && ok:
		p.expect = "started"
	case v.works() && a.status >= 400 && body["error"] != nil:
		// its run crashed (see the crashes in the summary): a transient
		// job fails
		p.expect = "failed"
		s.stats["POST failed after a crash"]++
	default:
		s.problem("POST /_replicate #%d (%s) answered %d %s", p.n, v, a.status, p.answer)
	}
	s.logOp("POST /_replicate #%d answered %d", p.n, a.status)
}

func (s *soak) opCancel() {
	var ps []*soakPost
	for _, p := range s.posts {
		if p.v.cont && p.v.works() && p.v.retired.IsZero() && p.v.failed.IsZero() {
			ps = append(ps, p)
		}
	}
	p := ps[s.rng.IntN(len(ps))]
	body := map[string]any{"cancel": true}
	for k, x := range p.body {
		body[k] = x
	}
	status, raw, err := s.do("POST", "/_replicate", body)
	s.pump()
	switch {
	case err == nil && status == http.StatusOK:
	case err == nil && status == http.StatusNotFound && p.answered.IsZero() && p.v.created.IsZero():
		// The cancel came before its POST, still waiting, added the job:
		// nothing was cancelled, and the POST goes on.
		s.logOp("cancel POST /_replicate #%d (%s): 404, before its job was added", p.n, p.v.key)
		s.stats["cancel before its job"]++
		return
	case err == nil && status == http.StatusNotFound && (!p.v.failed.IsZero() || p.cut && p.v.created.IsZero()):
		// it failed, or its POST was cut by a kill before its job was added
	default:
		s.problem("cancel POST /_replicate #%d (%s): answered %d %s (error %v)", p.n, p.v, status, bytes.TrimSpace(raw), err)
		return
	}
	now := time.Now()
	p.cancelled = now
	s.retire(p.v, now, "its POST /_replicate was cancelled")
	s.logOp("cancel POST /_replicate #%d (%s): %d", p.n, p.v.key, status)
	s.stats["op cancel"]++
}

func (s *soak) opCreateDB() {
	var free []string
	for db := range soakDBSlots {
		if !s.dbs[db] {
			free = append(free, db)
		}
	}
	sort.Strings(free)
	db := free[s.rng.IntN(len(free))]
	if _, ok := s.must("create database", "PUT", soakDBPath(db), nil, http.StatusCreated); !ok {
		return
	}
	s.dbs[db] = true
	s.logOp("create database %s", db)
	s.stats["op create db"]++
}

func (s *soak) opDeleteDB() {
	var dbs []string
	for db := range s.dbs {
		if db != "_replicator" {
			dbs = append(dbs, db)
		}
	}
	sort.Strings(dbs)
	db := dbs[s.rng.IntN(len(dbs))]
	if _, ok := s.must("delete database", "DELETE", soakDBPath(db), nil, http.StatusOK); !ok {
		return
	}
	now := time.Now()
	n := 0
	for k, v := range s.docs {
		if v.db == db {
			s.retire(v, now, "its database was deleted")
			delete(s.docs, k)
			n++
		}
	}
	delete(s.dbs, db)
	s.logOp("delete database %s (%d documents)", db, n)
	s.stats["op delete db"]++
}

func (s *soak) setConfig(key string, n int) bool {
	_, ok := s.must("set "+key, "PUT", "/_node/_cluster/_config/replicator/"+key, strconv.Itoa(n), http.StatusOK)
	return ok
}

// drawMaxJobs draws a max_jobs: 2 to 7 for one replication node, 1 to 4
// for two.
func (s *soak) drawMaxJobs() int {
	if len(s.topo.nodes) > 1 {
		return 1 + s.rng.IntN(4)
	}
	return 2 + s.rng.IntN(6)
}

func (s *soak) opMaxJobs() {
	n := s.drawMaxJobs()
	if !s.setConfig("max_jobs", n) {
		return
	}
	now := time.Now()
	s.logOp("max_jobs %d -> %d", s.maxJobs, n)
	s.maxJobs = n
	s.limits = append(s.limits, soakLimit{at: now, n: n})
	s.shapeChanged = now
	s.stats["op max_jobs"]++
}

func (s *soak) opMaxChurn() {
	n := 1 + s.rng.IntN(3)
	if !s.setConfig("max_churn", n) {
		return
	}
	s.logOp("max_churn %d -> %d", s.maxChurn, n)
	s.maxChurn = n
	s.shapeChanged = time.Now()
	s.stats["op max_churn"]++
}

// opKill SIGKILLs the process and starts it again on the same data
// directory and addresses.
func (s *soak) opKill() {
	s.pump()
	at := time.Now()
	s.lastKill = at
	require.NoError(s.t, s.proc.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-s.proc.exited:
	case <-time.After(testutil.WaitTimeout):
		s.t.Fatalf("%s: fdbrep did not die within %v of SIGKILL", s.topo.name, testutil.WaitTimeout)
	}
	s.pump() // every line it wrote before it died
	s.other = append(s.other, s.proc.otherLines()...)
	s.kills++
	s.logOp("kill (%d runs open)", len(s.openRuns()))
	// Its runs ended with it; the jobs that waited may have been claimed
	// by one of its acceptors as it died.
	wasOpen := map[*soakVersion]bool{}
	for _, r := range s.openRuns() {
		wasOpen[r.v] = true
		s.closeRun(r)
	}
	for _, o := range s.overlaps {
		if o.ended.IsZero() {
			o.ended = at
		}
	}
	var waiting []*soakVersion
	for _, v := range s.versions {
		if !wasOpen[v] && v.alive() {
			if from, _ := s.runnableFrom(v); !from.After(at) {
				waiting = append(waiting, v)
			}
		}
	}
	s.startProc()
	for v := range wasOpen {
		v.lastEnd, v.endWhy, v.killedOpen = s.lastRestart, "its process was killed and restarted", at
	}
	for _, v := range waiting {
		v.notBefore = s.lastRestart.Add(soakTakeBack)
	}
	s.fitSince = time.Time{}
	s.logOp("restarted")
}
