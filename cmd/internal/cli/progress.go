package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Progress display modes (-progress).
const (
	ProgressAuto  = "auto"  // a bar on a terminal, plain lines otherwise
	ProgressBar   = "bar"   // a live bar
	ProgressPlain = "plain" // one line per change of the counters
	// ProgressDefault is the mode unless -progress says otherwise.
	ProgressDefault = ProgressAuto
)

// Defaults of the progress display.
const (
	// IntervalDefault is how often the progress is sampled (and a watched
	// table refreshed).
	IntervalDefault = time.Second
	// IntervalMin and IntervalMax bound -interval.
	IntervalMin = 100 * time.Millisecond
	IntervalMax = time.Hour
	// barRefreshRate is how often the bar is redrawn between samples.
	barRefreshRate = 150 * time.Millisecond
	// barWidthDefault is the bar's width when the output is not a
	// terminal whose width can be read.
	barWidthDefault = 100
	// rateWindow is how far back the rate and ETA look: the changes
	// processed over the last rateWindow of samples that count (or since
	// the first, when shorter).
	rateWindow = 10 * time.Second
)

// sample is what the progress shows at one moment: the replication's
// state and counters (cumulative over its runs, as the cluster shows them).
type sample struct {
	state string // "starting", "pending", "running", "crashing", ...
	stats engine.Stats
	// stall is why the job does not move ("reason: detail"), "" while it
	// does (the views' stall).
	stall string
}

// processed is the number of changes the replication has looked at.
func (s sample) processed() int64 { return s.stats.RevisionsChecked }

// total is processed plus pending, or -1 while pending is unknown.
func (s sample) total() int64 {
	if s.stats.ChangesPending == nil {
		return -1
	}
	return s.processed() + *s.stats.ChangesPending
}

