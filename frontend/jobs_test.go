package frontend

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/fdbjobs/jobshttp"
)

// /_jobs/ serves the job layer's kinds to server admins only, and answers
// 404 on a frontend without them.
func TestJobsForServerAdmins(t *testing.T) {
	var jobs *fdbjobs.Client
	e := newEnv(t, func(o *Options) {
		var err error
		jobs, err = fdbjobs.New(o.DB, fdbjobs.Config{})
		require.NoError(t, err)
		o.Jobs = jobshttp.New(jobs, jobshttp.Options{})
	})
	ctx := context.Background()
	require.NoError(t, jobs.SetTypeTimeout(ctx, nil, "mail", time.Minute))
	require.NoError(t, jobs.SetFeed(ctx, nil, "mail", time.Hour))
	require.NoError(t, jobs.Add(ctx, nil, "mail", "a", nil, 0))

	for _, c := range []*creds{anon, asAlice} {
		for _, path := range []string{"/_jobs/", "/_jobs/mail", "/_jobs/mail/_feed"} {
			requireError(t, e.do("GET", path, c, nil), 401, "unauthorized")
		}
	}
	r := e.do("GET", "/_jobs/", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, []any{"mail"}, r.Body["kinds"])
	r = e.do("GET", "/_jobs/mail/_feed", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	res := r.Body["results"].([]any)
	require.Len(t, res, 1)
	require.Equal(t, "inserted", res[0].(map[string]any)["event"])
	requireError(t, e.do("GET", "/_jobs/other/_feed", asAdmin, nil), 404, "not_found")
	requireError(t, e.do("GET", "/_jobs/other", asAdmin, nil), 404, "not_found")
	r = e.do("GET", "/_jobs/mail", asAdmin, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.EqualValues(t, 1, r.Body["counts"].(map[string]any)["pending"])
	page := e.do("GET", "/_jobs/_ui/", asAdmin, nil)
	require.Equal(t, 200, page.Status)
	require.Contains(t, page.Raw, `<a href="k/mail">mail</a>`, "the web page")
	requireError(t, e.do("GET", "/_jobs/_ui/", asAlice, nil), 401, "unauthorized")

	bare := newEnv(t)
	requireError(t, bare.do("GET", "/_jobs/mail", asAdmin, nil), 404, "not_found")
}
