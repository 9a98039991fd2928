package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Templates (see doc.go, "Templates").
const (
	// templateBatch is how many replications a template makes or removes
	// per transaction.
	templateBatch = 20
	// templatePage is how many of its replications a template reads per
	// transaction.
	templatePage = 500
	// templateRelist is how often a template that follows its server's
	// _db_updates lists the server's databases again all the same: the
	// feed may lose the last rows when a CouchDB node dies.
	templateRelist = time.Hour
	// templatesRetain is how long an ended template's job is kept.
	templatesRetain = time.Minute
)

// startTemplates starts the node's Runtime of template jobs (at most
// Config.MaxWatches at once, beside the watches and the replication
// slots: the one runner of held template jobs) until ctx ends or
// stopTemplates.
func (n *Node) startTemplates(ctx context.Context, cfg Config) error {
	rt, err := n.store.Templates().NewRuntime(fdbjobs.WorkFunc[replicator.TemplateData](n.workTemplate),
		fdbjobs.WorkerOptions{Concurrency: cfg.MaxWatches, Timeout: cfg.JobTimeout, RetainCompleted: templatesRetain},
		fdbjobs.RuntimeOptions{FetchPoll: cfg.acceptWaitMax()})
	if err != nil {
		return err
	}
	if err := rt.Start(ctx); err != nil {
		return err
	}
	n.templates.Store(rt)
	return nil
}

// stopTemplates stops the template Runtime: the templates running are put
// back at once, pending with what they followed, for another node to go
// on.
func (n *Node) stopTemplates() {
	if rt := n.templates.Swap(nil); rt != nil {
		rt.StopAndCancel()
	}
}

// templateEnd is how a template's work ended.
type templateEnd int

const (
	templateCancelled templateEnd = iota // the node stops, or the job is no longer the node's
	templateDone                         // an ending template removed its replications and ended (CompleteTx)
	templatePolled                       // a listing is done, no feed to follow: again after WatchPollInterval
	templateRetry                        // its server did not answer: again after watchRetryWait
)

// templateRun is one template job worked on the node.
type templateRun struct {
	n *Node
	w *fdbjobs.Work[replicator.TemplateData]

	mu sync.Mutex              // guards t
	t  replicator.TemplateData // as the next write stores it

	// known are the databases the template has a replication of (nil
	// until read), unmade the matching ones that have none (a bound, a
	// limit), and rep the replication whose source is its server: work's
	// goroutine alone uses them.
	known, unmade map[string]bool
	rep           engine.Replication
	// batch sizes its transactions of replications: smaller after one
	// that failed (a conflict), back to templateBatch after successes.
	batch kv.Batch
}

// workTemplate follows the template job w (see doc.go, "Templates") until
// it ends, a listing without a feed is done, its server does not answer,
// or ctx ends; then it puts the job back (a Snooze) to be taken again.
// Its data is written every heartbeat and before it is put back.
func (n *Node) workTemplate(ctx context.Context, w *fdbjobs.Work[replicator.TemplateData]) error {
	cfg := n.Config()
	r := &templateRun{n: n, w: w, t: w.Args, batch: kv.Batch{Max: templateBatch}}
	r.t.Node = cfg.NodeName
	workCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan templateEnd, 1)
	go func() { done <- r.work(workCtx) }()
	hb := cfg.Clock.NewTicker(cfg.heartbeat())
	defer hb.Stop()
	for {
		select {
		case <-hb.Chan():
			if err := w.Update(ctx, *r.data()); errors.Is(err, fdbjobs.ErrHalt) {
				cancel()
				<-done
				return err
			}
		case end := <-done:
			return r.end(ctx, end)
		}
	}
}

// data returns the template's data as it stands, stamped now.
func (r *templateRun) data() *replicator.TemplateData {
	now := replicator.Millis(r.n.Config().Clock.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.t
	t.Updated = now
	return &t
}

// set changes the template's data.
func (r *templateRun) set(f func(*replicator.TemplateData)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.t)
}

