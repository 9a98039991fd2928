package soak

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
)

// --- the end ---------------------------------------------------------

// soakDoc is a document of a CouchDB database: its revision and whether
// the selector takes it.
type soakDoc struct {
	rev  string
	even bool
}

// couchDocs reads a CouchDB database's documents (nil, false when it does
// not exist).
func (s *soak) couchDocs(db string) (map[string]soakDoc, bool) {
	var res struct {
		Rows []struct {
			ID    string `json:"id"`
			Value struct {
				Rev string `json:"rev"`
			} `json:"value"`
			Doc map[string]any `json:"doc"`
		} `json:"rows"`
	}
	code := s.couch.Request(s.t, "GET", soakDBPath(db)+"/_all_docs?include_docs=true", nil, &res)
	if code == http.StatusNotFound {
		return nil, false
	}
	require.Equal(s.t, http.StatusOK, code, "GET %s/_all_docs", db)
	out := map[string]soakDoc{}
	for _, r := range res.Rows {
		if strings.HasPrefix(r.ID, "_") {
			continue
		}
		even, _ := r.Doc["even"].(bool)
		out[r.ID] = soakDoc{rev: r.Value.Rev, even: even}
	}
	return out, true
}

func (v *soakVersion) takes(id string, d soakDoc) bool {
	switch v.filter {
	case "selector":
		return d.even
	case "doc_ids":
		for _, x := range soakDocIDs {
			if x == id {
				return true
			}
		}
		return false
	}
	return true
}

// diff compares v's target with its source as v's filter selects it.
func (s *soak) diff(v *soakVersion, sources map[string]map[string]soakDoc) string {
	src := sources[v.source]
	if src == nil {
		src, _ = s.couchDocs(v.source)
		sources[v.source] = src
	}
	got, ok := s.couchDocs(v.key)
	if !ok {
		return "its target does not exist"
	}
	var out []string
	for id, d := range src {
		if !v.takes(id, d) {
			continue
		}
		g, ok := got[id]
		switch {
		case !ok:
			out = append(out, "missing "+id)
		case g.rev != d.rev:
			out = append(out, fmt.Sprintf("%s at %s, source at %s", id, g.rev, d.rev))
		}
	}
	for id, g := range got {
		if d, ok := src[id]; !ok || !v.takes(id, d) {
			out = append(out, fmt.Sprintf("unexpected %s (%s)", id, g.rev))
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5:5], fmt.Sprintf("… %d differences", len(out)))
	}
	return strings.Join(out, ", ")
}

// finish: no more operations; with room for every job, every replication
// catches up and every client gets its answer; then the stop check of the
// retired versions and the documents' view of every database.
func (s *soak) finish() {
	s.stopTrickle()
	if !s.setConfig("max_jobs", soakMaxJobsEnd) {
		return
	}
	s.maxJobs = soakMaxJobsEnd
	s.limits = append(s.limits, soakLimit{at: time.Now(), n: soakMaxJobsEnd})
	s.shapeChanged = time.Now()
	s.logOp("end: max_jobs %d; last documents written to the sources", soakMaxJobsEnd)
	for _, src := range s.lives {
		s.trickle.put(src, "zz-final", 0)
	}
	ended := time.Now()
	bound := soakTakeBack + 2*soakStep + soakOneShot + soakSlack() + 30*time.Second // catching up, on a loaded machine
	done := map[*soakVersion]bool{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var pending []string
	for {
		select {
		case a := <-s.answers:
			s.answered(a)
			continue
		case <-timer.C:
		}
		s.poll()
		if len(s.problems) > 0 {
			return
		}
		pending = pending[:0]
		sources := map[string]map[string]soakDoc{}
		for _, v := range s.sortedVersions() {
			if done[v] || !v.works() || (v.post != nil && v.post.status >= 400) {
				continue
			}
			switch {
			case !v.alive() && v.completed.IsZero():
				continue // retired, or its transient job failed
			case v.cont && v.open == 0:
				pending = append(pending, fmt.Sprintf("%s does not run", v))
				continue
			case !v.cont && v.completed.IsZero():
				pending = append(pending, fmt.Sprintf("%s has not completed", v))
				continue
			}
			if d := s.diff(v, sources); d != "" {
				pending = append(pending, fmt.Sprintf("%s: target differs from its source: %s", v, d))
				continue
			}
			done[v] = true
		}
		for _, p := range s.posts {
			if p.answered.IsZero() && !p.cut {
				pending = append(pending, fmt.Sprintf("POST /_replicate #%d (%s) has not answered", p.n, p.v))
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Since(ended) > bound {
			s.problem("end: not done %v after the last operation (max_jobs %d):\n    %s", bound, s.maxJobs,
				strings.Join(pending, "\n    "))
			return
		}
		timer.Reset(time.Second)
	}
	s.t.Logf("%s: every replication caught up %v after the last operation", s.topo.name, time.Since(ended).Round(time.Millisecond))

	// Retired versions stopped: no document written to their source an
	// interval step and the slack after they were retired reached their
	// target.
	checked, latest := 0, -time.Hour
	for _, v := range s.sortedVersions() {
		if v.retired.IsZero() || !v.cont || v.src != "live" {
			continue
		}
		got, ok := s.couchDocs(v.key)
		if !ok {
			continue
		}
		checked++
		for id, d := range got {
			at := s.trickle.sentAt(v.source, id)
			if !at.IsZero() {
				latest = max(latest, at.Sub(v.retired))
			}
			if !at.IsZero() && v.takes(id, d) && at.Sub(v.retired) > soakStep+soakSlack() {
				s.problem("safety: %s did not stop when %s at +%v: its target has %s, written to its source at +%v",
					v, v.why, s.since(v.retired), id, s.since(at))
			}
		}
	}

	// Every replicator database: its documents are the ones written, and
	// its _scheduler/docs lists them.
	for db := range s.dbs {
		var list struct {
			Docs []soakDocRow `json:"docs"`
		}
		var all struct {
			Rows []struct {
				ID string `json:"id"`
			} `json:"rows"`
		}
		if !s.get("/_scheduler/docs/"+url.PathEscape(db)+"?limit=1000", &list) || !s.get(soakDBPath(db)+"/_all_docs", &all) {
			return
		}
		if d := s.checkDocs(db, list.Docs); d != "" {
			s.problem("end: %s", d)
		}
		var got, want []string
		for _, r := range all.Rows {
			if !strings.HasPrefix(r.ID, "_design/") {
				got = append(got, r.ID)
			}
		}
		for _, v := range s.docs {
			if v.db == db {
				want = append(want, v.doc)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			s.problem("end: %s/_all_docs lists %v; the documents written are %v", db, got, want)
		}
	}
	s.t.Logf("%s: %d retired continuous replications checked for documents written after they stopped; the latest copied was written %v after its replication was retired (bound %v)",
		s.topo.name, checked, latest.Round(time.Millisecond), (soakStep + soakSlack()).Round(time.Millisecond))
}

func (s *soak) sortedVersions() []*soakVersion {
	out := make([]*soakVersion, 0, len(s.versions))
	for _, v := range s.versions {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}
