package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/rs/zerolog"
)

// follow_purges. CouchDB does not replicate purges: a document purged on
// the source stays on the target, and comes back to the source with the
// next replication the other way. With Replication.FollowPurges a run
// reads the source's purge log (GET _purged_infos, CouchDB 3.4 and
// later: the last purge_infos_limit purges of each shard, 1000 by
// default) and purges the same revisions on the target (POST _purge):
//
//   - when: at the run's start, and at each checkpoint, each time only
//     when the source's purge_seq (its database info) changed since the
//     purges last applied; the purge_seq applied is recorded in the
//     checkpoint documents (fdbrep_purge_seq), so a run resumes where the
//     last left off;
//   - what: each revision the log names that the source does not hold
//     again (a _revs_diff to the source: a document purged, then written
//     again with the same body, keeps its revision and is not purged) and
//     the target holds (a _revs_diff to the target: what an earlier look
//     purged is not purged again), of
//     the replication's doc_ids if it has them; a filtered or selector
//     replication follows every purge (a purged revision's body is gone,
//     so no filter can be asked), and a target without a revision ignores
//     its purge;
//   - limits: at most purgeIDsMax documents and purgeRevsMax revisions per
//     _purge, CouchDB's default [purge] max_document_id_number and
//     max_revisions_number; purges beyond the source's purge_infos_limit
//     since the last look are no longer in its log and are missed (as they
//     are by CouchDB's own indexes), which the source's administrator
//     avoids with a limit above the purges between two checkpoints.
//
// A source without _purged_infos (CouchDB before 3.4, PouchDB) or a target
// that refuses _purge (CouchDB 3.5 takes it from a server admin only)
// fails the run with ErrPurges, naming which.

// Limits of one _purge request: CouchDB's defaults of [purge]
// max_document_id_number and max_revisions_number.
const (
	purgeIDsMax  = 100
	purgeRevsMax = 1000
)

// purger applies the source's purges to the target. It is used under the
// checkpointer's ckMu (or before the run's first checkpoint), which
// guards applied and logged.
type purger struct {
	src, tgt *peer
	docIDs   map[string]bool // nil: every document
	// applied is the source's purge_seq whose purges the target has (nil
	// before the first look).
	applied json.RawMessage
	// logged is the purge_seq of the run's last checkpoint documents: a
	// checkpoint writes them when applied moved past it.
	logged json.RawMessage
	log    zerolog.Logger
}

// newPurger returns the purger of rep (nil without FollowPurges), which
// resumes from the purge_seq of the checkpoint the run starts from.
func newPurger(rep Replication, src, tgt *peer, from *CheckpointDoc, log zerolog.Logger) *purger {
	if !rep.FollowPurges {
		return nil
	}
	p := &purger{src: src, tgt: tgt, log: log}
	if rep.DocIDs != nil {
		p.docIDs = map[string]bool{}
		for _, id := range rep.docIDs() {
			p.docIDs[id] = true
		}
	}
	if from != nil {
		p.applied, p.logged = from.PurgeSeq, from.PurgeSeq
	}
	return p
}

