package replicator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/seal"
)

// The reseal pass: a walk over every _replicator document (with its job),
// every transient job and every webhook, a page per transaction, that
// moves their credentials (a webhook's secret) to the current key (Reseal.Doc, Reseal.Transient). Its place
// is one record in the store, so the walk goes on across intervals,
// nodes and restarts; one node at a time holds it for a lease (as the
// removal of a deleted database's jobs), so two nodes do not conflict on
// every page. A pass ends when the walk does. The next starts when a node
// whose current key is not the last pass's finds none under way (nodes
// whose current keys differ, during a rolling restart, take turns: each
// pass runs while its holder steps; every node must list the same key
// first, or their passes move credentials back and forth), and otherwise
// ResealAgainDefault after the last ended, or ResealRetryDefault when it
// moved or held back anything: the next pass then checks that nothing is
// left (a write-back racing with a move, a frontend still sealing to the
// old key, a running job whose node had not restarted). A pass that
// moved nothing and held nothing back is clean: every credential stored
// when it started was sealed to its key, or to a key no node holds, or is
// one it could not move (a document that sealing would make too large,
// say: it names them).

const (
	// ResealPageDefault is how many documents or jobs a reseal page
	// examines at most, in one transaction (fewer after a page's
	// transaction failed: kv.Batch).
	ResealPageDefault = 50
	// ResealPagesDefault is how many pages a node's interval step walks at
	// most: a pass over n documents takes about n / (50 × 20) steps.
	ResealPagesDefault = 20
	// ResealAgainDefault is how long after a clean pass the next starts:
	// it finds what was sealed meanwhile to a key other than the current
	// one (a frontend still configured with the old public key).
	ResealAgainDefault = 24 * time.Hour
	// ResealRetryDefault is how long after a pass that moved or held back
	// credentials the next starts.
	ResealRetryDefault = 10 * time.Minute
	// resealNamed is how many documents or jobs it could not move a pass
	// names.
	resealNamed = 5
)

// resealPass is the record of the current or last pass.
type resealPass struct {
	Key     string   `json:"key"`               // the key id values move to
	Phase   string   `json:"phase"`             // passDocs, passJobs, passHooks, passDone
	DB      string   `json:"db,omitempty"`      // passDocs: the database walked
	DBUUID  string   `json:"db_uuid,omitempty"` // and its instance
	After   string   `json:"after,omitempty"`   // the last document or job id done
	Holder  string   `json:"holder,omitempty"`
	Until   int64    `json:"until,omitempty"` // the holder's lease (Unix ms)
	Started int64    `json:"started"`         // Unix ms
	Ended   int64    `json:"ended,omitempty"` // passDone: when (Unix ms)
	Moved   int      `json:"moved"`           // documents and jobs changed
	Held    int      `json:"held"`            // left to their running jobs' workers
	Skipped int      `json:"skipped"`         // that could not be moved
	Named   []string `json:"named,omitempty"` // the first of those, with why
	// StartedBy and EndedBy are the tokens of the pages that started and
	// ended the pass: a page retried after commit_unknown_result knows
	// its own.
	StartedBy string `json:"started_by,omitempty"`
	EndedBy   string `json:"ended_by,omitempty"`
}

const (
	passDocs  = "docs"
	passJobs  = "jobs"
	passHooks = "webhooks"
	passDone  = "done"
)

// ResealReport is what a Reseal.Step did.
type ResealReport struct {
	Key     string // the current key id
	Pages   int    // pages walked: 0 when another node holds the pass, or none is due
	Started bool   // this step started a pass
	// Ended: this step ended the pass, which the Pass fields then
	// describe (Clean: it moved and held back nothing).
	Ended                            bool
	PassStarted                      time.Time
	PassMoved, PassHeld, PassSkipped int
	PassNamed                        []string
	Moved, Held, Skipped             int // by this step
	Clean                            bool
}