// fail records why the template cannot do its work, logging it when it
// is new.
func (r *templateRun) fail(reason string) {
	was := ""
	r.set(func(t *replicator.TemplateData) { was, t.Error = t.Error, reason })
	if was != reason && reason != "" {
		t := r.data()
		r.n.Config().Logger.Warn().Str("db", t.DBName).Str("doc_id", t.DocID).Str("reason", reason).Msg("replicator: template")
	}
}

// end ends the template's attempt after its work.
func (r *templateRun) end(ctx context.Context, end templateEnd) error {
	cfg := r.n.Config()
	var again time.Duration
	switch end {
	case templateDone:
		return nil
	case templatePolled:
		again = cfg.WatchPollInterval
	case templateRetry:
		again = watchRetryWait
	default:
		cause := context.Cause(ctx)
		if cause == nil {
			break // again at once
		}
		if errors.Is(cause, fdbjobs.ErrStopped) {
			_ = r.w.Update(context.WithoutCancel(ctx), *r.data())
		}
		return cause
	}
	if err := r.w.Update(ctx, *r.data()); err != nil && !errors.Is(err, fdbjobs.ErrHalt) && ctx.Err() == nil {
		cfg.Logger.Warn().Err(err).Str("doc_id", r.data().DocID).Msg("replicator: template: writing what it followed")
	}
	return fdbjobs.Snooze(again)
}

// work lists the template's server and makes its replications, then
// follows its _db_updates feed; an ending template (or one whose database
// was deleted) removes its replications and ends.
func (r *templateRun) work(ctx context.Context) templateEnd {
	cfg := r.n.Config()
	t := r.data()
	owns, err := r.owns(ctx)
	switch {
	case err != nil:
		return r.retry(ctx)
	case t.Ending || !owns:
		return r.removeAll(ctx)
	}
	r.reseal(ctx)
	t = r.data()
	rep, match, err := r.server(t)
	if err != nil {
		r.fail(replicator.Reason(err))
		return templatePolled
	}
	r.rep = rep
	since := t.Since
	if since == "" || t.Mode == replicator.WatchPoll {
		since = ""
		if t.Mode != replicator.WatchPoll || cfg.Clock.Since(time.UnixMilli(t.FeedTried)) >= watchFeedRetry {
			last, err := r.n.eng.DBUpdates(ctx, rep, "now", time.Millisecond, func(engine.DBUpdate) error { return nil })
			switch {
			case err == nil:
				since = last
			case ctx.Err() != nil:
				return templateCancelled
			case feedUnavailable(err):
				r.polls(err)
			default:
				r.fail("its server does not answer: " + replicator.Reason(err))
				return templateRetry
			}
		}
		if err := r.reconcile(ctx, rep, match); err != nil {
			if ctx.Err() != nil {
				return templateCancelled
			}
			r.fail("listing its server's databases: " + replicator.Reason(err))
			return templateRetry
		}
		if since == "" {
			return templatePolled
		}
		r.set(func(t *replicator.TemplateData) { t.Mode, t.Reason, t.Since = replicator.WatchDBUpdates, "", since })
	}
	if err := r.readKnown(ctx); err != nil {
		return r.retry(ctx)
	}
	for {
		if cfg.Clock.Since(time.UnixMilli(r.data().Listed)) >= templateRelist {
			if err := r.reconcile(ctx, rep, match); err != nil {
				if ctx.Err() != nil {
					return templateCancelled
				}
				r.fail("listing its server's databases: " + replicator.Reason(err))
				return templateRetry
			}
		}
		followed, applied := since, true
		last, err := r.n.eng.DBUpdates(ctx, rep, since, min(watchFeedTimeoutMax, cfg.Interval), func(u engine.DBUpdate) error {
			if err := r.apply(ctx, u, match); err != nil {
				applied = false
				return err
			}
			followed = u.Seq
			return nil
		})
		if applied && last != "" {
			followed = last
		}
		if followed != since {
			// A row it could not apply is not passed: the next attempt
			// reads it again.
			since = followed
			r.set(func(t *replicator.TemplateData) { t.Since = since })
			r.write(ctx)
		}
		switch {
		case ctx.Err() != nil:
			return templateCancelled
		case err != nil && feedUnavailable(err):
			r.polls(err)
			return templatePolled
		case err != nil:
			r.fail("following its server's _db_updates: " + replicator.Reason(err))
			return templateRetry
		}
		r.fail("") // it answers
		if owns, err := r.owns(ctx); err == nil && !owns {
			return r.removeAll(ctx)
		}
		r.reseal(ctx)
	}
}

