package replicator

import (
	"context"
	"encoding/json"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// FailedDoc is a document the target refused, as a job keeps it (key 24):
// the run's engine.RefusedDoc and the run that met it (JobData.Node and
// JobData.LastStart), which with RefusedDoc.Seq identifies it.
type FailedDoc struct {
	engine.RefusedDoc
	Node  string `json:"node"`
	Start int64  `json:"start"`
}

// FailedDocs is the jobs' failed documents (key 24): a job's list of the
// documents its runs' target refused, which the nodes append to and the
// views show (Views.Job). The job's removal removes its list (Store).
type FailedDocs struct {
	s   *Store
	sub subspace.Subspace // (24)
}

func (f *FailedDocs) key(jobID string) kv.Key { return f.sub.Pack(tuple.Tuple{jobID}) }

// clear removes the job's list, in tr.
func (f *FailedDocs) clear(tr kv.Transaction, jobID string) { tr.Clear(f.key(jobID)) }

// Append adds the refusals docs of the run (node, start) to the
// job's failed documents, keeping the last engine.RefusedDocsMax (about
// 500 bytes each at most: under 64 kB), in one transaction. A refusal
// already kept is not added again, so a retry after
// commit_unknown_result changes nothing. The job's removal removes them;
// nothing is stored for a job that no longer exists.
func (f *FailedDocs) Append(ctx context.Context, jobID, node string, start int64, docs []engine.RefusedDoc) error {
	if len(docs) == 0 {
		return nil
	}
	_, err := kv.Transact(ctx, f.s.db, func(tr kv.Transaction) (any, error) {
		// Not for a job removed since (its failed documents went with it).
		if d, _, err := f.s.Job(ctx, tr, jobID); err != nil || d == nil {
			return nil, err
		}
		kept, err := f.read(tr, jobID)
		if err != nil {
			return nil, err
		}
		type ref struct {
			node       string
			start, seq int64
		}
		have := make(map[ref]bool, len(kept))
		for _, k := range kept {
			have[ref{k.Node, k.Start, k.Seq}] = true
		}
		for _, d := range docs {
			if !have[ref{node, start, d.Seq}] {
				kept = append(kept, FailedDoc{RefusedDoc: d, Node: node, Start: start})
			}
		}
		if len(kept) > engine.RefusedDocsMax {
			kept = kept[len(kept)-engine.RefusedDocsMax:]
		}
		v, err := json.Marshal(kept)
		if err != nil {
			return nil, err
		}
		tr.Set(f.key(jobID), v)
		return nil, nil
	})
	return err
}

// read reads the job's failed documents, oldest first (nil: none).
func (f *FailedDocs) read(tr kv.ReadTransaction, jobID string) ([]FailedDoc, error) {
	v, err := tr.Get(f.key(jobID)).Get()
	if err != nil || v == nil {
		return nil, err
	}
	var out []FailedDoc
	if json.Unmarshal(v, &out) != nil {
		return nil, nil // a value this version cannot read: none shown
	}
	return out, nil
}