// Step walks up to pages pages of the reseal pass to o's current
// key, as holder at now (see above), each page a transaction; nothing
// when another node holds the pass (until its lease, renewed at each
// page, runs out) or none is due. Values sealed to keys o lacks stay (the
// runs that need them say so). A document or job that cannot be moved
// (its data too large once sealed, a corrupt record) is passed by and
// named; only the store's errors stop the step.
func (rs *Reseal) Step(ctx context.Context, docs DocRewriter, o *seal.Opener, holder string, now func() time.Time, lease time.Duration, pages int) (ResealReport, error) {
	rep := ResealReport{Key: o.Current().ID()}
	size := kv.Batch{Max: ResealPageDefault} // smaller after a page's transaction failed
	for done := 0; done < pages; {
		r := NewResealer(o) // one per page: the memo lives across the page's attempts only
		type outcome struct {
			walked, start, end bool
			page               resealCounts
			pass               resealPass // when end
		}
		at, token := now().UnixMilli(), newToken()
		n := size.Size()
		out, err := kv.Transact(ctx, rs.s.db, func(tr kv.Transaction) (outcome, error) {
			var out outcome
			p, err := rs.readPass(tr)
			if err != nil {
				return out, err
			}
			switch {
			case p.Phase == passDone && p.EndedBy == token:
				// An earlier attempt of this page ended the pass and
				// committed (commit_unknown_result).
				return outcome{end: true, pass: p, start: p.StartedBy == token}, nil
			case p.Phase != passDone && p.Holder != holder && p.Until > at:
				return out, nil // another node's, whatever its key
			case p.Key != rep.Key,
				p.Phase == passDone && at >= p.Ended+resealWait(p).Milliseconds():
				p = resealPass{Key: rep.Key, Phase: passDocs, Started: at, StartedBy: token}
			case p.Phase == passDone:
				return out, nil
			}
			out.walked, out.start = true, p.StartedBy == token
			if err := rs.page(ctx, tr, docs, r, &p, n, &out.page); err != nil {
				return out, err
			}
			p.Moved += out.page.moved
			p.Held += out.page.held
			p.Skipped += out.page.skipped
			for _, x := range out.page.named {
				if len(p.Named) < resealNamed {
					p.Named = append(p.Named, x)
				}
			}
			if p.Phase == passDone {
				p.Ended, p.EndedBy, p.Holder, p.Until = at, token, "", 0
				out.end, out.pass = true, p
			} else {
				p.Holder, p.Until = holder, at+lease.Milliseconds()
			}
			v, err := json.Marshal(p)
			if err != nil {
				return out, err
			}
			tr.Set(rs.key, v)
			return out, nil
		})
		if err != nil {
			if err := size.Retry(ctx, err); err != nil {
				return rep, err
			}
			continue
		}
		size.Done()
		size.Grow()
		done++
		if out.walked {
			rep.Pages++
		}
		rep.Moved += out.page.moved
		rep.Held += out.page.held
		rep.Skipped += out.page.skipped
		rep.Started = rep.Started || out.start
		if out.end {
			p := out.pass
			rep.Ended, rep.PassStarted = true, time.UnixMilli(p.Started)
			rep.PassMoved, rep.PassHeld, rep.PassSkipped, rep.PassNamed = p.Moved, p.Held, p.Skipped, p.Named
			rep.Clean = p.Moved == 0 && p.Held == 0
		}
		if !out.walked || out.end {
			return rep, nil
		}
	}
	return rep, nil
}

// resealWait is how long after pass p ended the next starts.
func resealWait(p resealPass) time.Duration {
	if p.Moved > 0 || p.Held > 0 {
		return ResealRetryDefault
	}
	return ResealAgainDefault
}

func (rs *Reseal) readPass(tr kv.ReadTransaction) (resealPass, error) {
	var p resealPass
	v, err := tr.Get(rs.key).Get()
	if err != nil || v == nil {
		return p, err
	}
	if json.Unmarshal(v, &p) != nil {
		return resealPass{}, nil // unreadable: a new pass starts
	}
	return p, nil
}

// resealCounts is what a page did.
type resealCounts struct {
	moved, held, skipped int
	named                []string
}

// add counts outcome o of the document or job what, or passes it by when
// err is about it (not the store's: those stop the page).
func (c *resealCounts) add(ctx context.Context, what string, o ResealOutcome, err error) error {
	var kerr kv.Error
	switch {
	case err != nil && (ctx.Err() != nil || errors.As(err, &kerr)):
		return err
	case err != nil:
		c.skipped++
		if len(c.named) < resealNamed {
			c.named = append(c.named, what+": "+err.Error())
		}
	case o == ResealMoved:
		c.moved++
	case o == ResealHeld:
		c.held++
	}
	return nil
}