// reseal moves the template's credentials in its data to the node's
// current sealing key, when they move: the reseal pass leaves a running
// template's to its holder (replicator.Reseal.Doc), which calls this at
// each start and after each wait on its feed (a minute at most). Its
// replications made after have the new values; those made before move
// their own (the pass, or their start).
func (r *templateRun) reseal(ctx context.Context) {
	t := r.data()
	rep, moved, err := replicator.NewResealer(r.n.Config().Opener).Spec(t.Rep, t.SealScope())
	if err != nil || !moved {
		return
	}
	r.set(func(t *replicator.TemplateData) { t.Rep = rep })
	r.write(ctx)
}

func (r *templateRun) retry(ctx context.Context) templateEnd {
	if ctx.Err() != nil {
		return templateCancelled
	}
	return templateRetry
}

// polls records that the template lists its server every poll interval,
// for want of its feed.
func (r *templateRun) polls(err error) {
	now := replicator.Millis(r.n.Config().Clock.Now())
	r.set(func(t *replicator.TemplateData) {
		t.Mode, t.Reason, t.Since, t.FeedTried = replicator.WatchPoll, replicator.Reason(err), "", now
	})
}

// owns reports whether the template's database is still the one its
// document belongs to.
func (r *templateRun) owns(ctx context.Context) (bool, error) {
	t := r.data()
	return kv.ReadTransact(ctx, r.n.store, func(tr kv.ReadTransaction) (bool, error) {
		u, err := r.n.store.RegisteredDB(tr, t.DBName)
		return u == t.DBUUID, err
	})
}

// server returns the replication whose source is the template's server
// (its credentials opened), and the test of its pattern.
func (r *templateRun) server(t *replicator.TemplateData) (engine.Replication, func(string) bool, error) {
	cfg := r.n.Config()
	if t.Rep == nil || t.Rep.Template == nil {
		return engine.Replication{}, nil, replicator.NewReason(replicator.ErrBadRequest, "the template's data names no template")
	}
	spec, err := t.Rep.Open(cfg.Opener, t.SealScope())
	if err != nil {
		return engine.Replication{}, nil, err
	}
	match, err := spec.Template.Matcher()
	if err != nil {
		return engine.Replication{}, nil, err
	}
	child, err := spec.Child("a")
	if err != nil {
		return engine.Replication{}, nil, err
	}
	rep, err := child.Replication()
	if err != nil {
		return engine.Replication{}, nil, err
	}
	rep = cfg.JobDefaults.Apply(rep, child)
	if spec.Template.Side == replicator.TemplateSideTarget {
		rep.Source, rep.SourceProxy = rep.Target, rep.TargetProxy
	}
	return rep, match, nil
}

