package replicator

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Replication job states (the RFC's set; see doc.go for the fdbjobs
// mapping).
const (
	StatePending   = "pending"
	StateRunning   = "running"
	StateCrashing  = "crashing"
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// History event types.
const (
	EventAdded   = "added"
	EventStarted = "started"
	EventStopped = "stopped"
	EventCrashed = "crashed"
	EventPending = "pending"
)

// DocUpdater writes a terminal state into a _replicator document. The
// frontend's document store implements it; a replication node calls it
// inside the transaction that finishes the job, so the document and the
// job change together (no inbound connection to the node is needed: both
// live in the same store). state is StateCompleted or StateFailed; reason
// is the failure reason (empty when completed); stats are the final
// counters (completed only) as CouchDB's _replication_stats. The write
// must be idempotent: after commit_unknown_result the transaction runs
// again. The document write it makes reaches Frontend.DocWritten, which
// ignores it (the replication is unchanged).
type DocUpdater interface {
	UpdateDocState(ctx context.Context, tr kv.Transaction, dbName, docID, state, reason string, stats json.RawMessage) error
}

// historyEvent is one job history entry (newest first in jobData).
type historyEvent struct {
	Type      string `json:"type"`
	Timestamp int64  `json:"timestamp"` // Unix ms
	Reason    string `json:"reason,omitempty"`
}

// jobData is the JSON data of a rep_jobs job.
type jobData struct {
	Rep     *Spec  `json:"rep"` // nil when the document did not parse
	RepUser string `json:"rep_user,omitempty"`
	RepID   string `json:"rep_id,omitempty"`
	BaseID  string `json:"base_id,omitempty"`
	// Persistent jobs only.
	DBName string `json:"db_name,omitempty"`
	DBUUID string `json:"db_uuid,omitempty"`
	DocID  string `json:"doc_id,omitempty"`

	State      string          `json:"state"`
	StateInfo  json.RawMessage `json:"state_info,omitempty"`
	ErrorCount int             `json:"error_count"`
	LastError  string          `json:"last_error,omitempty"`
	// Times in Unix ms.
	StartTime   int64  `json:"start_time"`
	LastStart   int64  `json:"last_start"`
	LastUpdated int64  `json:"last_updated"`
	Node        string `json:"node,omitempty"`

	Stats             engine.Stats    `json:"rep_stats"`
	History           []historyEvent  `json:"job_history"`
	CheckpointHistory json.RawMessage `json:"checkpoint_history,omitempty"`
	// FilterCode is the filter function source the current rep_id was
	// computed with.
	FilterCode string `json:"filter_code,omitempty"`
}

func (d *jobData) transient() bool { return d.DBName == "" }

func (d *jobData) continuous() bool { return d.Rep != nil && d.Rep.Continuous }

// shareKey is the fair-share bucket of the job: its _replicator database,
// or "" for transient jobs.
func (d *jobData) shareKey() string { return d.DBName }

func (d *jobData) addHistory(max int, e historyEvent) {
	d.History = append([]historyEvent{e}, d.History...)
	if len(d.History) > max {
		d.History = d.History[:max]
	}
}

func decodeJobData(raw json.RawMessage) (*jobData, error) {
	d := &jobData{}
	if err := json.Unmarshal(raw, d); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *jobData) encode() json.RawMessage {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err) // jobData always marshals
	}
	return b
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// errorInfo is the state_info of a crashing or failed job: CouchDB's
// {"error": tag, "reason": text}.
type errorInfo struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

func stateInfoOf(tag, reason string) json.RawMessage {
	b, _ := json.Marshal(errorInfo{Error: tag, Reason: reason})
	return b
}
