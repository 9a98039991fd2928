// Package browsertest drives headless Chromium from Go tests, through the
// DevTools protocol (github.com/chromedp/chromedp): it finds the browser
// (and skips the test when there is none, except under CI), starts one per
// test, records the page's requests and console errors, and when a step
// fails writes a screenshot, the page's HTML and those records to a
// temporary directory that the failure message names.
//
// Steps wait on DOM conditions (WaitVisible, Poll on an expression), never
// for fixed times; StepTimeout only detects hangs.
package browsertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// EnvChromium names the environment variable that, when set, is the path
// of the browser to run instead of the first of Candidates found on PATH.
const EnvChromium = "FDBREP_CHROMIUM"

// Candidates are the executable names looked up on PATH, in order:
// Debian's chromium first.
var Candidates = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// StepTimeout bounds one step (Do, Text, Poll): a step that takes longer
// is a hang, reported as a failure. It is not a speed expectation.
const StepTimeout = 60 * time.Second

// SessionTimeout bounds a whole browser session, start-up included.
const SessionTimeout = 10 * time.Minute

// keptLines is how many request and console lines a failure report shows.
const keptLines = 40

// Browser is one headless browser with one tab.
type Browser struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	methods  map[network.RequestID]string
	requests []string // "METHOD status path", oldest first
	console  []string // console errors and uncaught exceptions
}

// FindChromium returns the browser executable: $FDBREP_CHROMIUM, or the
// first of Candidates on PATH.
func FindChromium() (string, error) {
	if p := os.Getenv(EnvChromium); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%q: %w", EnvChromium, p, err)
		}
		return p, nil
	}
	for _, name := range Candidates {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %s is on PATH; install Debian's chromium "+
		"(apt-get install --no-install-recommends chromium; .ci/run does) or set %s",
		strings.Join(Candidates, ", "), EnvChromium)
}

// Start launches a headless browser for t, closed when t ends. Without a
// browser t is skipped, or failed when $CI is set (CI installs one, so a
// missing browser there is a broken setup, not a reason to skip).
func Start(t testing.TB) *Browser {
	t.Helper()
	exe, err := FindChromium()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("browser test under CI without a browser: %v", err)
		}
		t.Skipf("browser test skipped: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.WindowSize(1400, 1000),
	)
	session, cancelSession := context.WithTimeout(context.Background(), SessionTimeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(session, opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		cancelSession()
	})
	b := &Browser{t: t, ctx: ctx, methods: map[network.RequestID]string{}}
	if err := chromedp.Do(ctx); err != nil { // starts the browser and opens the tab
		t.Fatalf("start %s: %v", exe, err)
	}
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("listen to the browser: %v", err)
	}
	return b
}

// record keeps the page's responses, failed requests and console errors.
func (b *Browser) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.methods[ev.RequestID] = ev.Request.Method
	case *network.EventResponseReceived:
		b.requests = append(b.requests, fmt.Sprintf("%s %d %s", b.methods[ev.RequestID], ev.Response.Status, pathOf(ev.Response.URL)))
		delete(b.methods, ev.RequestID)
	case *network.EventLoadingFailed:
		b.requests = append(b.requests, fmt.Sprintf("%s failed (%s) %s", b.methods[ev.RequestID], ev.ErrorText, ev.Type))
		delete(b.methods, ev.RequestID)
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		b.console = append(b.console, "exception: "+text)
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, cmp.Or(a.Description, string(a.Value)))
			}
			b.console = append(b.console, string(ev.Type)+": "+strings.Join(parts, " "))
		}
	}
}

// pathOf drops the scheme and host (all requests go to loopback servers).
func pathOf(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.IndexByte(u[i+3:], '/'); j >= 0 {
			return u[i+3+j:]
		}
	}
	return u
}

// Requests returns the responses the page received so far, one line each
// ("GET 200 /_session"), oldest first.
func (b *Browser) Requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

// Do runs steps, failing the test (with a screenshot) if one fails or
// takes longer than StepTimeout.
func (b *Browser) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.Fail(what, err)
	}
}

// Text returns the visible text of the first element sel matches, once it
// is visible.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	return Run(b, "text of "+sel, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
}

// WaitTrue waits until the JavaScript expression is truthy (polled on each
// animation frame), failing after StepTimeout with what in the message.
func (b *Browser) WaitTrue(what, expr string) {
	b.t.Helper()
	Run(b, what, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(StepTimeout)))
}

// Load runs steps that make the tab load a page (a link followed, a form
// submitted, redirects included), waits until that page has loaded, and
// returns its status, failing the test as Do does.
func (b *Browser) Load(what string, steps ...chromedp.Action[chromedp.Void]) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.Fail(what, err)
		return 0
	}
	return resp.Status
}

// Run runs one action and returns its value, failing the test as Do does.
func Run[T any](b *Browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.Fail(what, err)
	}
	return v
}

// Fail writes the page's screenshot, HTML, requests and console errors to
// a new temporary directory and fails the test, naming it.
func (b *Browser) Fail(what string, err error) {
	b.t.Helper()
	dir, derr := os.MkdirTemp("", "fdbrep-browser-")
	report := ""
	if derr == nil {
		report = b.writeReport(dir)
	}
	b.mu.Lock()
	reqs := b.requests[max(0, len(b.requests)-keptLines):]
	cons := b.console[max(0, len(b.console)-keptLines):]
	b.mu.Unlock()
	b.t.Fatalf("%s: %v\n%s\nlast requests:\n  %s\nconsole errors:\n  %s", what, err, report,
		strings.Join(reqs, "\n  "), strings.Join(cons, "\n  "))
}

// writeReport saves what the page shows into dir and says where.
func (b *Browser) writeReport(dir string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	var problems []error
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		problems = append(problems, os.WriteFile(filepath.Join(dir, "screenshot.png"), png, 0o644))
	} else {
		problems = append(problems, fmt.Errorf("screenshot: %w", err))
	}
	if html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html"))); err == nil {
		problems = append(problems, os.WriteFile(filepath.Join(dir, "page.html"), []byte(html), 0o644))
	}
	b.mu.Lock()
	log := strings.Join(b.requests, "\n") + "\n\nconsole errors:\n" + strings.Join(b.console, "\n") + "\n"
	b.mu.Unlock()
	problems = append(problems, os.WriteFile(filepath.Join(dir, "requests.log"), []byte(log), 0o644))
	msg := "screenshot, page and requests written to " + dir
	if err := errors.Join(problems...); err != nil {
		msg += " (partly: " + err.Error() + ")"
	}
	return msg
}