// follow applies the purges the source made since applied, seq being its
// purge_seq now (read again when nil). It reports whether applied moved.
func (p *purger) follow(ctx context.Context, seq json.RawMessage) (bool, error) {
	if seq == nil {
		info, err := p.src.info(ctx)
		if err != nil {
			return false, err
		}
		seq = info.PurgeSeq
	}
	if len(seq) == 0 || string(seq) == "null" {
		return false, fmt.Errorf("%w: the source %s has no purge_seq: follow_purges needs a CouchDB 3.4 or later", ErrPurges, p.src.url())
	}
	if seqEqual(seq, p.applied) {
		return false, nil
	}
	var log struct {
		Infos []struct {
			ID   string   `json:"id"`
			Revs []string `json:"revs"`
		} `json:"purged_infos"`
	}
	if err := p.src.do(ctx, http.MethodGet, "_purged_infos", nil, nil, &log); err != nil {
		if s := statusOf(err); s == http.StatusNotFound || s == http.StatusBadRequest {
			return false, fmt.Errorf("%w: the source %s does not serve _purged_infos: follow_purges needs a CouchDB 3.4 or later", ErrPurges, p.src.url())
		}
		return false, fmt.Errorf("%w: _purged_infos of %s: %w", ErrPurges, p.src.url(), err)
	}
	revs := map[string][]string{}
	for _, in := range log.Infos {
		if p.docIDs != nil && !p.docIDs[in.ID] {
			continue
		}
		for _, r := range in.Revs {
			if !slices.Contains(revs[in.ID], r) {
				revs[in.ID] = append(revs[in.ID], r)
			}
		}
	}
	purged := 0
	for _, batch := range purgeBatches(revs) {
		n, err := p.purge(ctx, batch)
		if err != nil {
			return false, err
		}
		purged += n
	}
	if purged > 0 {
		p.log.Info().Int("revisions", purged).RawJSON("purge_seq", seq).
			Msg("follow_purges: purged on the target the revisions purged on the source")
	}
	p.applied = seq
	return true, nil
}

// purge purges on the target the revisions of batch the source lacks,
// and returns how many the target purged.
func (p *purger) purge(ctx context.Context, batch map[string][]string) (int, error) {
	diff, err := p.src.revsDiff(ctx, batch)
	if err != nil {
		return 0, err
	}
	gone := map[string][]string{}
	for id, e := range diff {
		for _, r := range e.Missing {
			if slices.Contains(batch[id], r) {
				gone[id] = append(gone[id], r)
			}
		}
	}
	if len(gone) == 0 {
		return 0, nil
	}
	// Only what the target holds: a purge of a revision it lacks (one
	// purged at an earlier look) would grow its own purge log for nothing.
	tdiff, err := p.tgt.revsDiff(ctx, gone)
	if err != nil {
		return 0, err
	}
	for id, e := range tdiff {
		rs := slices.DeleteFunc(gone[id], func(r string) bool { return slices.Contains(e.Missing, r) })
		if len(rs) == 0 {
			delete(gone, id)
		} else {
			gone[id] = rs
		}
	}
	if len(gone) == 0 {
		return 0, nil
	}
	b, err := json.Marshal(gone)
	if err != nil {
		return 0, err
	}
	var reply struct {
		Purged map[string]json.RawMessage `json:"purged"`
	}
	req := httpRequest{method: http.MethodPost, path: "_purge", body: b, maxBody: AnswerMax + int64(len(b)), limit: replyLimit}
	if err := p.tgt.doRequest(ctx, req, &reply); err != nil {
		return 0, fmt.Errorf("%w: the target %s refused _purge (CouchDB takes it from a server admin only): %w", ErrPurges, p.tgt.url(), err)
	}
	n := 0
	for _, raw := range reply.Purged {
		// CouchDB 3.x answers {"id": ["rev", …]}.
		var revs []string
		if json.Unmarshal(raw, &revs) == nil {
			n += len(revs)
		}
	}
	return n, nil
}

// purgeBatches splits revs into _purge requests of at most purgeIDsMax
// documents and purgeRevsMax revisions (a document with more revisions
// than that is split across requests), in the order of the ids.
func purgeBatches(revs map[string][]string) []map[string][]string {
	ids := make([]string, 0, len(revs))
	for id := range revs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []map[string][]string
	cur, n := map[string][]string{}, 0
	for _, id := range ids {
		rs := revs[id]
		for len(rs) > 0 {
			if len(cur) == purgeIDsMax || n == purgeRevsMax {
				out = append(out, cur)
				cur, n = map[string][]string{}, 0
			}
			k := min(len(rs), purgeRevsMax-n)
			cur[id] = append(cur[id], rs[:k]...)
			n += k
			rs = rs[k:]
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
