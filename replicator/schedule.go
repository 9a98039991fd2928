package replicator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// Scheduled replications: a _replicator document's one-shot replication
// with a "schedule" runs when it is written and again at each period of
// its schedule, from its checkpoint, never twice at once. The schedule is
// the job layer's (fdbjobs.Schedule, named ScheduleName(jobID)), written
// and removed with the document's job; each period inserts a Trigger job,
// whose worker on a replication node (Rerun) makes the document's job
// pending again if its last run has ended, and does nothing while it runs
// (the schedule skips periods while a Trigger is unfinished, too).

// TriggerType is the job type of the Trigger jobs of scheduled
// replications.
const TriggerType = "rep_trigger"

// ScheduleEveryMin is the shortest period, in seconds, a document's
// "schedule": {"every": …} may ask: each run writes its document's state
// and counters (a revision of the document) and its history, so shorter
// periods would mostly make revisions. A cron expression's periods are a
// minute or more already. A shorter one is refused, the field named.
const ScheduleEveryMin = 60

// ScheduleEveryMax is the longest period, in seconds, of a document's
// "schedule": {"every": …}: ten years.
const ScheduleEveryMax = 10 * 365 * 24 * 3600

// RepSchedule is a document's "schedule": cron (five fields or a
// descriptor such as @daily) in tz (an IANA zone, UTC by default), or
// every, a period in seconds (ScheduleEveryMin to ScheduleEveryMax). One
// of cron and every.
type RepSchedule struct {
	Cron  string `json:"cron,omitempty"`
	TZ    string `json:"tz,omitempty"`
	Every int64  `json:"every,omitempty"`
}

// Trigger is the job a scheduled replication's schedule inserts at each
// period: run the document's job JobID again.
type Trigger struct {
	JobID string `json:"job_id"`
}

// Kind is TriggerType.
func (Trigger) Kind() string { return TriggerType }

// ScheduleName is the name of the schedule of a document's job.
func ScheduleName(jobID string) string { return "rep|" + jobID }

// layerSchedule is rs as the job layer's schedule of job jobID.
func (rs *RepSchedule) layerSchedule(jobID string) fdbjobs.Schedule {
	return fdbjobs.Schedule{Name: ScheduleName(jobID), Args: Trigger{JobID: jobID}, Cron: rs.Cron, TimeZone: rs.TZ,
		Every: time.Duration(rs.Every) * time.Second, Overlap: fdbjobs.OverlapSkip, CatchUp: fdbjobs.CatchUpOne}
}

// parseSchedule reads a document's "schedule" field.
func parseSchedule(v json.RawMessage, continuous bool) (*RepSchedule, error) {
	var raw struct {
		Cron  *string          `json:"cron"`
		TZ    *string          `json:"tz"`
		Every *json.RawMessage `json:"every"`
	}
	d := json.NewDecoder(bytes.NewReader(v))
	d.DisallowUnknownFields()
	if err := d.Decode(&raw); err != nil {
		return nil, newReason(ErrBadRequest, "`schedule` must be an object of `cron` and `tz`, or `every` (seconds)")
	}
	rs := &RepSchedule{}
	if raw.Cron != nil {
		rs.Cron = *raw.Cron
	}
	if raw.TZ != nil {
		rs.TZ = *raw.TZ
	}
	if raw.Every != nil {
		// A JSON number: intField takes the strings CouchDB's integer
		// fields take, which a field of fdbrep's own need not.
		if v := bytes.TrimSpace(*raw.Every); len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
			return nil, newReason(ErrBadRequest, "`schedule.every` must be a JSON number of seconds")
		}
		n, err := intField(*raw.Every, "schedule.every", ScheduleEveryMin, ScheduleEveryMax)
		if err != nil {
			return nil, err
		}
		rs.Every = n
	}
	if continuous {
		return nil, newReason(ErrBadRequest, "`schedule` runs a one-shot replication again at each period: it cannot be `continuous`")
	}
	if err := rs.layerSchedule(scheduleCheck).Check(TimeUnit, time.Now()); err != nil {
		return nil, newReason(ErrBadRequest, "`schedule`: %s", scheduleReason(err))
	}
	return rs, nil
}

