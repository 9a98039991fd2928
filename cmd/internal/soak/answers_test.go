package soak

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPollTakesQueuedAnswers replays the checks of CI's failure (TestSoak/
// serve, "liveness: POST /_replicate #7 ... has not answered; its job
// completed at +19.432s", reported at +28.07s): the loop waited about 10 s
// on a cancel (which waits up to replicator.RunEndWaitDefault for its
// run's end) while the POST's answer came and waited in s.answers; when
// the cancel returned, the loop's select took its timer rather than the
// answer (it picks at random among ready cases) and the poll's checks saw
// the POST unanswered. The poll takes the answers that came first, and
// one that came late is reported as such, from when it came.
func TestPollTakesQueuedAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  time.Duration // after its job completed
		problem string
	}{
		{name: "in time", answer: 70 * time.Millisecond},
		{name: "late", answer: soakStep + soakSlack() + time.Second, problem: "answered only at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			views := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == "/_scheduler/jobs":
					_, _ = w.Write([]byte(`{"jobs":[]}`))
				case strings.HasPrefix(r.URL.Path, "/_scheduler/docs"):
					_, _ = w.Write([]byte(`{"docs":[]}`))
				case r.URL.Path == "/_active_tasks":
					_, _ = w.Write([]byte(`[]`))
				default:
					http.NotFound(w, r)
				}
			}))
			defer views.Close()

			now := time.Now()
			began := now.Add(-28 * time.Second)
			at := func(d time.Duration) time.Time { return began.Add(d) }
			s := &soak{
				t: t, topo: soakTopology{name: "serve", nodes: []string{"soak@127.0.0.1"}}, pick: rand.New(rand.NewPCG(1, 2)),
				addrs: []string{strings.TrimPrefix(views.URL, "http://")}, client: views.Client(), began: began,
				proc: &soakProc{}, kills: 2, lastKill: at(16564 * time.Millisecond), lastRestart: at(16729 * time.Millisecond),
				maxJobs: 4, dbs: map[string]bool{"_replicator": true}, docs: map[string]*soakVersion{},
				versions: map[string]*soakVersion{}, jobVer: map[string]*soakVersion{}, open: map[string][]*soakRun{},
				answers: make(chan soakAnswer, 1), suspects: map[string]time.Time{}, errors: map[string]bool{},
				stats: map[string]int{}, maxSeen: map[string]int{}, worst: map[string]time.Duration{},
			}
			s.shapeChanged = s.lastRestart
			s.limits = []soakLimit{{at: began, n: s.maxJobs}}
			// POST #7: a one-shot replication of a static source, its job
			// completed at +19.432s (its log line), its answer queued.
			v := &soakVersion{key: "soak0-t00028", src: "static", source: "soak0-static0", created: at(17200 * time.Millisecond)}
			p := &soakPost{n: 7, v: v, sent: at(17176 * time.Millisecond)}
			v.post = p
			s.posts = append(s.posts, p)
			s.versions[v.key] = v
			v.completed, v.runs, v.everRan = at(19432*time.Millisecond), 1, true
			s.answers <- soakAnswer{p: p, status: http.StatusOK, raw: []byte(`{"ok":true}`), at: v.completed.Add(tc.answer)}

			s.poll()

			if tc.problem == "" {
				require.Empty(t, s.problems)
			} else {
				require.Len(t, s.problems, 1)
				require.Contains(t, s.problems[0], tc.problem)
			}
			require.Equal(t, v.completed.Add(tc.answer), p.answered, "the queued answer was taken, at the time it came")
		})
	}
}
