package control

import (
	"cmp"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// The model of the membership's stalls (cast.show): which jobs show one,
// with which reason, and since when, for each mix of member records.
func TestCastShow(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ms := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	// member is a record whose last heartbeat was ago; it expires 30 s
	// after it.
	member := func(name, role string, ago time.Duration) cluster.Member {
		return cluster.Member{Name: name, Roles: []string{role}, Seen: ms(-ago), Expires: ms(30*time.Second - ago)}
	}
	var (
		fe      = member("fe", config.RoleAPIFrontend, time.Second)
		feDead  = member("fe-old", config.RoleAPIFrontend, time.Minute) // later than any replica's: not counted
		r1      = member("r1", config.RoleReplication, 2*time.Second)
		r2Dead  = member("r2", config.RoleReplication, 5*time.Minute)
		r3Dead  = member("r3", config.RoleReplication, 3*time.Minute)
		pending = &replicator.JobData{State: replicator.StatePending, LastUpdated: ms(-10 * time.Minute)}
		fresh   = &replicator.JobData{State: replicator.StatePending, LastUpdated: ms(-time.Minute)}
		onR1    = &replicator.JobData{State: replicator.StateRunning, Node: "r1", LastUpdated: ms(-time.Second)}
		onR2    = &replicator.JobData{State: replicator.StateRunning, Node: "r2", LastUpdated: ms(-6 * time.Minute)}
		onGone  = &replicator.JobData{State: replicator.StateRunning, Node: "gone", LastUpdated: ms(-4 * time.Minute)}
		backing = &replicator.JobData{State: replicator.StateCrashing, LastUpdated: ms(-20 * time.Minute), RetryAt: ms(time.Minute)}
		retried = &replicator.JobData{State: replicator.StateCrashing, LastUpdated: ms(-20 * time.Minute), RetryAt: ms(-2 * time.Minute)}
		parked  = &replicator.JobData{State: replicator.StateParked, LastUpdated: ms(-time.Hour)}
	)
	for _, tc := range []struct {
		name    string
		records []cluster.Member
		job     *replicator.JobData
		reason  string // "" for no stall
		since   int64  // the stall's
		node    string // the node named in the detail
		shownAs string // the state shown ("" for the job's own)
	}{
		{name: "pending, a replication node alive", records: []cluster.Member{fe, r1, r2Dead}, job: pending},
		{name: "pending, no record at all", job: pending, reason: engine.StallNoReplicationNode, since: pending.LastUpdated},
		{name: "pending, frontends only", records: []cluster.Member{fe, feDead}, job: pending,
			reason: engine.StallNoReplicationNode, since: pending.LastUpdated},
		{name: "pending since before the last replication node was seen", records: []cluster.Member{fe, r2Dead, r3Dead}, job: pending,
			reason: engine.StallNoReplicationNode, since: r3Dead.Seen},
		{name: "pending since after the last replication node was seen", records: []cluster.Member{fe, r2Dead}, job: fresh,
			reason: engine.StallNoReplicationNode, since: fresh.LastUpdated},
		{name: "running on a live node", records: []cluster.Member{fe, r1}, job: onR1},
		{name: "running on a dead node, another alive", records: []cluster.Member{fe, r1, r2Dead}, job: onR2,
			reason: engine.StallNodeDown, since: r2Dead.Seen, node: "r2", shownAs: replicator.StatePending},
		{name: "running on a node without a record, another alive", records: []cluster.Member{r1}, job: onGone,
			reason: engine.StallNodeDown, since: onGone.LastUpdated, node: "gone", shownAs: replicator.StatePending},
		{name: "running on a dead node, none alive", records: []cluster.Member{fe, r2Dead}, job: onR2,
			reason: engine.StallNoReplicationNode, since: r2Dead.Seen, node: "r2", shownAs: replicator.StatePending},
		{name: "running on a node without a record, a later one dead", records: []cluster.Member{r3Dead}, job: onGone,
			reason: engine.StallNoReplicationNode, since: r3Dead.Seen, node: "gone", shownAs: replicator.StatePending},
		{name: "crashing, backoff ahead, none alive", records: []cluster.Member{fe}, job: backing},
		{name: "crashing, backoff over, none alive", records: []cluster.Member{fe}, job: retried,
			reason: engine.StallNoReplicationNode, since: retried.RetryAt},
		{name: "crashing, backoff over, a replication node alive", records: []cluster.Member{r1}, job: retried},
		{name: "parked, none alive", records: []cluster.Member{fe}, job: parked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := *tc.job
			d, stall := castOf(tc.records, now).show(tc.job)
			require.Equal(t, before, *tc.job, "the job's data is not changed")
			require.Equal(t, cmp.Or(tc.shownAs, tc.job.State), d.State)
			if tc.shownAs != "" {
				require.Empty(t, d.Node, "shown on no node")
			}
			if tc.reason == "" {
				require.Nil(t, stall)
				return
			}
			require.NotNil(t, stall)
			require.Equal(t, tc.reason, stall.Reason)
			require.Equal(t, tc.since, stall.Since)
			if tc.node != "" {
				require.Contains(t, stall.Detail, "node "+tc.node+", which ran the job")
			}
		})
	}
}

// The views' info carries the membership's stall in place of the state's:
// a crashing job past its backoff with no replication node alive shows
// no_replication_node, not backing_off.
func TestInfoShowsTheMembershipStall(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d := &replicator.JobData{State: replicator.StateCrashing, LastError: "boom", LastUpdated: now.Add(-time.Hour).UnixMilli(),
		RetryAt: now.Add(-time.Minute).UnixMilli(), StateInfo: replicator.StateInfo("error", "boom")}
	var got struct {
		Stall struct{ Reason, Detail, Since string } `json:"stall"`
	}
	require.NoError(t, json.Unmarshal(info(shown{JobData: d}), &got))
	require.Equal(t, engine.StallBackingOff, got.Stall.Reason, "without a membership")
	x, stall := castOf(nil, now).show(d)
	require.NoError(t, json.Unmarshal(info(shown{x, stall}), &got))
	require.Equal(t, engine.StallNoReplicationNode, got.Stall.Reason)
	require.Equal(t, "2026-01-01T11:59:00Z", got.Stall.Since)
	require.Contains(t, got.Stall.Detail, "the job starts when one joins")
}