// display shows a replication's progress: a bar on a terminal, plain lines
// in a pipe. update takes a new sample; done ends the display (ok: the
// replication completed, the bar fills up) before the summary is printed.
type display interface {
	update(s sample)
	done(ok bool)
	// logs is where log lines go while the display runs (fallback: the
	// writer the display does not draw on).
	logs(fallback io.Writer) io.Writer
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// newDisplay picks the display for mode and out.
func newDisplay(mode string, out io.Writer, r *redactor) display {
	if mode == ProgressBar || (mode == ProgressAuto && isTerminal(out)) {
		return newBar(out)
	}
	return &plainDisplay{out: out, r: r, start: time.Now()}
}

// rate tracks changes per second over the samples in which the
// replication runs with counters already seeded (the jump of a resumed
// replication's counters to its checkpoint's values is not speed), over
// the last rateWindow: it is known from the second step of the counters
// on (within two samples), not after a moving average's warm-up. A
// cluster updates a job's counters every progress_interval_msec (1 s)
// while they move, which may be more seldom than it is sampled: a step
// counts from the last change of the counters, so unchanged samples in
// between do not read as a stall.
type rate struct {
	last   sample
	lastT  time.Time // of the last change
	seen   bool
	points []point // the counted steps' ends within rateWindow, and the start of the first
}

// point is the changes processed at a moment.
type point struct {
	t time.Time
	n int64
}

// add records s at t and reports whether the counters moved since the
// last change in a way that counts towards the rate, and over how long.
func (r *rate) add(s sample, t time.Time) (bool, time.Duration) {
	if r.seen && s.processed() == r.last.processed() && s.state == r.last.state {
		return false, 0
	}
	counts := r.seen && s.state == "running" && r.last.state == "running" && r.last.processed() > 0
	step := t.Sub(r.lastT)
	if counts {
		if len(r.points) == 0 {
			r.points = append(r.points, point{r.lastT, r.last.processed()})
		}
		r.points = append(r.points, point{t, s.processed()})
		for len(r.points) > 2 && t.Sub(r.points[1].t) >= rateWindow {
			r.points = r.points[1:]
		}
	}
	r.last, r.lastT, r.seen = s, t, true
	return counts, step
}

// perSecond is the rate over the window (0 before a step counted).
func (r *rate) perSecond() float64 {
	if len(r.points) < 2 {
		return 0
	}
	a, b := r.points[0], r.points[len(r.points)-1]
	d := b.t.Sub(a.t).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(b.n-a.n) / d
}

// eta is the time left at the rate to process what is left of total
// (false while either is unknown).
func (r *rate) eta(processed, total int64) (time.Duration, bool) {
	v := r.perSecond()
	if v <= 0 || total < 0 {
		return 0, false
	}
	return (time.Duration(float64(max(0, total-processed))/v) * time.Second).Round(time.Second), true
}

// shownTotal is the total to show with s: processed plus pending (the
// cluster counts pending without the changes processed past through_seq,
// so the two never count a change twice), never below processed; -1
// while pending is unknown.
func shownTotal(s sample) int64 {
	if t := s.total(); t >= 0 {
		return max(t, s.processed())
	}
	return -1
}

// plainDisplay prints one line each time the counters or the state change:
// for logs and pipes, no escape sequences.
type plainDisplay struct {
	out        io.Writer
	r          *redactor
	start      time.Time
	rate       rate
	shown      *sample
	shownTotal int64
}

func (p *plainDisplay) update(s sample) {
	now := time.Now()
	p.rate.add(s, now)
	total := shownTotal(s)
	if p.shown != nil && p.shown.state == s.state && p.shown.processed() == s.processed() &&
		p.shown.stats.DocsWritten == s.stats.DocsWritten && p.shownTotal == total && p.shown.stall == s.stall {
		return
	}
	p.shown, p.shownTotal = &s, total
	line := fmt.Sprintf("[%s] %s: %s changes, %s written, %s",
		now.Sub(p.start).Round(time.Second), s.state, ofTotal(s.processed(), total), plural(s.stats.DocsWritten, "doc", "docs"),
		plural(s.stats.DocWriteFailures, "failure", "failures"))
	if v := p.rate.perSecond(); v > 0 {
		line += fmt.Sprintf(", %.0f changes/s", v)
		if eta, ok := p.rate.eta(s.processed(), total); ok {
			line += ", ETA " + eta.String()
		}
	}
	if s.stall != "" {
		line += "; stalled: " + s.stall
	}
	p.r.Printf(p.out, "%s\n", line)
}

func (p *plainDisplay) done(bool) {}

func (p *plainDisplay) logs(fallback io.Writer) io.Writer { return fallback }

// ofTotal is "processed/total", with "?" for an unknown total (-1).
func ofTotal(processed, total int64) string {
	t := "?"
	if total >= 0 {
		t = strconv.FormatInt(total, 10)
	}
	return fmt.Sprintf("%d/%s", processed, t)
}

// barDisplay draws a live bar with mpb: the state, the bar of changes
// processed out of the total (shownTotal), docs written, failures, rate and
// ETA (over the last rateWindow).
type barDisplay struct {
	p     *mpb.Progress
	bar   *mpb.Bar
	mu    sync.Mutex
	cur   sample
	total int64
	rate  rate
}

func newBar(out io.Writer) *barDisplay {
	b := &barDisplay{cur: sample{state: "starting"}, total: -1}
	b.p = mpb.New(mpb.WithOutput(out), mpb.WithRefreshRate(barRefreshRate),
		mpb.ContainerOptional(mpb.WithWidth(barWidthDefault), !isTerminal(out)),
		mpb.ContainerOptional(mpb.WithAutoRefresh(), !isTerminal(out)))
	text := func(f func(s sample) string) decor.Decorator {
		return decor.Any(func(decor.Statistics) string {
			b.mu.Lock()
			defer b.mu.Unlock()
			return f(b.cur)
		})
	}
	// speed and ETA, known from the second step of the counters on.
	speed := func(s sample) string {
		v := b.rate.perSecond()
		eta, ok := b.rate.eta(s.processed(), b.total)
		switch {
		case v <= 0:
			return "-/s"
		case !ok:
			return fmt.Sprintf("%.0f/s", v)
		}
		return fmt.Sprintf("%.0f/s %s", v, eta)
	}
	b.bar = b.p.New(0, mpb.BarStyle(),
		mpb.PrependDecorators(
			text(func(s sample) string { return fmt.Sprintf("%-9s ", s.state) }),
			text(func(s sample) string { return ofTotal(s.processed(), b.total) + " changes" }),
		),
		mpb.AppendDecorators(
			text(func(s sample) string {
				t := fmt.Sprintf("%d written", s.stats.DocsWritten)
				if s.stats.DocWriteFailures > 0 {
					t += fmt.Sprintf(", %d failed", s.stats.DocWriteFailures)
				}
				return t + " "
			}),
			text(speed),
		),
		// Under the bar, while the job is stalled: why.
		mpb.BarExtender(mpb.BarFillerFunc(func(w io.Writer, _ decor.Statistics) error {
			b.mu.Lock()
			stall := b.cur.stall
			b.mu.Unlock()
			if stall == "" {
				return nil
			}
			_, err := fmt.Fprintf(w, "  stalled: %s\n", stall)
			return err
		}), false),
	)
	return b
}

func (b *barDisplay) update(s sample) {
	b.mu.Lock()
	b.cur = s
	b.rate.add(s, time.Now())
	t := shownTotal(s)
	b.total = t
	b.mu.Unlock()
	if t >= 0 {
		b.bar.SetTotal(max(t, 1), false)
	}
	if s.processed() != b.bar.Current() {
		b.bar.SetCurrent(s.processed())
	}
}

func (b *barDisplay) done(ok bool) {
	if ok {
		b.bar.SetTotal(-1, true)
	} else {
		b.bar.Abort(false)
	}
	b.p.Wait()
}

// logs prints lines above the bar while it runs, then to fallback.
func (b *barDisplay) logs(fallback io.Writer) io.Writer { return aboveBar{b.p, fallback} }

type aboveBar struct {
	p        *mpb.Progress
	fallback io.Writer
}

func (a aboveBar) Write(p []byte) (int, error) {
	n, err := a.p.Write(p)
	if errors.Is(err, mpb.ErrDone) {
		return a.fallback.Write(p)
	}
	return n, err
}
