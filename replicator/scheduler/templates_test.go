package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/simengine"
)

// The template's invariant (doc.go, "Templates") over random operations:
// databases of its server created and deleted, matching or not, the
// template's pattern edited, and its node stopped and another taking it
// over, interleaved with its work. Once they end, the template has a
// replication of exactly the matching databases, each as the template now
// says. Seeded: FDBREP_TEST_SEED replays a run.
func TestTemplateModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(testutil.Seed(t), 1))
	cfg := testConfig()
	eng := simengine.New()
	c := newCluster(t, 1, eng, cfg)
	const server = "http://h:5984/"
	dbs := map[string]bool{}
	pattern := "u-*"
	put := func() {
		c.PutDoc("_replicator", "tmpl", map[string]any{
			"source": map[string]any{"url": server, "databases": pattern}, "target": "http://b:5984/copy-{db}", "continuous": true,
		})
	}
	put()
	nodes := 1
	for range 60 {
		switch op := rng.IntN(10); {
		case op < 5:
			db := fmt.Sprintf("%s-%d", []string{"u", "x"}[rng.IntN(2)], rng.IntN(30))
			dbs[db] = true
			eng.CreateDB(server, db)
		case op < 8:
			for db := range dbs {
				delete(dbs, db)
				eng.DeleteDB(server, db)
				break
			}
		case op < 9:
			pattern = map[string]string{"u-*": "u-1*", "u-1*": "u-*"}[pattern]
			put()
		default:
			if nodes < 3 {
				c.Nodes[len(c.Nodes)-1].Stop()
				c.AddNode(fmt.Sprintf("node%d", nodes))
				nodes++
			}
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
	}
	tmpl, err := replicator.ParseSpec([]byte(`{"source": {"url": "` + server + `", "databases": "` + pattern + `"}, "target": "http://b:5984/copy-{db}", "continuous": true}`))
	require.NoError(t, err)
	match, err := tmpl.Template.Matcher()
	require.NoError(t, err)
	var want []string
	for db := range dbs {
		if match(db) {
			want = append(want, db)
		}
	}
	slices.Sort(want)
	u := c.DocJobID("_replicator", "tmpl")
	dbUUID := u[:strings.IndexByte(u, '|')]
	testutil.Eventually(t, "the template's replications are the matching databases' ("+strings.Join(want, ",")+")", func() bool {
		got, err := kv.ReadTransact(context.Background(), c.Store, func(tr kv.ReadTransaction) ([]string, error) {
			return c.Store.Templates().Children(tr, dbUUID, "tmpl", "", 1000)
		})
		require.NoError(t, err)
		if !slices.Equal(got, want) {
			return false
		}
		for _, db := range got {
			d, _, err := c.Store.Job(context.Background(), nil, replicator.ChildJobID(dbUUID, "tmpl", db))
			require.NoError(t, err)
			child, err := tmpl.Child(db)
			require.NoError(t, err)
			if d == nil || !replicator.SameReplication(d.Rep, child) {
				return false
			}
		}
		return true
	})
	// Deleting the template removes them.
	c.PutDoc("_replicator", "tmpl", nil)
	testutil.Eventually(t, "the template's replications removed", func() bool {
		got, err := kv.ReadTransact(context.Background(), c.Store, func(tr kv.ReadTransaction) ([]string, error) {
			return c.Store.Templates().Children(tr, dbUUID, "tmpl", "", 1000)
		})
		require.NoError(t, err)
		return len(got) == 0
	})
}
