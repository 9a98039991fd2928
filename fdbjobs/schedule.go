package fdbjobs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// Durable schedules: a Schedule is stored in the layer and inserts one job
// of its kind per period, from whichever Runtime with a worker of that
// kind finds the period due first, without a leader. Each period's job is
// inserted exactly once: the transaction that inserts it also moves the
// schedule's next period on (see doc.go, "Schedules").

// Overlap says what a schedule does at a period while the job it inserted
// for an earlier period is still pending or running.
type Overlap string

const (
	// OverlapAllow inserts the period's job anyway (the default, as
	// River's periodic jobs and Kubernetes' CronJobs do).
	OverlapAllow Overlap = "allow"
	// OverlapSkip skips the period: no job for it.
	OverlapSkip Overlap = "skip"
	// OverlapQueue keeps the period waiting until the earlier job has
	// finished, then inserts its job (with CatchUpOne, for the latest
	// period due by then); the periods that came meanwhile follow the
	// schedule's CatchUp.
	OverlapQueue Overlap = "queue"
)

// CatchUp says what a schedule does with the periods it missed: a period
// is missed when no job was inserted for it within ScheduleMisfire of its
// time or before the next period came (no Runtime with a worker of the
// kind ran, or an Overlap queue waited).
type CatchUp string

const (
	// CatchUpOne inserts one job for the periods due, missed or not: for
	// the latest (the default: after downtime the job runs once, as
	// Kubernetes' CronJobs do).
	CatchUpOne CatchUp = "one"
	// CatchUpNone inserts no job for missed periods: only the latest
	// period due, unless it is missed too.
	CatchUpNone CatchUp = "none"
	// CatchUpAll inserts one job for every period due within the
	// schedule's CatchUpWindow of now, oldest first.
	CatchUpAll CatchUp = "all"
)

// Schedule limits and defaults.
const (
	// ScheduleEveryMin is the shortest Schedule.Every.
	ScheduleEveryMin = time.Second
	// ScheduleMisfire is how late a period's job may be inserted before
	// the period counts as missed (see CatchUp); a period whose next
	// period has come is missed sooner.
	ScheduleMisfire = time.Minute
	// ScheduleCatchUpWindowDefault is Schedule.CatchUpWindow's default:
	// CatchUpAll inserts the missed periods of the last day at most.
	ScheduleCatchUpWindowDefault = 24 * time.Hour
	// SchedulePollDefault is how often a Runtime looks for due periods of
	// its kinds' schedules besides waking at the next one it knows of
	// (RuntimeOptions.SchedulePoll): a schedule created or changed on
	// another node is seen within it.
	SchedulePollDefault = time.Second
	// scheduleBatch is the most schedules one firing transaction takes,
	// scheduleFirers the most such transactions a Runtime runs at once,
	// scheduleCatchUpMax the most jobs one inserts for one schedule
	// (CatchUpAll), and scheduleTxJobs the jobs after which it takes no
	// more schedules: what is left stays due for the next transaction.
	scheduleBatch      = 50
	scheduleFirers     = 8
	scheduleCatchUpMax = 100
	scheduleTxJobs     = 200
)

// Schedule is a periodic job stored in the layer: every period (Every, or
// a Cron expression in TimeZone) a job of Args' kind with Args is
// inserted, once, by a Runtime with a worker of that kind. While no such
// Runtime runs, no job is inserted and the periods are missed (see
// CatchUp; ScheduleInfo.Next stays in the past). The zero value of each
// option is its default.
type Schedule struct {
	// Name identifies the schedule in the store: PutSchedule with a name
	// that exists changes that schedule. At most MaxNameSize bytes.
	Name string
	// Args are the arguments of each period's job (their JSON at most
	// MaxDataSize less 1,000 bytes); its kind is Args.Kind(). Its worker
	// sees the schedule's name and the period's time (Work.Schedule,
	// Work.Period).
	Args JobArgs
	// MaxAttempts overrides the worker's for the schedule's jobs (0: the
	// worker's).
	MaxAttempts int
	// Priority is the priority of the schedule's jobs (InsertOptions.Priority;
	// 0: PriorityHighest).
	Priority int
	// Every is a period of a fixed length, at least ScheduleEveryMin and
	// a whole number of the Client's Config.TimeUnit (a second by
	// default), in which jobs are due: its periods begin at whole
	// multiples of it since the Unix epoch (every minute: at each
	// minute's start). Either Every or Cron.
	Every time.Duration
	// Cron is a cron expression of five fields (minute, hour, day of
	// month, month, day of week) or a descriptor (@yearly, @monthly,
	// @weekly, @daily, @hourly), read in TimeZone; its periods begin when
	// it matches.
	Cron string
	// TimeZone is the IANA name of Cron's time zone ("" is UTC), such as
	// "Europe/Paris": daylight saving time changes follow the zone's
	// rules. Only with Cron.
	TimeZone string
	// Overlap: OverlapAllow by default.
	Overlap Overlap
	// CatchUp: CatchUpOne by default.
	CatchUp CatchUp
	// CatchUpWindow bounds CatchUpAll (the other policies ignore it):
	// missed periods older than this are skipped.
	// ScheduleCatchUpWindowDefault when zero.
	CatchUpWindow time.Duration
	// Paused stores the schedule without inserting jobs; ResumeSchedule
	// (or PutSchedule without Paused) resumes it from its next period
	// after then: periods that passed while it was paused are not missed.
	Paused bool
}

