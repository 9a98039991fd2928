package couchtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PouchReplicateResult is the outcome of one PouchDB.replicate run.
type PouchReplicateResult struct {
	OK               bool            `json:"ok"`
	DocsRead         int64           `json:"docs_read"`
	DocsWritten      int64           `json:"docs_written"`
	DocWriteFailures int64           `json:"doc_write_failures"`
	LastSeq          json.RawMessage `json:"last_seq"`
	ElapsedMS        float64         `json:"elapsed_ms"`
}

// Elapsed is the replication time measured inside node (process start-up
// excluded).
func (r PouchReplicateResult) Elapsed() time.Duration {
	return time.Duration(r.ElapsedMS * float64(time.Millisecond))
}

// PouchReplicate runs one one-shot PouchDB.replicate (PouchDB 7.3.1, the
// throughput baseline for fdbrep's replication benchmark) from source to
// target, both database URLs, with scripts/pouchdb/replicate.js. batchSize
// and batchesLimit ≤ 0 keep PouchDB's defaults (100, 10). It needs node on
// PATH and installs the npm packages like StartPouchDB. Errors never contain
// URL passwords.
func PouchReplicate(ctx context.Context, source, target string, batchSize, batchesLimit int) (PouchReplicateResult, error) {
	var res PouchReplicateResult
	if _, err := pouchDBServerBinary(); err != nil { // makes sure node_modules is installed
		return res, err
	}
	root, err := moduleRoot()
	if err != nil {
		return res, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return res, fmt.Errorf("couchtest: PouchReplicate needs Node.js: %w", err)
	}
	args := []string{filepath.Join(root, pouchDir, "replicate.js"), source, target,
		strconv.Itoa(max(batchSize, 0)), strconv.Itoa(max(batchesLimit, 0))}
	cmd := exec.CommandContext(ctx, node, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// replicate.js redacts URL passwords in what it prints.
		return res, fmt.Errorf("couchtest: PouchDB.replicate: %v: %s", err, strings.TrimSpace(tail(stderr.Bytes(), 2000)))
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res); err != nil {
		return res, fmt.Errorf("couchtest: PouchDB.replicate printed %q: %w", tail(stdout.Bytes(), 500), err)
	}
	return res, nil
}