// page walks one page of pass p, of n documents or jobs at most, in
// tr, and moves p on.
func (rs *Reseal) page(ctx context.Context, tr kv.Transaction, docs DocRewriter, r *Resealer, p *resealPass, n int, c *resealCounts) error {
	if p.Phase == passHooks {
		return rs.hooksPage(ctx, tr, r, p, n, c)
	}
	if p.Phase == passDocs {
		if p.DB == "" {
			db, uuid, err := rs.dbAfter(tr, "")
			if err != nil {
				return err
			}
			if uuid == "" {
				p.Phase, p.After = passJobs, ""
				return nil
			}
			p.DB, p.DBUUID = db, uuid
		}
		uuid, err := rs.s.RegisteredDB(tr, p.DB)
		if err != nil {
			return err
		}
		if uuid != p.DBUUID { // deleted, or deleted and created again: its documents from the first
			p.DBUUID, p.After = uuid, ""
		}
		var ids []string
		next := ""
		if uuid != "" {
			if ids, next, err = docs.ReplicationDocIDs(tr, p.DB, p.After, n); err != nil {
				return err
			}
		}
		for _, id := range ids {
			o, err := rs.Doc(ctx, tr, docs, p.DB, uuid, id, r)
			if err := c.add(ctx, p.DB+"/"+id, o, err); err != nil {
				return err
			}
		}
		p.After = next
		if next == "" {
			db, dbUUID, err := rs.dbAfter(tr, p.DB)
			if err != nil {
				return err
			}
			if dbUUID == "" {
				p.Phase, p.DB, p.DBUUID = passJobs, "", ""
			} else {
				p.DB, p.DBUUID = db, dbUUID
			}
		}
		return nil
	}
	jobs, err := rs.s.jobs.JobsAfter(ctx, tr, JobType, p.After, n)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		p.After = j.ID
		d, err := DecodeJobData(j.Data)
		if err != nil || !d.Transient() && d.TemplateDB == "" || !d.Rep.Moves(r.o) {
			continue
		}
		o, err := rs.Transient(ctx, tr, j.ID, r)
		if err := c.add(ctx, "job "+j.ID, o, err); err != nil {
			return err
		}
	}
	if len(jobs) < n {
		p.Phase, p.After = passHooks, ""
	}
	return nil
}

// hooksPage walks one page of the webhooks phase: up to n webhooks after
// p.After (the hex of the last one's key within the webhooks' range), each
// secret that moves resealed in place (bound, as SealWebhookSecret binds
// it, to its URL's origin).
func (rs *Reseal) hooksPage(ctx context.Context, tr kv.Transaction, r *Resealer, p *resealPass, n int, c *resealCounts) error {
	w := rs.s.webhooks
	rg := subspaceRange(w.hooks)
	if p.After != "" {
		after, err := hex.DecodeString(p.After)
		if err != nil {
			return fmt.Errorf("replicator: reseal pass: webhooks phase after %q: %w", p.After, err)
		}
		rg.Begin = kv.KeyAfter(append(w.hooks.Pack(nil), after...))
	}
	kvs, err := tr.GetRange(rg, kv.RangeOptions{Limit: n}).GetSliceWithError()
	if err != nil {
		return err
	}
	for _, e := range kvs {
		p.After = hex.EncodeToString([]byte(e.Key[len(w.hooks.Pack(nil)):]))
		var h Webhook
		if json.Unmarshal(e.Value, &h) != nil || !moves(r.o, h.Secret) {
			continue
		}
		v, err := r.value(webhookSealScope(h.Owner, h.ID), "secret", webhookOrigin(h.URL), h.Secret)
		if err == nil && v == h.Secret {
			continue // corrupt: stays, and its deliveries say why
		}
		if err == nil {
			h.Secret = v
			var b []byte
			if b, err = json.Marshal(h); err == nil {
				tr.Set(e.Key, b)
			}
		}
		if err := c.add(ctx, "webhook "+h.ID+" of "+h.Owner, ResealMoved, err); err != nil {
			return err
		}
	}
	if len(kvs) < n {
		p.Phase, p.After = passDone, ""
	}
	return nil
}

// dbAfter returns the first registered _replicator database whose name
// follows after ("" for the first), with its UUID; "" when none does.
// It reads at tr's snapshot.
func (rs *Reseal) dbAfter(tr kv.ReadTransaction, after string) (string, string, error) {
	begin := rs.s.k.dbs.Pack(nil)
	if after != "" {
		begin = kv.KeyAfter(rs.s.k.dbKey(after))
	}
	end, err := kv.Strinc(rs.s.k.dbs.Pack(nil))
	if err != nil {
		return "", "", err
	}
	rows, err := tr.Snapshot().GetRange(kv.KeyRange{Begin: begin, End: end}, kv.RangeOptions{Limit: 1}).GetSliceWithError()
	if err != nil || len(rows) == 0 {
		return "", "", err
	}
	t, err := rs.s.k.dbs.Unpack(rows[0].Key)
	if err != nil || len(t) != 1 {
		return "", "", err
	}
	name, _ := t[0].(string)
	return name, string(rows[0].Value), nil
}

// newToken is a random token naming one page of a pass.
func newToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
