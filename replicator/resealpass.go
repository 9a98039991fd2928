package replicator

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/seal"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// The reseal pass: a walk over every _replicator document (with its job)
// and every transient job, a page per transaction, that moves their
// credentials to the current key (ResealDoc, ResealTransient). Its place
// is one record in the store, so the walk goes on across intervals,
// nodes and restarts; one node at a time holds it for a lease (as the
// removal of a deleted database's jobs), so two nodes do not conflict on
// every page. A pass ends when the walk does; another starts when a node
// whose current key is not the last pass's finds no pass under way (while
// the nodes' current keys differ, during a rolling restart, each pass runs
// to its end; every node must list the same key first, or their passes
// take turns moving credentials back and forth), and ResealAgainDefault
// after the last ended (sooner, ResealRetryDefault, when running jobs held
// some of the values back: their holders move them at their next start,
// but a job can run for days).

const (
	// ResealPageDefault is how many documents or jobs a reseal page
	// examines, in one transaction (fewer while its transactions fail:
	// kv.TransactBatch).
	ResealPageDefault = 50
	// ResealPagesDefault is how many pages a node's interval step walks at
	// most: a pass over n documents takes about n / (50 × 20) steps.
	ResealPagesDefault = 20
	// ResealAgainDefault is how long after a pass ended the next starts:
	// it finds what was sealed meanwhile to a key other than the current
	// one (a frontend still configured with the old public key).
	ResealAgainDefault = 24 * time.Hour
	// ResealRetryDefault is ResealAgainDefault for a pass that running
	// jobs held values back from.
	ResealRetryDefault = 10 * time.Minute
)

// resealPass is the record of the current or last pass.
type resealPass struct {
	Key     string `json:"key"`             // the key id values move to
	Phase   string `json:"phase"`           // passDocs, passJobs, passDone
	DB      string `json:"db,omitempty"`    // passDocs: the database walked
	After   string `json:"after,omitempty"` // the last document or job id done
	Holder  string `json:"holder,omitempty"`
	Until   int64  `json:"until,omitempty"` // the holder's lease (Unix ms)
	Started int64  `json:"started"`         // Unix ms
	Ended   int64  `json:"ended,omitempty"` // passDone: when (Unix ms)
	Moved   int    `json:"moved"`           // documents and jobs changed
	Held    int    `json:"held"`            // left to their running jobs' holders
}

const (
	passDocs = "docs"
	passJobs = "jobs"
	passDone = "done"
)

func (s *Store) resealKey() kv.Key { return s.root.Pack(tuple.Tuple{keyReseal}) }

// ResealReport is what a ResealStep did.
type ResealReport struct {
	Pages       int  // pages walked: 0 when another node holds the pass, or none is due
	Moved, Held int  // documents and jobs moved, and held back, by this step
	Started     bool // this step started a pass
	Ended       bool // this step ended the pass
	// Pass counts over the whole pass, when it ended.
	PassMoved, PassHeld int
	Key                 string // the current key id
}

// ResealStep walks up to pages pages of the reseal pass to o's current
// key, as holder at now (see above), each page a transaction; nothing
// when another node holds the pass (until its lease, renewed at each
// page, runs out) or the last pass ended less than ResealAgainDefault
// ago. Values sealed to keys o lacks stay (the runs that need them say
// so).
func (s *Store) ResealStep(ctx context.Context, docs DocRewriter, o *seal.Opener, holder string, now func() time.Time, lease time.Duration, pages int) (ResealReport, error) {
	rep := ResealReport{Key: o.Current().ID()}
	size := kv.Batch{Max: ResealPageDefault} // smaller after a page's transaction failed
	for range pages {
		r := NewResealer(o) // one per page: the memo lives across the page's attempts only
		type outcome struct {
			moved, held         int
			walked, start, end  bool
			passMoved, passHeld int
		}
		at := now()
		out, err := kv.TransactBatch(ctx, s.DB, &size, func(tr kv.Transaction, n int) (outcome, error) {
			var out outcome
			p, err := s.readPass(tr)
			if err != nil {
				return out, err
			}
			switch {
			case p.Phase != passDone && p.Holder != holder && p.Until > at.UnixMilli():
				// Another node's, even to another key: during a rolling
				// restart the nodes' current keys differ for a while, and
				// each pass goes to its end.
				return out, nil
			case p.Key != rep.Key,
				p.Phase == passDone && at.UnixMilli() >= p.Ended+resealWait(p).Milliseconds():
				p = resealPass{Key: rep.Key, Phase: passDocs, Started: at.UnixMilli()}
				out.start = true
			case p.Phase == passDone:
				return out, nil
			}
			out.walked = true
			if err := s.resealPage(ctx, tr, docs, r, &p, n, &out.moved, &out.held); err != nil {
				return out, err
			}
			p.Moved += out.moved
			p.Held += out.held
			if p.Phase == passDone {
				p.Ended, p.Holder, p.Until = at.UnixMilli(), "", 0
				out.end, out.passMoved, out.passHeld = true, p.Moved, p.Held
			} else {
				p.Holder, p.Until = holder, at.Add(lease).UnixMilli()
			}
			v, err := json.Marshal(p)
			if err != nil {
				return out, err
			}
			tr.Set(s.resealKey(), v)
			return out, nil
		})
		if err != nil {
			return rep, err
		}
		if out.walked {
			rep.Pages++
		}
		rep.Moved += out.moved
		rep.Held += out.held
		rep.Started = rep.Started || out.start
		if out.end {
			rep.Ended, rep.PassMoved, rep.PassHeld = true, out.passMoved, out.passHeld
		}
		if !out.walked || out.end {
			return rep, nil
		}
	}
	return rep, nil
}

