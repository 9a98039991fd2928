package replicator

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/repdb"
)

// resealSeedEnv replays TestResealModel with a given seed.
const resealSeedEnv = "FDBREP_RESEAL_SEED"

// resealWorld is a store with replicator databases whose documents and
// jobs hold credentials in the clear or sealed to one of three keys: the
// old (a), the new (b: the nodes' current key, a second), and one the
// nodes lack (c).
type resealWorld struct {
	t       *testing.T
	ctx     context.Context
	db      kv.Database
	s       *Store
	docs    *repdb.Store
	clock   *clockwork.FakeClock
	a, b, c *seal.Sealer
	o       *seal.Opener               // b, then a
	oc      *seal.Opener               // c, which the nodes lack
	ids     map[string]map[string]bool // every document id written, by database
	// plain holds every credential's plaintext by document or job and
	// field: none may be lost.
	plain   map[string]map[string]string
	running map[string]*fdbjobs.Job
	n       int
	rnd     *rand.Rand
}

func newResealWorld(t *testing.T) *resealWorld {
	ctx := context.Background()
	db := kvtest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Unix(1_000_000, 0))
	jobs, err := fdbjobs.New(db, fdbjobs.Config{Clock: clock})
	require.NoError(t, err)
	s := NewStore(db, jobs, nil)
	_, err = s.Setup(ctx, time.Hour, 0)
	require.NoError(t, err)
	w := &resealWorld{t: t, ctx: ctx, db: db, s: s, docs: repdb.New(db, repdb.Options{Clock: clock}), clock: clock,
		plain: map[string]map[string]string{}, running: map[string]*fdbjobs.Job{}}
	pubA, privA := testutil.SealKeys(t)
	pubB, privB := testutil.SealKeys(t)
	pubC, privC := testutil.SealKeys(t)
	for _, k := range []struct {
		s   **seal.Sealer
		pub string
	}{{&w.a, pubA}, {&w.b, pubB}, {&w.c, pubC}} {
		*k.s, err = seal.LoadPublicKey(k.pub)
		require.NoError(t, err)
	}
	w.o, err = seal.LoadPrivateKeys(privB, privA)
	require.NoError(t, err)
	w.oc, err = seal.LoadPrivateKeys(privC)
	require.NoError(t, err)
	w.ids = map[string]map[string]bool{}
	for i, name := range []string{"_replicator", "a/_replicator", "b/_replicator"} {
		uuid := fmt.Sprintf("u%d", i)
		require.NoError(t, w.docs.CreateDB(ctx, name, uuid, func(tr kv.Transaction) error { return s.RegisterDB(tr, name, uuid) }))
	}
	return w
}

// body is a replication body whose credentials are written as how says:
// "clear", "a", "b", "c" (sealed to that key) or "mixed" (each its own
// way), with their plaintexts by field.
func (w *resealWorld) body(scope, how string) (json.RawMessage, map[string]string) {
	w.n++
	p := map[string]string{
		"source." + couch.SecretPassword:             fmt.Sprintf("src-pw-%d", w.n),
		"target." + couch.SecretPassword:             fmt.Sprintf("tgt-pw-%d", w.n),
		"source." + couch.SecretHeader + "x-api-key": fmt.Sprintf("key-%d", w.n),
		couch.SecretProxy:                            fmt.Sprintf("proxy-pw-%d", w.n),
	}
	target := fmt.Sprintf(`{"url":"http://h/b","auth":{"basic":{"username":"tu","password":%q}}}`, p["target.password"])
	if how == "clear" && w.n%2 == 0 {
		// In the clear, as stored before a key was configured, a Basic
		// header: moved, it becomes auth.basic, as SealBody makes it.
		h := "Basic " + base64.StdEncoding.EncodeToString([]byte("tu:"+p["target.password"]))
		p["target."+couch.SecretHeader+"authorization"] = h
		target = fmt.Sprintf(`{"url":"http://h/b","headers":{"Authorization":%q}}`, h)
	}
	raw := fmt.Sprintf(`{"source":{"url":"http://su:%s@h/a","headers":{"X-Api-Key":%q}},"target":%s,"proxy":"http://pu:%s@p:3128","continuous":true}`,
		p["source.password"], p["source.header.x-api-key"], target, p[couch.SecretProxy])
	body, err := decodeBody(json.RawMessage(raw))
	require.NoError(w.t, err)
	ways := []string{"clear", "a", "b", "c"}
	require.NoError(w.t, couch.WalkSecretsTo(body, func(field, dest, v string) (string, error) {
		way := how
		if how == "mixed" {
			way = ways[w.rnd.IntN(len(ways))]
		}
		switch way {
		case "a":
			return w.a.Seal(v, sealContext(scope, field), sealBinding(dest))
		case "b":
			return w.b.Seal(v, sealContext(scope, field), sealBinding(dest))
		case "c":
			return w.c.Seal(v, sealContext(scope, field), sealBinding(dest))
		}
		return v, nil
	}))
	b, err := json.Marshal(body)
	require.NoError(w.t, err)
	return b, p
}