// ScheduleInfo is a stored schedule.
type ScheduleInfo struct {
	Name        string
	Kind        string
	Args        json.RawMessage
	MaxAttempts int
	Priority    int
	Every       time.Duration
	Cron        string
	TimeZone    string
	Overlap     Overlap
	CatchUp     CatchUp
	// CatchUpWindow is the window in effect (the default filled in).
	CatchUpWindow time.Duration
	Paused        bool
	// Next is the time of the next period that has no job yet: a past
	// time when it is due and no Runtime inserted its job yet (none with
	// a worker of the kind runs, or an Overlap queue holds it); zero
	// while the schedule is paused.
	Next time.Time
	// Last is the time of the last period a job was inserted for, and
	// LastJob that job's id (zero and "" before the first).
	Last    time.Time
	LastJob string
	// Created and Updated are when PutSchedule created and last changed
	// the schedule.
	Created, Updated time.Time
}

// scheduleRecord is a schedule's value in the store (JSON): ScheduleInfo
// with times in Unix milliseconds.
type scheduleRecord struct {
	Kind        string          `json:"kind"`
	Args        json.RawMessage `json:"args"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	EveryMs     int64           `json:"every_ms,omitempty"`
	Cron        string          `json:"cron,omitempty"`
	TimeZone    string          `json:"tz,omitempty"`
	Overlap     Overlap         `json:"overlap"`
	CatchUp     CatchUp         `json:"catch_up"`
	WindowMs    int64           `json:"catch_up_window_ms"`
	Paused      bool            `json:"paused,omitempty"`
	Next        int64           `json:"next"`
	// Queued: the period Next waits for the last job to finish
	// (OverlapQueue), and is inserted then even if missed.
	Queued  bool   `json:"queued,omitempty"`
	Last    int64  `json:"last,omitempty"`
	LastJob string `json:"last_job,omitempty"`
	Created int64  `json:"created"`
	Updated int64  `json:"updated"`
}

// period is a schedule's sequence of periods.
type period interface {
	// next returns the first period after t (Unix ms).
	next(t int64) int64
}

type every int64 // ms

func (e every) next(t int64) int64 {
	d := int64(e)
	if t < 0 {
		return 0
	}
	return (t/d + 1) * d
}

type cronPeriod struct {
	s   cron.Schedule
	loc *time.Location
}

// never is the next period of a cron expression that matches no time in
// the five years after (PutSchedule refuses one that never matches).
const never = math.MaxInt64 - 1

func (c cronPeriod) next(t int64) int64 {
	n := c.s.Next(time.UnixMilli(t).In(c.loc))
	if n.IsZero() {
		return never
	}
	return n.UnixMilli()
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// periods caches parsed cron expressions by expression and zone.
var periods sync.Map // string -> period

func (r *scheduleRecord) period() (period, error) {
	if r.EveryMs > 0 {
		return every(r.EveryMs), nil
	}
	key := r.TimeZone + "\x00" + r.Cron
	if p, ok := periods.Load(key); ok {
		return p.(period), nil
	}
	p, err := parsePeriod(r.Cron, r.TimeZone)
	if err != nil {
		return nil, err
	}
	periods.Store(key, p)
	return p, nil
}

// parsePeriod parses a cron expression in a zone; its errors name the
// field and say what is wrong (the callers add ErrInvalidArgument).
func parsePeriod(expr, tz string) (period, error) {
	switch {
	case strings.HasPrefix(expr, "@every"):
		return nil, fmt.Errorf("Cron %q: a fixed period is Schedule.Every", expr)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, fmt.Errorf("Cron %q: the zone is Schedule.TimeZone", expr)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || (tz != "" && strings.EqualFold(tz, "local")) {
		return nil, fmt.Errorf("TimeZone %q: not an IANA time zone name", tz)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("Cron %q: %v", expr, err)
	}
	return cronPeriod{s, loc}, nil
}

// Check reports what PutSchedule would refuse in s (ErrInvalidArgument or
// ErrInvalidData, naming the field) for a Client whose Config.TimeUnit is
// unit, at now: for a caller that validates a schedule before its
// transaction, such as a document's.
func (s Schedule) Check(unit time.Duration, now time.Time) error {
	_, err := s.record(unit, now)
	return err
}

// record checks s, whose periods' jobs are due in whole units of unit
// (Config.TimeUnit), and returns its record, without times.
func (s Schedule) record(unit time.Duration, now time.Time) (*scheduleRecord, error) {
	if err := checkName("schedule name", s.Name); err != nil {
		return nil, err
	}
	if s.Args == nil {
		return nil, fmt.Errorf("%w: schedule %q: nil Args", ErrInvalidArgument, s.Name)
	}
	unit = max(time.Millisecond, unit)
	kind := s.Args.Kind()
	if err := checkName("kind", kind); err != nil {
		return nil, err
	}
	args, err := json.Marshal(s.Args)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: arguments: %v", ErrInvalidData, s.Name, err)
	}
	if len(args) > MaxDataSize-1000 {
		return nil, fmt.Errorf("%w: schedule %q: arguments of %d bytes, at most %d", ErrInvalidArgument, s.Name, len(args), MaxDataSize-1000)
	}
	r := &scheduleRecord{Kind: kind, Args: args, MaxAttempts: s.MaxAttempts, Priority: s.Priority, Cron: s.Cron, TimeZone: s.TimeZone,
		Overlap: s.Overlap, CatchUp: s.CatchUp, WindowMs: s.CatchUpWindow.Milliseconds(), Paused: s.Paused}
	if _, err := checkPriority(s.Priority); err != nil {
		return nil, fmt.Errorf("schedule %q: %w", s.Name, err)
	}
	switch {
	case s.MaxAttempts < 0:
		return nil, fmt.Errorf("%w: schedule %q: MaxAttempts %d: at least 1 (0: the worker's)", ErrInvalidArgument, s.Name, s.MaxAttempts)
	case s.Every == 0 && s.Cron == "":
		return nil, fmt.Errorf("%w: schedule %q: neither Every nor Cron (one of them)", ErrInvalidArgument, s.Name)
	case s.Every != 0 && s.Cron != "":
		return nil, fmt.Errorf("%w: schedule %q: both Every and Cron (one of them)", ErrInvalidArgument, s.Name)
	case s.Every != 0 && (s.Every < ScheduleEveryMin || s.Every%unit != 0):
		return nil, fmt.Errorf("%w: schedule %q: Every %v: at least %v, in whole %v (the Client's TimeUnit)", ErrInvalidArgument, s.Name, s.Every, ScheduleEveryMin, unit)
	case s.Every != 0 && s.TimeZone != "":
		return nil, fmt.Errorf("%w: schedule %q: TimeZone is Cron's (Every counts from the Unix epoch)", ErrInvalidArgument, s.Name)
	case s.CatchUpWindow < 0:
		return nil, fmt.Errorf("%w: schedule %q: negative CatchUpWindow", ErrInvalidArgument, s.Name)
	}
	r.EveryMs = s.Every.Milliseconds()
	switch r.Overlap {
	case "":
		r.Overlap = OverlapAllow
	case OverlapAllow, OverlapSkip, OverlapQueue:
	default:
		return nil, fmt.Errorf("%w: schedule %q: Overlap %q: one of %q, %q, %q", ErrInvalidArgument, s.Name, s.Overlap, OverlapAllow, OverlapSkip, OverlapQueue)
	}
	switch r.CatchUp {
	case "":
		r.CatchUp = CatchUpOne
	case CatchUpOne, CatchUpNone, CatchUpAll:
	default:
		return nil, fmt.Errorf("%w: schedule %q: CatchUp %q: one of %q, %q, %q", ErrInvalidArgument, s.Name, s.CatchUp, CatchUpOne, CatchUpNone, CatchUpAll)
	}
	if r.WindowMs == 0 {
		r.WindowMs = ScheduleCatchUpWindowDefault.Milliseconds()
	}
	p, err := r.period()
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v", ErrInvalidArgument, s.Name, err)
	}
	if p.next(now.UnixMilli()) == never {
		return nil, fmt.Errorf("%w: schedule %q: Cron %q matches no time in the next five years", ErrInvalidArgument, s.Name, s.Cron)
	}
	return r, nil
}

func (r *scheduleRecord) info(name string) ScheduleInfo {
	ms := func(v int64) time.Time {
		if v == 0 {
			return time.Time{}
		}
		return time.UnixMilli(v)
	}
	info := ScheduleInfo{Name: name, Kind: r.Kind, Args: r.Args, MaxAttempts: r.MaxAttempts, Priority: cmp.Or(r.Priority, PriorityHighest),
		Every: time.Duration(r.EveryMs) * time.Millisecond, Cron: r.Cron, TimeZone: r.TimeZone, Overlap: r.Overlap,
		CatchUp: r.CatchUp, CatchUpWindow: time.Duration(r.WindowMs) * time.Millisecond, Paused: r.Paused,
		Next: ms(r.Next), Last: ms(r.Last), LastJob: r.LastJob, Created: ms(r.Created), Updated: ms(r.Updated)}
	if r.Paused {
		info.Next = time.Time{}
	}
	return info
}

func (k keys) scheduleKey(name string) kv.Key { return k.root.Pack(tuple.Tuple{keySchedule, name}) }

func (k keys) scheduleRange() kv.KeyRange {
	return kv.KeyRange{Begin: k.root.Pack(tuple.Tuple{keySchedule}), End: k.root.Pack(tuple.Tuple{keySchedule + 1})}
}

// dueKey is the schedule's entry in its kind's index of next periods,
// which an active (not paused) schedule has, and a paused one not.
func (k keys) dueKey(kind string, next int64, name string) kv.Key {
	return k.root.Pack(tuple.Tuple{keyScheduleDue, kind, next, name})
}

// dueRange is kind's entries with a next period at or before until.
func (k keys) dueRange(kind string, until int64) kv.KeyRange {
	return kv.KeyRange{Begin: k.root.Pack(tuple.Tuple{keyScheduleDue, kind}),
		End: k.root.Pack(tuple.Tuple{keyScheduleDue, kind, until + 1})}
}

func (k keys) readSchedule(tr kv.ReadTransaction, name string) (*scheduleRecord, error) {
	v, err := tr.Get(k.scheduleKey(name)).Get()
	if err != nil || v == nil {
		return nil, err
	}
	return decodeSchedule(name, v)
}

func decodeSchedule(name string, v []byte) (*scheduleRecord, error) {
	var r scheduleRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("fdbjobs: schedule %q: bad record: %v", name, err)
	}
	return &r, nil
}

// writeSchedule stores r, with its index entry moved from was (nil: a new
// record).
func (k keys) writeSchedule(tr kv.Transaction, name string, r, was *scheduleRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if was != nil && !was.Paused {
		tr.Clear(k.dueKey(was.Kind, was.Next, name))
	}
	tr.Set(k.scheduleKey(name), v)
	if !r.Paused {
		tr.Set(k.dueKey(r.Kind, r.Next, name), nil)
	}
	return nil
}

// PutSchedule stores s, in tx (nil: a transaction of its own), creating
// it or changing the schedule of that name, and returns it as stored. A
// new schedule's first period is the first after now; a changed one keeps
// its next period when its Every, Cron and TimeZone stay (and it stays
// active), else its next period is the first after now. Bad options are
// ErrInvalidArgument, saying which; nothing is stored then.
func (c *Client) PutSchedule(ctx context.Context, tx kv.Transactor, s Schedule) (ScheduleInfo, error) {
	r, err := s.record(c.cfg.TimeUnit, c.cfg.Clock.Now())
	if err != nil {
		return ScheduleInfo{}, err
	}
	if err := c.CheckLayout(ctx); err != nil {
		return ScheduleInfo{}, err
	}
	p, _ := r.period()
	now := c.cfg.Clock.Now().UnixMilli()
	info, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (ScheduleInfo, error) {
		was, err := c.k.readSchedule(tr, s.Name)
		if err != nil {
			return ScheduleInfo{}, err
		}
		nr := *r
		nr.Created, nr.Updated, nr.Next = now, now, p.next(now)
		if was != nil {
			nr.Created, nr.Last, nr.LastJob = was.Created, was.Last, was.LastJob
			if was.EveryMs == r.EveryMs && was.Cron == r.Cron && was.TimeZone == r.TimeZone && !was.Paused && !r.Paused {
				nr.Next, nr.Queued = was.Next, was.Queued
			}
		}
		if err := c.k.writeSchedule(tr, s.Name, &nr, was); err != nil {
			return ScheduleInfo{}, err
		}
		return nr.info(s.Name), nil
	})
	if err == nil {
		c.schedWake.notify("")
	}
	return info, err
}

// GetSchedule returns the schedule name, or ErrNotFound (an empty or too
// long name: ErrInvalidArgument, as for the other calls that take one).
func (c *Client) GetSchedule(ctx context.Context, tx kv.ReadTransactor, name string) (ScheduleInfo, error) {
	if err := checkName("schedule name", name); err != nil {
		return ScheduleInfo{}, err
	}
	return kv.ReadTransact(ctx, c.readTransactor(tx), func(tr kv.ReadTransaction) (ScheduleInfo, error) {
		r, err := c.k.readSchedule(tr, name)
		if err != nil {
			return ScheduleInfo{}, err
		}
		if r == nil {
			return ScheduleInfo{}, fmt.Errorf("schedule %q: %w", name, ErrNotFound)
		}
		return r.info(name), nil
	})
}

// ListSchedules returns up to limit schedules (1 to MaxBatch) in name
// order, from the first name after after ("": from the first), in one
// transaction: page with the last name returned.
func (c *Client) ListSchedules(ctx context.Context, after string, limit int) ([]ScheduleInfo, error) {
	if limit < 1 || limit > MaxBatch {
		return nil, fmt.Errorf("%w: ListSchedules limit %d outside [1, %d]", ErrInvalidArgument, limit, MaxBatch)
	}
	rg := c.k.scheduleRange()
	if after != "" {
		rg.Begin = append(c.k.scheduleKey(after), 0)
	}
	return kv.ReadTransact(ctx, c.db, func(tr kv.ReadTransaction) ([]ScheduleInfo, error) {
		kvs, err := tr.GetRange(rg, kv.RangeOptions{Limit: limit}).GetSliceWithError()
		if err != nil {
			return nil, err
		}
		out := make([]ScheduleInfo, 0, len(kvs))
		for _, e := range kvs {
			t, err := c.k.root.Unpack(e.Key)
			if err != nil || len(t) != 2 {
				return nil, fmt.Errorf("fdbjobs: bad schedule key %x", e.Key)
			}
			name, _ := t[1].(string)
			r, err := decodeSchedule(name, e.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, r.info(name))
		}
		return out, nil
	})
}

// DeleteSchedule removes the schedule name, in tx (nil: a transaction of
// its own): no period's job is inserted from then on; jobs inserted
// already stay. ErrNotFound when there is none.
func (c *Client) DeleteSchedule(ctx context.Context, tx kv.Transactor, name string) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	found := false
	_, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (struct{}, error) {
		r, err := c.k.readSchedule(tr, name)
		if err != nil {
			return struct{}{}, err
		}
		if r == nil {
			if found { // an attempt before found it: it committed unseen, or another node deleted it
				return struct{}{}, nil
			}
			return struct{}{}, fmt.Errorf("schedule %q: %w", name, ErrNotFound)
		}
		found = true
		if !r.Paused {
			tr.Clear(c.k.dueKey(r.Kind, r.Next, name))
		}
		tr.Clear(c.k.scheduleKey(name))
		return struct{}{}, nil
	})
	return err
}

// PauseSchedule pauses the schedule name (see Schedule.Paused), and
// ResumeSchedule resumes it from its first period after now; each does
// nothing to a schedule already so. ErrNotFound when there is none.
func (c *Client) PauseSchedule(ctx context.Context, tx kv.Transactor, name string) error {
	return c.setSchedulePaused(ctx, tx, name, true)
}

// ResumeSchedule: see PauseSchedule.
func (c *Client) ResumeSchedule(ctx context.Context, tx kv.Transactor, name string) error {
	return c.setSchedulePaused(ctx, tx, name, false)
}

func (c *Client) setSchedulePaused(ctx context.Context, tx kv.Transactor, name string, paused bool) error {
	if err := checkName("schedule name", name); err != nil {
		return err
	}
	now := c.cfg.Clock.Now().UnixMilli()
	kind, err := kv.Transact(ctx, c.transactor(tx), func(tr kv.Transaction) (string, error) {
		was, err := c.k.readSchedule(tr, name)
		if err != nil {
			return "", err
		}
		if was == nil {
			return "", fmt.Errorf("schedule %q: %w", name, ErrNotFound)
		}
		if was.Paused == paused {
			return "", nil
		}
		r := *was
		r.Paused, r.Updated, r.Queued = paused, now, false
		if !paused {
			p, err := r.period()
			if err != nil {
				return "", err
			}
			r.Next = p.next(now)
		}
		return r.Kind, c.k.writeSchedule(tr, name, &r, was)
	})
	if err == nil && kind != "" {
		c.schedWake.notify("")
	}
	return err
}