// scheduleCheck is the job id a document's schedule is checked under.
const scheduleCheck = "check"

// scheduleReason is the job layer's refusal of a document's schedule in
// the document's words.
func scheduleReason(err error) string {
	msg := err.Error()
	prefix := fmt.Sprintf("schedule %q: ", ScheduleName(scheduleCheck))
	if i := strings.Index(msg, prefix); i >= 0 {
		msg = msg[i+len(prefix):]
	}
	return strings.NewReplacer("Schedule.Every", "`every`", "Schedule.TimeZone", "`tz`", "Every and Cron", "`every` and `cron`",
		"Every nor Cron", "`every` nor `cron`", "Cron ", "`cron` ", "TimeZone ", "`tz` ", "Every ", "`every` ").Replace(msg)
}

// SetSchedule writes, in tr, the schedule of document job jobID as spec
// (nil: the job has none, a document that does not parse) has it: made or
// changed, or removed when it had one (old: its data before, nil for
// none).
func (s *Store) SetSchedule(ctx context.Context, tr kv.Transaction, jobID string, spec *Spec, old *JobData) error {
	if spec != nil && spec.Schedule != nil {
		_, err := s.jobs.PutSchedule(ctx, tr, spec.Schedule.layerSchedule(jobID))
		return err
	}
	if old == nil || old.Rep == nil || old.Rep.Schedule == nil {
		return nil
	}
	return s.dropSchedule(ctx, tr, jobID)
}

func (s *Store) dropSchedule(ctx context.Context, tr kv.Transaction, jobID string) error {
	if err := s.jobs.DeleteSchedule(ctx, tr, ScheduleName(jobID)); err != nil && !errors.Is(err, fdbjobs.ErrNotFound) {
		return err
	}
	return nil
}

// ScheduleOf returns the job layer's schedule of document job jobID: its
// next and last periods.
func (s *Store) ScheduleOf(ctx context.Context, tr kv.ReadTransactor, jobID string) (fdbjobs.ScheduleInfo, error) {
	return s.jobs.GetSchedule(ctx, tr, ScheduleName(jobID))
}

// Rerun makes scheduled job jobID pending again, in its own transaction,
// when its last run has ended (completed or failed): a new run, as a
// document write starts one (cfg's fair share places it), from its
// checkpoint. While the job is pending or running it does nothing; a job
// that is gone (its document deleted, its database too) takes its
// schedule with it. It reports whether it started a run.
func (s *Store) Rerun(ctx context.Context, jobID string, cfg Config, now time.Time) (bool, error) {
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (bool, error) {
		old, st, err := s.Job(ctx, tr, jobID)
		if err != nil {
			return false, err
		}
		if old == nil {
			return false, s.dropSchedule(ctx, tr, jobID)
		}
		if st != fdbjobs.Finished || old.Rep == nil || old.Rep.Schedule == nil || old.EndedElsewhere || old.State == StatePaused {
			return false, nil
		}
		d := &JobData{Rep: old.Rep, DocOwner: old.DocOwner, DBName: old.DBName, DBUUID: old.DBUUID, DocID: old.DocID,
			TemplateDB: old.TemplateDB, UserLimited: old.UserLimited}
		Lifecycle{MaxHistory: cfg.MaxHistory}.Transform(d, Change{Kind: Added, At: now})
		return true, s.EnqueueJob(ctx, tr, &cfg, now, jobID, old, d)
	})
}

// setupTriggers registers TriggerType with jobTimeout, unless it is so
// already.
func (s *Store) setupTriggers(ctx context.Context, jobTimeout time.Duration) error {
	return s.setupType(ctx, TriggerType, jobTimeout, watchShards)
}

// NewTriggerRuntime returns the job layer's Runtime of the Trigger jobs:
// its worker runs work for each, and it fires the scheduled
// replications' schedules (a replication node runs one).
func (s *Store) NewTriggerRuntime(work fdbjobs.Worker[Trigger], opts fdbjobs.WorkerOptions, ropts fdbjobs.RuntimeOptions) (*fdbjobs.Runtime, error) {
	return newRuntime(s, work, opts, ropts)
}