// addDoc writes document id of db (a new revision when it exists) and
// replaces its job by one in state ("" for none, "pending", "running" or
// "finished"), as the control plane does.
func (w *resealWorld) addDoc(db, uuid, id, how, state string) {
	raw, p := w.body(DocScope(db, id), how)
	base := ""
	if cur, err := w.docs.ReadDoc(w.ctx, db, id); err == nil {
		base = cur.Rev // else new, or deleted: the write extends the deletion
	}
	spec := w.writeDoc(db, id, base, raw)
	w.plain[db+"\x00"+id] = p
	if w.ids[db] == nil {
		w.ids[db] = map[string]bool{}
	}
	w.ids[db][id] = true
	w.setJob(DocJobID(uuid, id), &JobData{Rep: spec, DBName: db, DBUUID: uuid, DocID: id, State: StatePending}, state)
}

// writeDoc writes document id of db with body raw over revision base
// ("" for a new one) and returns its replication.
func (w *resealWorld) writeDoc(db, id, base string, raw json.RawMessage) *Spec {
	w.t.Helper()
	body, err := repdb.DecodeBody(raw)
	require.NoError(w.t, err)
	_, err = w.docs.Write(w.ctx, repdb.Write{DB: db, ID: id, BaseRev: base, Body: body})
	require.NoError(w.t, err)
	spec, err := ParseSpec(raw)
	require.NoError(w.t, err)
	return spec
}

// deleteDoc deletes document id of db with its job.
func (w *resealWorld) deleteDoc(db, uuid, id string) {
	cur, err := w.docs.ReadDoc(w.ctx, db, id)
	if err != nil {
		return
	}
	_, err = w.docs.Write(w.ctx, repdb.Write{DB: db, ID: id, BaseRev: cur.Rev, Deleted: true})
	require.NoError(w.t, err)
	delete(w.plain, db+"\x00"+id)
	w.setJob(DocJobID(uuid, id), nil, "")
}

// addTransient adds a transient job of user in state.
func (w *resealWorld) addTransient(user, how, state string) {
	raw, p := w.body(UserScope(user), how)
	spec, err := ParseSpec(raw)
	require.NoError(w.t, err)
	id := fmt.Sprintf("t%d", w.n)
	w.plain[id] = p
	w.setJob(id, &JobData{Rep: spec, RepUser: user, State: StatePending}, state)
}

// setJob replaces job id by one with data d in state ("" for none).
func (w *resealWorld) setJob(id string, d *JobData, state string) {
	delete(w.running, id)
	_, err := kv.Transact(w.ctx, w.db, func(tr kv.Transaction) (any, error) {
		old, _, err := w.s.Job(w.ctx, tr, id)
		if err != nil {
			return nil, err
		}
		if state == "" {
			if old == nil {
				return nil, nil
			}
			return nil, w.s.RemoveJob(w.ctx, tr, id, old)
		}
		// A job to take at once is scheduled at 1, the others far ahead,
		// out of the way of the Accept below.
		stime := int64(1) << 40
		if state != "pending" {
			stime = 1
		}
		return nil, w.s.AddJob(w.ctx, tr, id, old, d, stime, time.Hour)
	})
	require.NoError(w.t, err)
	if state == "" || state == "pending" {
		return
	}
	j, err := w.s.jobs.Accept(w.ctx, JobType, fdbjobs.AcceptOptions{MaxScheduledTime: 1})
	require.NoError(w.t, err)
	require.Equal(w.t, id, j.ID)
	w.running[id] = j
	if state == "finished" {
		w.finish(id)
	}
}

