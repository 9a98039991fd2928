package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The trim stops what runs beyond max_jobs.
func TestPlanTrim(t *testing.T) {
	for _, tc := range []struct{ active, maxJobs, want int }{
		{10, 8, 2}, {8, 8, 0}, {5, 8, 0}, {3, 1, 2},
	} {
		require.Equal(t, tc.want, planTrim(tc.active, tc.maxJobs), "%d running, max_jobs %d", tc.active, tc.maxJobs)
	}
}

// The rotation stops as many jobs as wait beyond the node's room, within
// max_churn less what the trim stopped, among the rotatable ones, and
// counts no more pending jobs than it could use.
func TestPlanRotation(t *testing.T) {
	for _, tc := range []struct {
		name                                              string
		kept, rotatable, pending, maxJobs, churn, stopped int
		limit, want                                       int
	}{
		{"full node, many waiting", 5, 3, 10, 5, 2, 0, 2, 2},
		{"full node, one waiting", 5, 3, 1, 5, 2, 0, 2, 1},
		{"room for what waits", 3, 3, 2, 5, 2, 0, 4, 0},
		{"room for some", 3, 3, 3, 5, 2, 0, 4, 1},
		{"churn spent by the trim", 5, 3, 10, 5, 2, 2, 0, 0},
		{"nothing rotatable", 5, 0, 10, 5, 2, 0, 0, 0},
		{"fewer rotatable than churn", 5, 1, 10, 5, 4, 0, 1, 1},
		{"over max_jobs", 7, 3, 10, 5, 3, 0, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.limit, rotationPendingLimit(tc.kept, tc.rotatable, tc.maxJobs, tc.churn, tc.stopped))
			require.Equal(t, tc.want, planRotation(tc.kept, tc.rotatable, tc.pending, tc.maxJobs, tc.churn, tc.stopped))
		})
	}
}

// Balance: full clusters rotate; a node over its share moves jobs while
// the nodes are out of balance; the others take up to a tenth above the
// mean meanwhile, never so many that they are out of balance themselves;
// a balanced cluster takes jobs into all its room.
func TestPlanBalance(t *testing.T) {
	for _, tc := range []struct {
		name                             string
		own                              int
		others                           []int
		pending, maxJobs, churn, stopped int
		limit                            int
		want                             balancePlan
	}{
		{"alone, room", 3, nil, 2, 10, 5, 0, 7, balancePlan{share: 5, shareMoving: 5}},
		{"full", 10, []int{10}, 1, 10, 5, 0, 1, balancePlan{full: true}},
		{"many waiting", 0, []int{0}, balancePendingMax, 5000, 5, 0, balancePendingMax, balancePlan{full: true}},
		{"heavy node moves", 8, []int{2}, 0, 10, 5, 0, 10, balancePlan{share: 5, move: 3, shareMoving: 5, shareStaying: 5}},
		{"moves within churn", 8, []int{2}, 0, 10, 5, 4, 10, balancePlan{share: 5, move: 1, shareMoving: 5, shareStaying: 5}},
		{"light node takes up to its share when a tenth is under one job", 2, []int{8}, 0, 10, 5, 0, 10, balancePlan{share: 5, shareMoving: 5, shareStaying: 5}},
		{"joining node", 0, []int{10, 10}, 0, 20, 5, 0, 40, balancePlan{share: 7, shareMoving: 7, shareStaying: 7}},
		// 27.5 rounded down: a node at 28 would be over 110% itself and move
		// jobs back (a fourth node joining 33, 33 and 34 ended 28/22).
		{"a tenth above, rounded down", 0, []int{33, 33, 34}, 0, 100, 20, 0, 300, balancePlan{share: 25, shareMoving: 25, shareStaying: 27}},
		{"balanced", 5, []int{5}, 0, 10, 5, 0, 10, balancePlan{share: 5, shareMoving: 5}},
		{"within the tolerance", 11, []int{10}, 0, 20, 5, 0, 19, balancePlan{share: 11, shareMoving: 11}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := loadOf(tc.own, tc.others)
			require.Equal(t, tc.limit, l.pendingLimit(tc.maxJobs))
			require.Equal(t, tc.want, l.plan(tc.pending, tc.maxJobs, tc.churn, tc.stopped))
		})
	}
}