// reconcile lists the server's databases and makes the template's
// replications what the template says: one per matching database (the
// first replicator.TemplateDatabasesDefault of them, in the server's name
// order), none of the others. A listing clears the template's error.
func (r *templateRun) reconcile(ctx context.Context, rep engine.Replication, match func(string) bool) error {
	var want []string
	over := 0 // matching databases past the bound
	for from := ""; ; {
		names, err := r.n.eng.AllDBs(ctx, rep, from, engine.AllDBsPageMax)
		if err != nil {
			return err
		}
		full := len(names) == engine.AllDBsPageMax
		if from != "" && len(names) > 0 && names[0] == from {
			names = names[1:] // the last of the page before
		}
		for _, db := range names {
			switch {
			case !match(db):
			case len(want) < replicator.TemplateDatabasesDefault:
				want = append(want, db)
			default:
				over++
			}
		}
		if !full || len(names) == 0 {
			break
		}
		from = names[len(names)-1]
	}
	made, reason, err := r.put(ctx, want)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, len(made))
	for _, db := range made {
		keep[db] = true
	}
	have, err := r.children(ctx)
	if err != nil {
		return err
	}
	var stale []string
	for _, db := range have {
		if !keep[db] {
			stale = append(stale, db)
		}
	}
	if err := r.remove(ctx, stale); err != nil {
		return err
	}
	r.known, r.unmade = keep, map[string]bool{}
	for _, db := range want {
		if !keep[db] {
			r.unmade[db] = true
		}
	}
	if over > 0 && reason == "" {
		reason = templateFull
	}
	now := replicator.Millis(r.n.Config().Clock.Now())
	r.set(func(t *replicator.TemplateData) {
		t.Databases, t.Unmade, t.UnmadeReason, t.Listed = len(made), len(r.unmade)+over, reason, now
	})
	r.fail("")
	r.write(ctx)
	return nil
}

// write stores the template's data now, for its row to show, rather than
// at its next heartbeat (an error is the heartbeat's to meet).
func (r *templateRun) write(ctx context.Context) {
	_ = r.w.Update(ctx, *r.data())
}

// templateFull is why a database past the bound has no replication.
const templateFull = "the most databases a template replicates (100,000) is reached"

// readKnown reads the databases the template has a replication of, once.
func (r *templateRun) readKnown(ctx context.Context) error {
	if r.known != nil {
		return nil
	}
	have, err := r.children(ctx)
	if err != nil {
		return err
	}
	known := make(map[string]bool, len(have))
	for _, db := range have {
		known[db] = true
	}
	r.known, r.unmade = known, map[string]bool{}
	r.set(func(t *replicator.TemplateData) { t.Databases = len(known) })
	return nil
}