// take starts a pending job, if any.
func (w *resealWorld) take() {
	j, err := w.s.jobs.Accept(w.ctx, JobType, fdbjobs.AcceptOptions{MaxScheduledTime: 1 << 41})
	if errors.Is(err, fdbjobs.ErrNotFound) {
		return
	}
	require.NoError(w.t, err)
	w.running[j.ID] = j
}

// finish ends running job id with the data it was taken with, as a
// worker writes back what it holds: had the pass changed a running job's
// data, this would undo it.
func (w *resealWorld) finish(id string) {
	j := w.running[id]
	delete(w.running, id)
	require.NoError(w.t, w.s.jobs.Finish(w.ctx, nil, j, j.Data))
}

// step walks up to pages pages as holder.
func (w *resealWorld) step(holder string, pages int) ResealReport {
	rep, err := w.s.reseal.Step(w.ctx, w.docs, w.o, holder, w.clock.Now, time.Minute, pages)
	require.NoError(w.t, err)
	return rep
}

// check verifies that every credential still opens to what was written
// (or stays sealed to c), for where it is sent and nowhere else, and,
// when settled (a pass ended after the last change, no job running), that
// none is in the clear or sealed to a, and that each document's job holds
// its document's values.
func (w *resealWorld) check(settled bool) {
	t := w.t
	elsewhere := sealBinding("http://elsewhere:80")
	verify := func(what, scope string, plain map[string]string, field, dest, v string) {
		want, ok := plain[field]
		require.True(t, ok, "%s: an unexpected credential %s", what, field)
		o := w.o
		switch {
		case !seal.IsSealed(v):
			require.Equal(t, want, v, "%s %s", what, field)
			require.False(t, settled, "%s %s: in the clear after the pass", what, field)
			return
		case w.o.Holds(v):
			require.False(t, settled && w.o.Stale(v), "%s %s: sealed to the old key after the pass", what, field)
		default: // sealed to c, which the nodes lack: left as it was
			o = w.oc
		}
		got, err := o.Open(v, sealContext(scope, field), sealBinding(dest))
		require.NoError(t, err, "%s %s", what, field)
		require.Equal(t, want, got, "%s %s", what, field)
		_, err = o.Open(v, sealContext(scope, field), elsewhere)
		require.ErrorIs(t, err, seal.ErrCorrupt, "%s %s: opens for another destination", what, field)
	}
	docSpecs := map[string]*Spec{}
	for key, plain := range w.plain {
		db, id, ok := strings.Cut(key, "\x00")
		if !ok {
			continue // a transient job's
		}
		d, err := w.docs.ReadDoc(w.ctx, db, id)
		require.NoError(t, err, key)
		require.NoError(t, couch.WalkSecretsTo(d.Body, func(field, dest, v string) (string, error) {
			verify("document "+key, DocScope(db, id), plain, field, dest, v)
			return v, nil
		}))
		raw, err := json.Marshal(d.Body)
		require.NoError(t, err)
		docSpecs[key], err = ParseSpec(raw)
		require.NoError(t, err)
	}
	require.NoError(t, w.s.FoldJobs(w.ctx, func(id string, st fdbjobs.State, d *JobData) error {
		key := id
		if !d.Transient() {
			key = d.DBName + "\x00" + d.DocID
		}
		plain := w.plain[key]
		require.NotNil(t, plain, "job %s", id)
		d.Rep.eachSecret(func(field, dest string, v *string) {
			verify("job "+id, d.SealScope(), plain, field, dest, *v)
		})
		if settled && !d.Transient() {
			require.True(t, SameReplication(d.Rep, docSpecs[key]), "job %s holds values other than its document's", id)
		}
		return nil
	}))
}

