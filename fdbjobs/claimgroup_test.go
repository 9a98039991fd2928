package fdbjobs

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// The calls that come while a claim transaction runs share the next one,
// in order, of the same way of granting and up to max claims; the others
// wait for a later one; each call returns once its own transaction ran.
func TestClaimGroup(t *testing.T) {
	g := &claimGroup{}
	var mu sync.Mutex
	var runs [][]string // the jobs of each run
	release := make(chan struct{})
	run := func(claims []*claim) {
		mu.Lock()
		n := len(runs)
		var ids []string
		for _, cl := range claims {
			ids = append(ids, cl.job.ID)
		}
		runs = append(runs, ids)
		mu.Unlock()
		for _, cl := range claims {
			cl.err = fmt.Errorf("run %d", n)
		}
		if n == 0 {
			<-release
		}
	}
	call := func(leasing bool, ids ...string) *claimCall {
		c := &claimCall{leasing: leasing}
		for _, id := range ids {
			c.claims = append(c.claims, &claim{job: &Job{ID: id}})
		}
		return c
	}
	a, b, c, d, e := call(false, "a"), call(false, "b1", "b2"), call(true, "c"), call(false, "d1", "d2"), call(false, "e1", "e2", "e3")
	var wg sync.WaitGroup
	do := func(cl *claimCall) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.claim(cl, 4, run)
		}()
	}
	do(a)
	testutil.Eventually(t, "a's transaction runs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == 1
	})
	for _, cl := range []*claimCall{b, c, d, e} {
		do(cl)
		testutil.Eventually(t, "the call waits", func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.waiting) > 0 && g.waiting[len(g.waiting)-1] == cl
		})
	}
	close(release)
	wg.Wait()

	require.Equal(t, [][]string{{"a"}, {"b1", "b2", "d1", "d2"}, {"c"}, {"e1", "e2", "e3"}}, runs)
	for cl, want := range map[*claimCall]string{a: "run 0", b: "run 1", d: "run 1", c: "run 2", e: "run 3"} {
		for _, c := range cl.claims {
			require.EqualError(t, c.err, want) // its transaction's outcome, seen by its caller
		}
	}
	require.Empty(t, g.waiting)
	require.False(t, g.leading)
}
