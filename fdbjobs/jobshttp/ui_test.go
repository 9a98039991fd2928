package jobshttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/fdbjobs/jobshttp"
	"github.com/fdbrep/fdbrep/internal/browsertest"
	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
)

type mailArgs struct {
	To string `json:"to"`
}

func (mailArgs) Kind() string { return "mail" }

// TestWebPage drives the web page in headless Chromium: the kinds with
// their counts (which follow new jobs without a reload), pausing and
// resuming a kind, the jobs of each state, a job with its arguments and
// errors, retrying, cancelling and deleting it, finding one by id, and
// the schedules with their actions. Names are shown as text, never as
// markup; another site's page cannot act.
func TestWebPage(t *testing.T) {
	kvtest.PlainStoreOnly(t, "a browser's view of the page")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := fdbjobs.New(kvtest.NewDB(t), fdbjobs.Config{})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(c.Stop)
	ws := fdbjobs.NewWorkers()
	require.NoError(t, fdbjobs.AddWorker(ws, fdbjobs.WorkFunc[mailArgs](func(ctx context.Context, w *fdbjobs.Work[mailArgs]) error {
		if strings.HasPrefix(w.Args.To, "bad") {
			return fdbjobs.Permanent(errors.New("no such mailbox: " + w.Args.To))
		}
		return nil
	}), fdbjobs.WorkerOptions{}))
	rt, err := fdbjobs.NewRuntime(c, ws, fdbjobs.RuntimeOptions{})
	require.NoError(t, err)
	require.NoError(t, rt.Start(ctx))
	t.Cleanup(rt.StopAndCancel)
	require.NoError(t, c.SetFeed(ctx, nil, "mail", time.Hour))

	bad, err := c.Insert(ctx, nil, mailArgs{To: "bad@example.com"}, fdbjobs.InsertOptions{})
	require.NoError(t, err)
	later, err := c.Insert(ctx, nil, mailArgs{To: "<b>later</b>"}, fdbjobs.InsertOptions{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	testutil.Eventually(t, "the bad mail discarded", func() bool {
		j, err := c.GetJob(ctx, nil, "mail", bad.ID)
		return err == nil && j.State == fdbjobs.OutcomeDiscarded
	})
	_, err = c.PutSchedule(ctx, nil, fdbjobs.Schedule{Name: "nightly <digest>", Args: mailArgs{To: "team"}, Cron: "0 3 * * *",
		TimeZone: "Europe/Paris"})
	require.NoError(t, err)

	// A kind an application manages: read-only, its arguments not shown.
	require.NoError(t, c.SetTypeTimeout(ctx, nil, "managed", time.Minute))
	require.NoError(t, c.Add(ctx, nil, "managed", "m1", json.RawMessage(`{"password":"hunter2"}`), 0))

	// Mounted under a prefix, as fdbrep mounts it: its links and
	// redirects stay under it.
	srv := httptest.NewServer(http.StripPrefix("/_jobs", jobshttp.New(c, jobshttp.Options{Managed: []string{"managed"}})))
	defer srv.Close()
	// As a browser: "localhost", so that a request to 127.0.0.1 below is
	// another site's.
	base := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/_jobs/_ui/"
	b := browsertest.Start(t)
	count := func(row, state string) string {
		return fmt.Sprintf(`document.querySelector('%s td[data-count=%q]')?.textContent.trim()`, row, state)
	}

	// The kinds, with their counts and feed, and the schedules.
	b.Do("open the page", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#kinds")))
	b.WaitTrue("mail: 1 pending, 1 discarded", count(`tr[data-kind="mail"]`, "pending")+` === "1" && `+
		count(`tr[data-kind="mail"]`, "discarded")+` === "1"`)
	require.Contains(t, b.Text(`tr[data-kind="mail"]`), "kept 1h0m0s")
	require.Contains(t, b.Text("#schedules"), "nightly <digest>", "a name is text")
	require.Contains(t, b.Text("#schedules"), "0 3 * * * (Europe/Paris)")

	// Counts follow without a reload.
	_, err = c.Insert(ctx, nil, mailArgs{To: "bad-too"}, fdbjobs.InsertOptions{})
	require.NoError(t, err)
	b.WaitTrue("2 discarded, live", count(`tr[data-kind="mail"]`, "discarded")+` === "2"`)

	// Pause and resume the kind.
	b.Load("pause mail", chromedp.Click(chromedp.CSS(`tr[data-kind="mail"] form[action$="/pause"] button`)))
	require.Contains(t, b.Text("h1"), "paused")
	paused, err := c.Paused(ctx, nil, "mail")
	require.NoError(t, err)
	require.True(t, paused)
	b.Load("resume mail", chromedp.Click(chromedp.CSS(`form[action$="/resume"] button`)))
	require.NotContains(t, b.Text("h1"), "paused")

	// A cluster-wide limit shows on the kind's page, and a limit per
	// partition.
	require.NoError(t, c.SetLimit(ctx, nil, "mail", fdbjobs.Limit{Running: 3}))
	b.Load("reload mail", chromedp.Reload())
	require.Contains(t, b.Text("#limit"), "At most 3 running at once")
	require.NoError(t, c.SetPartitionLimit(ctx, nil, "mail", fdbjobs.Limit{Running: 2, PerSecond: 5}))
	b.Load("reload mail", chromedp.Reload())
	require.Contains(t, b.Text("#partlimit"), "at most 2 running at once and 5 starts per second")

	// The discarded jobs, with their last error; one of them.
	b.Load("discarded jobs", chromedp.Click(chromedp.CSS(`.states a[href$="state=discarded"]`)))
	require.Contains(t, b.Text(fmt.Sprintf(`tr[data-job=%q]`, bad.ID)), "no such mailbox: bad@example.com")
	b.Load("open the job", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-job=%q] a`, bad.ID))))
	require.Equal(t, "discarded", b.Text("#state"))
	require.Contains(t, b.Text("#args"), `"to": "bad@example.com"`)
	require.Contains(t, b.Text("#errors"), "no such mailbox")

	// Retry now: it runs again, and is discarded again.
	b.Load("retry", chromedp.Click(chromedp.CSS("#retry")))
	testutil.Eventually(t, "a second attempt", func() bool {
		j, err := c.GetJob(ctx, nil, "mail", bad.ID)
		return err == nil && j.State == fdbjobs.OutcomeDiscarded && j.Attempt == 2
	})

	// Delete it: back to the kind, the job gone.
	b.Load("delete", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`), chromedp.Click(chromedp.CSS("#delete")))
	require.Contains(t, b.Text("#counts"), "pending")
	_, err = c.GetJob(ctx, nil, "mail", bad.ID)
	require.ErrorIs(t, err, fdbjobs.ErrNotFound)

	// Find the later job by id, its arguments shown as text; cancel it.
	b.Load("find by id", chromedp.SendKeys(chromedp.CSS("#job-id"), later.ID), chromedp.Submit(chromedp.CSS("#job-id")))
	require.Equal(t, "scheduled", b.Text("#state"))
	require.Contains(t, b.Text("#args"), `"to": "\u003cb\u003elater\u003c/b\u003e"`)
	b.Load("cancel", chromedp.Click(chromedp.CSS("#cancel")))
	require.Equal(t, "cancelled", b.Text("#state"))

	// A job that does not exist.
	require.EqualValues(t, http.StatusNotFound, b.Load("a missing job", chromedp.Navigate(base+"k/mail/j/nope")))
	require.Contains(t, b.Text("#reason"), "nope")

	// The schedule: paused, then deleted.
	b.Do("back to the kinds", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#schedules")))
	b.Load("pause the schedule", chromedp.Click(chromedp.CSS(`#schedules form[action$="/pause"] button`)))
	require.Contains(t, b.Text("#schedules"), "paused")
	info, err := c.GetSchedule(ctx, nil, "nightly <digest>")
	require.NoError(t, err)
	require.True(t, info.Paused)
	b.Load("delete the schedule", chromedp.Click(chromedp.CSS(`#schedules form[action$="/delete"] button`)))
	require.Contains(t, b.Text("body"), "No schedules.")
	_, err = c.GetSchedule(ctx, nil, "nightly <digest>")
	require.ErrorIs(t, err, fdbjobs.ErrNotFound)

	// A managed kind's job: shown without its arguments or actions, and
	// an action sent anyway is refused.
	b.Load("a managed job", chromedp.Navigate(base+"k/managed/j/m1"))
	require.Contains(t, b.Text("#managed"), "managed by its application")
	require.NotContains(t, b.Text("body"), "hunter2")
	resp0, err := http.Post(srv.URL+"/_jobs/_ui/k/managed/j/m1/delete", "", nil)
	require.NoError(t, err)
	resp0.Body.Close()
	require.Equal(t, http.StatusForbidden, resp0.StatusCode)
	st, _, err := c.Job(ctx, nil, "managed", "m1")
	require.NoError(t, err)
	require.Equal(t, fdbjobs.Pending, st)

	// Another site's page cannot act (the browser says where a request
	// comes from).
	req, err := http.NewRequest("POST", srv.URL+"/_jobs/_ui/k/mail/pause", nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var refusal map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&refusal))
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, map[string]any{"error": "forbidden", "reason": "cross-origin request refused"}, refusal)
	paused, err = c.Paused(ctx, nil, "mail")
	require.NoError(t, err)
	require.False(t, paused)
}