// The reseal pass over documents and jobs in every state, while they are
// written, taken, finished and deleted and two nodes take turns: no
// credential is lost, and a pass that starts once nothing runs ends
// within its bound (the pages of its documents and jobs) with every
// credential moved, each document's job holding its document's values.
func TestResealModel(t *testing.T) {
	seed := testutil.SeedFrom(t, resealSeedEnv)
	w := newResealWorld(t)
	w.rnd = rand.New(rand.NewPCG(seed, seed^0x5eed))
	r := w.rnd
	dbs := []struct{ name, uuid string }{{"_replicator", "u0"}, {"a/_replicator", "u1"}, {"b/_replicator", "u2"}}
	hows := []string{"clear", "a", "b", "c", "mixed"}
	states := []string{"", "pending", "running", "finished"}
	ops := 150
	if testing.Short() {
		ops = 50
	}
	for i := range ops {
		switch k := r.IntN(10); {
		case k < 3:
			db := dbs[r.IntN(len(dbs))]
			w.addDoc(db.name, db.uuid, fmt.Sprintf("d%d", r.IntN(40)), hows[r.IntN(len(hows))], states[r.IntN(len(states))])
		case k == 3:
			w.addTransient(fmt.Sprintf("user%d", r.IntN(3)), hows[r.IntN(len(hows))], states[1+r.IntN(len(states)-1)])
		case k == 4:
			w.take()
		case k == 5 && len(w.running) > 0:
			ids := make([]string, 0, len(w.running))
			for id := range w.running {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			w.finish(ids[r.IntN(len(ids))])
		case k == 6:
			db := dbs[r.IntN(len(dbs))]
			w.deleteDoc(db.name, db.uuid, fmt.Sprintf("d%d", r.IntN(40)))
		default:
			w.step([]string{"n1", "n2"}[r.IntN(2)], 1+r.IntN(3))
			w.clock.Advance(time.Duration(r.IntN(90)) * time.Second)
		}
		if i%25 == 0 {
			w.check(false)
		}
	}

	// Settle: nothing runs; the pass under way ends, and the next (a day
	// on) moves everything.
	for id := range w.running {
		w.finish(id)
	}
	w.clock.Advance(time.Hour) // the holder's lease ran out
	for i := 0; ; i++ {
		require.Less(t, i, 1000, "the pass under way does not end")
		if rep := w.step("n1", 1); rep.Ended || rep.Pages == 0 {
			break
		}
	}
	w.clock.Advance(ResealAgainDefault)
	// The bound: each database's documents (deleted ones too) a page at
	// a time, the walk ending on a page not full; then the jobs so.
	jobs, docs := 0, 0
	require.NoError(t, w.s.FoldJobs(w.ctx, func(string, fdbjobs.State, *JobData) error { jobs++; return nil }))
	bound := jobs/ResealPageDefault + 1
	for _, db := range dbs {
		docs += len(w.ids[db.name])
		bound += len(w.ids[db.name])/ResealPageDefault + 1
	}
	pages, rep := 0, ResealReport{}
	for ; pages <= bound && !rep.Ended; pages++ {
		rep = w.step("n1", 1)
		require.Equal(t, pages == 0, rep.Started, "page %d", pages)
	}
	require.True(t, rep.Ended, "the pass did not end within %d pages (%d documents, %d jobs)", bound, docs, jobs)
	require.Zero(t, rep.PassHeld)
	t.Logf("%d documents and %d jobs; the final pass took %d pages (bound %d) and moved %d", docs, jobs, pages, bound, rep.PassMoved)
	w.check(true)

	// It moved credentials: the next pass, ResealRetryDefault later,
	// checks that none is left; clean, the next waits a day.
	require.Equal(t, rep.PassMoved == 0, rep.Clean)
	if !rep.Clean {
		require.False(t, w.step("n1", 1).Started, "the next pass waits ResealRetryDefault")
		w.clock.Advance(ResealRetryDefault)
		rep = ResealReport{}
		for i := 0; !rep.Ended; i++ {
			require.Less(t, i, bound+1, "the check does not end")
			rep = w.step("n1", 1)
		}
		require.True(t, rep.Clean, "%+v", rep)
	}
	w.clock.Advance(ResealRetryDefault)
	require.False(t, w.step("n1", 1).Started, "after a clean pass the next waits ResealAgainDefault")
}

// A document that sealing would make too large is passed by, whole (its
// job too), and named; the pass goes on and ends, not clean for it.
func TestResealPassesByWhatItCannotMove(t *testing.T) {
	w := newResealWorld(t)
	w.addDoc("_replicator", "u0", "a-small", "clear", "pending")
	// Filled to just under the largest value: sealed, it would not fit.
	raw, _ := w.body(DocScope("_replicator", "big"), "clear")
	body, err := repdb.DecodeBody(raw)
	require.NoError(t, err)
	body["filler"] = strings.Repeat("x", kv.MaxValueSize-len(raw)-240) // under the 200 bytes a write keeps for the record
	_, err = w.docs.Write(w.ctx, repdb.Write{DB: "_replicator", ID: "big", Body: body})
	require.NoError(t, err)
	spec, err := ParseSpec(raw)
	require.NoError(t, err)
	w.setJob(DocJobID("u0", "big"), &JobData{Rep: spec, DBName: "_replicator", DBUUID: "u0", DocID: "big", State: StatePending}, "pending")
	w.addDoc("_replicator", "u0", "z-small", "clear", "pending")

	var rep ResealReport
	for i := 0; !rep.Ended; i++ {
		require.Less(t, i, 10)
		rep = w.step("n1", 1)
	}
	require.Equal(t, 1, rep.PassSkipped, "%+v", rep)
	require.Len(t, rep.PassNamed, 1)
	require.Contains(t, rep.PassNamed[0], "_replicator/big: ")
	require.Contains(t, rep.PassNamed[0], "too large")
	require.Equal(t, 2, rep.PassMoved)
	require.False(t, rep.Clean)

	d, err := w.docs.ReadDoc(w.ctx, "_replicator", "big")
	require.NoError(t, err)
	require.Contains(t, d.Body["source"].(map[string]any)["url"], "@h/a")
	require.NotContains(t, d.Body["source"].(map[string]any)["url"], seal.Prefix, "the document is left whole")
	jd, _, err := w.s.Job(w.ctx, nil, DocJobID("u0", "big"))
	require.NoError(t, err)
	require.False(t, jd.Rep.Sealed(), "its job too")
	for _, id := range []string{"a-small", "z-small"} {
		jd, _, err := w.s.Job(w.ctx, nil, DocJobID("u0", id))
		require.NoError(t, err)
		require.Equal(t, w.b.ID(), jd.Rep.SealedKeyID(), id)
	}
}

// legacySourcePassword was sealed by fdbrep before bindings existed, to the
// key of testdata/legacy-seal.key, for the source password of document
// "legacy" of _replicator; its plaintext is "S3rvicePW".
const legacySourcePassword = "fdbrep-sealed:v1:2d122f77d088e017:IVrj4WC36dvohppaoqjkr70mLK-p3iMZL-XZzLMBbzH6QE6vR53cWpTd-nscR6DhapJ-pjRA3kiM"

// A credential sealed before bindings existed still opens, and the reseal
// pass binds it, with its key unchanged, to where its document sends it:
// in the document and in its job alike.
func TestResealBindsLegacyValues(t *testing.T) {
	w := newResealWorld(t)
	legacy, err := seal.LoadPrivateKeys("testdata/legacy-seal.key")
	require.NoError(t, err)
	w.o = legacy
	src := (&url.URL{Scheme: "http", User: url.UserPassword("svcacct", legacySourcePassword), Host: "h", Path: "/a"}).String()
	raw, err := json.Marshal(map[string]any{"source": src, "target": "http://h/b", "continuous": true})
	require.NoError(t, err)
	spec := w.writeDoc("_replicator", "legacy", "", raw)
	scope, jobID := DocScope("_replicator", "legacy"), DocJobID("u0", "legacy")
	w.setJob(jobID, &JobData{Rep: spec, DBName: "_replicator", DBUUID: "u0", DocID: "legacy", State: StatePending}, "pending")
	opened, err := spec.Open(legacy, scope)
	require.NoError(t, err, "a value sealed before bindings opens")
	require.Equal(t, "S3rvicePW", opened.Source.Password)
	require.True(t, spec.Moves(legacy), "it is to be bound")

	var rep ResealReport
	for i := 0; !rep.Ended; i++ {
		require.Less(t, i, 10)
		rep = w.step("n1", 1)
	}
	require.Equal(t, 1, rep.PassMoved, "%+v", rep)

	d, err := w.docs.ReadDoc(w.ctx, "_replicator", "legacy")
	require.NoError(t, err)
	jd, _, err := w.s.Job(w.ctx, nil, jobID)
	require.NoError(t, err)
	docRaw, err := json.Marshal(d.Body)
	require.NoError(t, err)
	docSpec, err := ParseSpec(docRaw)
	require.NoError(t, err)
	require.True(t, SameReplication(jd.Rep, docSpec), "the document and its job hold the same values")
	v := jd.Rep.Source.Password
	require.True(t, seal.Bound(v), v)
	require.Equal(t, legacy.Current().ID(), jd.Rep.SealedKeyID(), "the same key")
	opened, err = jd.Rep.Open(legacy, scope)
	require.NoError(t, err)
	require.Equal(t, "S3rvicePW", opened.Source.Password)
	require.False(t, jd.Rep.Moves(legacy))
	elsewhere := jd.Rep.clone()
	elsewhere.Source.URL = "http://elsewhere/a/"
	_, err = elsewhere.Open(legacy, scope)
	require.ErrorIs(t, err, seal.ErrCorrupt, "bound: it no longer opens for another host")
	require.Contains(t, err.Error(), "`source.password` was not sealed for http://elsewhere:80")
}

// The reseal pass moves webhook secrets too: one sealed to the old key and
// one stored in the clear (written before the node had a key) are sealed
// to the current key, bound to their receivers; one sealed to a key no
// node holds stays. Each still opens to what was written.
func TestResealMovesWebhookSecrets(t *testing.T) {
	w := newResealWorld(t)
	put := func(owner, id string, sealer *seal.Sealer) *Webhook {
		h := &Webhook{ID: id, Owner: owner, URL: "https://hooks.example/" + id, Secret: "secret-of-" + owner + "-" + id}
		require.NoError(t, SealWebhookSecret(sealer, h))
		_, err := kv.Transact(w.ctx, w.db, func(tr kv.Transaction) (struct{}, error) {
			_, _, err := w.s.Webhooks().Put(w.ctx, tr, h)
			return struct{}{}, err
		})
		require.NoError(t, err)
		return h
	}
	// More webhooks than a page, so that the phase pages.
	for i := range ResealPageDefault + 3 {
		put(fmt.Sprintf("u%02d", i), "old", w.a)
	}
	put("bob", "clear", nil)
	lost := put("carol", "elsewhere", w.c)

	var rep ResealReport
	for i := 0; !rep.Ended; i++ {
		require.Less(t, i, 20)
		rep = w.step("n1", 1)
	}
	require.Equal(t, ResealPageDefault+4, rep.PassMoved, "%+v", rep)
	require.Zero(t, rep.PassSkipped, "%+v", rep)
	get := func(owner, id string) *Webhook {
		h, err := kv.ReadTransact(w.ctx, w.db, func(tr kv.ReadTransaction) (*Webhook, error) {
			return w.s.Webhooks().Get(w.ctx, tr, owner, id)
		})
		require.NoError(t, err)
		return h
	}
	for _, k := range []struct{ owner, id string }{{"u00", "old"}, {fmt.Sprintf("u%02d", ResealPageDefault+2), "old"}, {"bob", "clear"}} {
		h := get(k.owner, k.id)
		id, ok := seal.KeyID(h.Secret)
		require.True(t, ok, "%s sealed", k.id)
		require.Equal(t, w.b.ID(), id, k.id)
		secret, err := WebhookSecret(w.o, h)
		require.NoError(t, err)
		require.Equal(t, "secret-of-"+k.owner+"-"+k.id, secret)
		h.URL = "https://elsewhere.example/"
		_, err = WebhookSecret(w.o, h)
		require.Error(t, err, "bound to its receiver")
	}
	require.Equal(t, lost.Secret, get("carol", "elsewhere").Secret, "a key no node holds: left as it is")
}

// A template's credentials move with its document: the pass moves its
// document and its template's data (held while the template runs: its
// holder moves them), and its replications' data in the jobs phase, each
// still opening to what was written for where it is sent.
func TestResealTemplate(t *testing.T) {
	for _, running := range []bool{false, true} {
		t.Run(fmt.Sprintf("template running %v", running), func(t *testing.T) {
			w := newResealWorld(t)
			scope := DocScope("_replicator", "tpl")
			plain := map[string]string{"source." + couch.SecretPassword: "src-pw", "target." + couch.SecretPassword: "tgt-pw"}
			body, err := decodeBody(json.RawMessage(`{"source":{"url":"http://su:src-pw@h/","databases":"a*"},"target":"http://tu:tgt-pw@h/copy-{db}","continuous":true}`))
			require.NoError(t, err)
			require.NoError(t, couch.WalkSecretsTo(body, func(field, dest, v string) (string, error) {
				return w.a.Seal(v, sealContext(scope, field), sealBinding(dest)) // the old key
			}))
			raw, err := json.Marshal(body)
			require.NoError(t, err)
			spec := w.writeDoc("_replicator", "tpl", "", raw)
			require.NotNil(t, spec.Template)
			td := &TemplateData{Rep: spec, DBName: "_replicator", DBUUID: "u0", DocID: "tpl"}
			id := DocJobID("u0", "tpl")
			cfg := Config{Clock: w.clock}.WithDefaults()
			_, err = kv.Transact(w.ctx, w.db, func(tr kv.Transaction) (any, error) {
				if _, err := w.s.Templates().Put(w.ctx, tr, id, td, time.Hour); err != nil {
					return nil, err
				}
				for _, db := range []string{"a1", "a2"} {
					if _, err := w.s.Templates().PutChild(w.ctx, tr, &cfg, td, db); err != nil {
						return nil, err
					}
				}
				return nil, nil
			})
			require.NoError(t, err)
			var held *fdbjobs.Job
			if running {
				held, err = w.s.jobs.Accept(w.ctx, TemplateType, fdbjobs.AcceptOptions{})
				require.NoError(t, err)
			}

			var rep ResealReport
			for i := 0; !rep.Ended; i++ {
				require.Less(t, i, 20)
				rep = w.step("n1", 1)
			}
			require.Equal(t, running, rep.PassHeld == 1, "%+v", rep)

			// verify checks that v opens to what was written, for dest,
			// and is sealed to the new key unless old says it may not be.
			verify := func(what, field, dest, v string, old bool) {
				t.Helper()
				require.True(t, seal.IsSealed(v), "%s %s", what, field)
				require.Equal(t, old, w.o.Stale(v), "%s %s sealed to the old key", what, field)
				got, err := w.o.Open(v, sealContext(scope, field), sealBinding(dest))
				require.NoError(t, err, "%s %s", what, field)
				require.Equal(t, plain[field], got, "%s %s", what, field)
			}
			d, err := w.docs.ReadDoc(w.ctx, "_replicator", "tpl")
			require.NoError(t, err)
			require.NoError(t, couch.WalkSecretsTo(d.Body, func(field, dest, v string) (string, error) {
				verify("the document", field, dest, v, false)
				return v, nil
			}))
			tmpl, _, err := w.s.Templates().Get(w.ctx, w.db, id)
			require.NoError(t, err)
			tmpl.Rep.eachSecret(func(field, dest string, v *string) { verify("the template", field, dest, *v, running) })
			n := 0
			require.NoError(t, w.s.FoldJobs(w.ctx, func(jid string, _ fdbjobs.State, d *JobData) error {
				require.NotEmpty(t, d.TemplateDB, jid)
				d.Rep.eachSecret(func(field, dest string, v *string) { verify("replication "+jid, field, dest, *v, false) })
				n++
				return nil
			}))
			require.Equal(t, 2, n)
			if held != nil {
				require.NoError(t, w.s.jobs.Finish(w.ctx, nil, held, held.Data))
			}
		})
	}
}
