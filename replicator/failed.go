package replicator

import (
	"context"
	"encoding/json"

	"github.com/fdbrep/fdbrep/pkg/kv"
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

func (s *Store) failedDocsKey(jobID string) kv.Key {
	return s.root.Pack(tuple.Tuple{keyFailedDocs, jobID})
}

// AppendFailedDocs adds the refusals docs of the run (node, start) to the
// job's failed documents, keeping the last engine.RefusedDocsMax (about
// 500 bytes each at most: under 64 kB), in one transaction. A refusal
// already kept is not added again, so a retry after
// commit_unknown_result changes nothing. The job's removal removes them;
// nothing is stored for a job that no longer exists.
func (s *Store) AppendFailedDocs(ctx context.Context, jobID, node string, start int64, docs []engine.RefusedDoc) error {
	if len(docs) == 0 {
		return nil
	}
	_, err := kv.Transact(ctx, s.db, func(tr kv.Transaction) (any, error) {
		// Not for a job removed since (its failed documents went with it).
		if d, _, err := s.Job(ctx, tr, jobID); err != nil || d == nil {
			return nil, err
		}
		kept, err := s.failedDocs(tr, jobID)
		if err != nil {
			return nil, err
		}
		type ref struct {
			node       string
			start, seq int64
		}
		have := make(map[ref]bool, len(kept))
		for _, f := range kept {
			have[ref{f.Node, f.Start, f.Seq}] = true
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
		tr.Set(s.failedDocsKey(jobID), v)
		return nil, nil
	})
	return err
}

// failedDocs reads the job's failed documents, oldest first (nil: none).
func (s *Store) failedDocs(tr kv.ReadTransaction, jobID string) ([]FailedDoc, error) {
	v, err := tr.Get(s.failedDocsKey(jobID)).Get()
	if err != nil || v == nil {
		return nil, err
	}
	var out []FailedDoc
	if json.Unmarshal(v, &out) != nil {
		return nil, nil // a value this version cannot read: none shown
	}
	return out, nil
}