// children reads the databases the template has a replication of, a page
// per transaction.
func (r *templateRun) children(ctx context.Context) ([]string, error) {
	t := r.data()
	var out []string
	for {
		after := ""
		if len(out) > 0 {
			after = out[len(out)-1]
		}
		page, err := kv.ReadTransact(ctx, r.n.store, func(tr kv.ReadTransaction) ([]string, error) {
			return r.n.store.Templates().Children(tr, t.DBUUID, t.DocID, after, templatePage)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < templatePage {
			return out, nil
		}
	}
}

// apply follows one row of the server's _db_updates feed: a matching
// database created (or updated, with no replication yet) gets its
// replication, a deleted one loses it. A database whose replication could
// not be made is tried again at the next listing, not at each of its
// updates.
func (r *templateRun) apply(ctx context.Context, u engine.DBUpdate, match func(string) bool) error {
	if !match(u.DB) {
		return nil
	}
	if u.Type == "deleted" {
		if err := r.remove(ctx, []string{u.DB}); err != nil {
			return err
		}
		known, unmade := r.known[u.DB], r.unmade[u.DB]
		delete(r.known, u.DB)
		delete(r.unmade, u.DB)
		r.set(func(t *replicator.TemplateData) {
			t.Databases -= b2i(known)
			t.Unmade -= b2i(unmade)
		})
		return nil
	}
	if r.known[u.DB] || r.unmade[u.DB] {
		return nil
	}
	if len(r.known) >= replicator.TemplateDatabasesDefault {
		r.unmade[u.DB] = true
		r.set(func(t *replicator.TemplateData) { t.Unmade, t.UnmadeReason = t.Unmade+1, templateFull })
		return nil
	}
	// The feed's rows of one database may come out of order (CouchDB
	// batches them): an update written just before a deletion can follow
	// it. Only a database the server lists gets a replication.
	names, err := r.n.eng.AllDBs(ctx, r.rep, u.DB, 1)
	if err != nil || len(names) == 0 || names[0] != u.DB {
		return err
	}
	made, reason, err := r.put(ctx, []string{u.DB})
	if err != nil {
		return err
	}
	if len(made) == 1 {
		r.known[u.DB] = true
		r.set(func(t *replicator.TemplateData) { t.Databases++ })
	} else {
		r.unmade[u.DB] = true
		r.set(func(t *replicator.TemplateData) { t.Unmade, t.UnmadeReason = t.Unmade+1, reason })
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// put makes sure the template has its replications of dbs, in
// transactions of up to templateBatch (fewer after one failed: r.batch)
// fenced by its lock, and returns the databases that have one. A database
// whose replication cannot be made (its owner's limit of replications, a
// name the replication refuses) has none, and reason says why.
func (r *templateRun) put(ctx context.Context, dbs []string) (made []string, reason string, err error) {
	cfg := r.n.Config()
	t := r.data()
	type res struct {
		n      int // of dbs done
		made   []string
		reason string
		limit  bool // the owner's limit: no more
	}
	for len(dbs) > 0 {
		out, err := kv.TransactBatch(ctx, r.n.store, &r.batch, func(tr kv.Transaction, n int) (res, error) {
			if err := r.n.store.Holds(tr, r.w.Job); err != nil {
				return res{}, err
			}
			o := res{n: min(n, len(dbs))}
			for _, db := range dbs[:o.n] {
				_, err := r.n.store.Templates().PutChild(ctx, tr, &cfg.Config, t, db)
				var ke kv.Error
				switch {
				case errors.As(err, &ke):
					return res{}, err
				case errors.Is(err, replicator.ErrForbidden):
					o.reason, o.limit = replicator.Reason(err), true
					return o, nil
				case err != nil:
					o.reason = db + ": " + replicator.Reason(err)
				default:
					o.made = append(o.made, db)
				}
			}
			return o, nil
		})
		if err != nil {
			return made, reason, err
		}
		made = append(made, out.made...)
		if out.reason != "" {
			reason = out.reason
		}
		if out.limit {
			break
		}
		dbs = dbs[out.n:]
	}
	return made, reason, nil
}

// remove removes the template's replications of dbs, in transactions of
// up to templateBatch (r.batch) fenced by its lock.
func (r *templateRun) remove(ctx context.Context, dbs []string) error {
	t := r.data()
	for len(dbs) > 0 {
		n, err := kv.TransactBatch(ctx, r.n.store, &r.batch, func(tr kv.Transaction, n int) (int, error) {
			if err := r.n.store.Holds(tr, r.w.Job); err != nil {
				return 0, err
			}
			n = min(n, len(dbs))
			for _, db := range dbs[:n] {
				if _, err := r.n.store.Templates().RemoveChild(ctx, tr, t.DBUUID, t.DocID, db); err != nil {
					return 0, err
				}
			}
			return n, nil
		})
		if err != nil {
			return err
		}
		dbs = dbs[n:]
	}
	return nil
}

// removeAll removes every replication of an ending template, a page per
// transaction, and ends its job in the transaction that finds none left.
func (r *templateRun) removeAll(ctx context.Context) templateEnd {
	t := r.data()
	for {
		done, err := kv.TransactBatch(ctx, r.n.store, &r.batch, func(tr kv.Transaction, n int) (bool, error) {
			if err := r.n.store.Holds(tr, r.w.Job); err != nil {
				return false, err
			}
			page, err := r.n.store.Templates().Children(tr, t.DBUUID, t.DocID, "", n)
			if err != nil {
				return false, err
			}
			for _, db := range page {
				if _, err := r.n.store.Templates().RemoveChild(ctx, tr, t.DBUUID, t.DocID, db); err != nil {
					return false, err
				}
			}
			if len(page) > 0 {
				return false, nil
			}
			return true, r.w.CompleteTx(ctx, tr)
		})
		switch {
		case err != nil:
			return r.retry(ctx)
		case done:
			r.n.Config().Logger.Info().Str("db", t.DBName).Str("doc_id", t.DocID).Msg("replicator: template ended: its replications are removed")
			return templateDone
		}
	}
}