// resealWait is how long after pass p ended the next starts.
func resealWait(p resealPass) time.Duration {
	if p.Held > 0 {
		return ResealRetryDefault
	}
	return ResealAgainDefault
}

func (s *Store) readPass(tr kv.ReadTransaction) (resealPass, error) {
	var p resealPass
	v, err := tr.Get(s.resealKey()).Get()
	if err != nil || v == nil {
		return p, err
	}
	if json.Unmarshal(v, &p) != nil {
		return resealPass{}, nil // unreadable: a new pass starts
	}
	return p, nil
}

// resealPage walks one page of pass p, of n documents or jobs, in tr, and
// moves p on.
func (s *Store) resealPage(ctx context.Context, tr kv.Transaction, docs DocRewriter, r *Resealer, p *resealPass, n int, moved, held *int) error {
	count := func(o Reseal) {
		switch o {
		case ResealMoved:
			*moved++
		case ResealHeld:
			*held++
		}
	}
	if p.Phase == passDocs {
		if p.DB == "" {
			next, uuid, err := s.dbAfter(tr, "")
			if err != nil {
				return err
			}
			if uuid == "" {
				p.Phase, p.After = passJobs, ""
				return nil
			}
			p.DB = next
		}
		uuid, err := s.RegisteredDB(tr, p.DB)
		if err != nil {
			return err
		}
		var ids []string
		next := ""
		if uuid != "" { // else deleted since: its documents went with it
			if ids, next, err = docs.ReplicationDocIDs(tr, p.DB, p.After, n); err != nil {
				return err
			}
		}
		for _, id := range ids {
			o, err := s.ResealDoc(ctx, tr, docs, p.DB, uuid, id, r)
			if err != nil {
				return err
			}
			count(o)
		}
		p.After = next
		if next == "" {
			db, dbUUID, err := s.dbAfter(tr, p.DB)
			if err != nil {
				return err
			}
			if dbUUID == "" {
				p.Phase, p.DB = passJobs, ""
			} else {
				p.DB = db
			}
		}
		return nil
	}
	jobs, err := s.Jobs.JobsAfter(ctx, tr, JobType, p.After, n)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		p.After = j.ID
		d, err := DecodeJobData(j.Data)
		if err != nil || !d.Transient() || !d.Rep.Moves(r.o) {
			continue
		}
		o, err := s.ResealTransient(ctx, tr, j.ID, r)
		if err != nil {
			return err
		}
		count(o)
	}
	if len(jobs) < n {
		p.Phase, p.After = passDone, ""
	}
	return nil
}

// dbAfter returns the first registered _replicator database whose name
// follows after ("" for the first), with its UUID; "" when none does.
// It reads at tr's snapshot.
func (s *Store) dbAfter(tr kv.ReadTransaction, after string) (string, string, error) {
	begin := s.dbs.Pack(nil)
	if after != "" {
		begin = kv.KeyAfter(s.dbKey(after))
	}
	end, err := kv.Strinc(s.dbs.Pack(nil))
	if err != nil {
		return "", "", err
	}
	rows, err := tr.Snapshot().GetRange(kv.KeyRange{Begin: begin, End: end}, kv.RangeOptions{Limit: 1}).GetSliceWithError()
	if err != nil || len(rows) == 0 {
		return "", "", err
	}
	t, err := s.dbs.Unpack(rows[0].Key)
	if err != nil || len(t) != 1 {
		return "", "", err
	}
	name, _ := t[0].(string)
	return name, string(rows[0].Value), nil
}
