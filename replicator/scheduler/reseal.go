package scheduler

import (
	"context"

	"github.com/fdbrep/fdbrep/replicator"
)

// The lines a reseal pass logs.
const (
	MsgResealStarted = "replicator: reseal pass started"
	MsgResealEnded   = "replicator: reseal pass ended"
)

// reseal walks up to ResealPagesDefault pages of the reseal pass
// (replicator.Reseal.Step: every _replicator document with its job, and
// every transient job, moved to this node's current sealing key) at every
// interval step of a node that holds private keys. One node at a time
// holds the pass, for two intervals renewed at each page; another goes on
// from its place when it stops. It logs a pass's start and end, and counts
// what it moved in MetricCredentialsResealed.
func (n *Node) reseal(ctx context.Context, cfg Config) error {
	if cfg.Opener == nil || cfg.DocUpdater == nil {
		return nil
	}
	rep, err := n.store.Reseal().Step(ctx, cfg.DocUpdater, cfg.Opener, cfg.NodeName, cfg.Clock.Now, 2*cfg.Interval, replicator.ResealPagesDefault)
	n.m.Add(replicator.MetricCredentialsResealed, int64(rep.Moved))
	if rep.Started {
		cfg.Logger.Info().Str("key", rep.Key).
			Str("why", "the endpoint credentials stored are moved to this node's current sealing key, a page of documents and jobs at a time").
			Msg(MsgResealStarted)
	}
	if rep.Ended {
		e := cfg.Logger.Info()
		why := "every endpoint credential stored when the pass started was sealed to key " + rep.Key +
			" (or to a key no node holds, or could not be moved: named): once this pass started after every frontend sealed to it, older keys can be dropped"
		if !rep.Clean {
			why = "credentials were moved or held back (replications that ran during the pass keep credentials sealed to an older key " +
				"until they start again on a node that holds the current key); another pass checks in " + replicator.ResealRetryDefault.String()
		}
		if rep.PassSkipped > 0 {
			e = cfg.Logger.Warn().Strs("not_moved", rep.PassNamed)
		}
		e.Str("key", rep.Key).Time("started", rep.PassStarted).Int("moved", rep.PassMoved).Int("held", rep.PassHeld).
			Int("skipped", rep.PassSkipped).Bool("clean", rep.Clean).Str("why", why).Msg(MsgResealEnded)
	}
	return err
}
