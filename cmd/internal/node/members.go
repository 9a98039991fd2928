package node

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator/scheduler"
)

// acceptingNodes tells the job layer which replication nodes are alive,
// for the shards of its pending queue (fdbjobs.Config.Members): it wraps
// the membership the scheduler balances through and keeps the replication
// members of the scheduler's latest reading (every scheduler interval),
// so that the job layer reads nothing more. Until the first reading, and
// on a node without the replication role, the list is empty and the job
// layer counts every shard as the node's own.
type acceptingNodes struct {
	scheduler.Membership // set before the scheduler starts
	self                 string
	names                atomic.Pointer[[]string]
}

// Members reads the membership and keeps the replication nodes' names.
func (a *acceptingNodes) Members(ctx context.Context, now time.Time) ([]cluster.Member, error) {
	ms, err := a.Membership.Members(ctx, now)
	if err == nil {
		var names []string
		for _, m := range ms {
			if m.HasRole(config.RoleReplication) {
				names = append(names, m.Name)
			}
		}
		slices.Sort(names)
		a.names.Store(&names)
	}
	return ms, err
}

// list is the fdbjobs.Config.Members hook.
func (a *acceptingNodes) list() (string, []string) {
	if p := a.names.Load(); p != nil {
		return a.self, *p
	}
	return a.self, nil
}
