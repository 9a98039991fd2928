package control_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/kvtest"
	"github.com/fdbrep/fdbrep/repdb"
	"github.com/fdbrep/fdbrep/replicator"
	"github.com/fdbrep/fdbrep/replicator/control"
	"github.com/fdbrep/fdbrep/replicator/replicatortest"
)

// ParseDoc is the write-time check of replication documents: what it
// refuses, with which reason, and what it lets through. (Owner rules are
// the HTTP API's, see frontend/owner_test.go.)
func TestParseDoc(t *testing.T) {
	db := kvtest.NewDB(t)
	p, err := control.New(db, replicatortest.JobsClient(t, db), replicator.Config{})
	require.NoError(t, err)
	good := `{"source":"http://h/a","target":"http://h/b"}`
	for _, tc := range []struct {
		name, db, id, doc string
		reason            string // "" = accepted
	}{
		{"valid", "_replicator", "d", good, ""},
		{"not a replicator db", "foo_replicator", "d", `{}`, ""},
		{"design doc", "_replicator", "_design/x", `{}`, ""},
		{"local doc", "a/_replicator", "_local/x", `{}`, ""},
		{"source only", "_replicator", "d", `{"source":"http://h/a"}`, "Missing `target` field"},
		{"neither", "_replicator", "d", `{}`, "Missing `source` field"},
		{"not an object", "_replicator", "d", `[1]`, "a replication document must be a JSON object"},
		{"marked failed: checked all the same (M2)", "_replicator", "d", `{"_replication_state":"failed","source":"http://h/a"}`, "Missing `target` field"},
		{"marked failed and valid", "_replicator", "d", `{"_replication_state":"failed","source":"http://h/a","target":"http://h/b"}`, ""},
		{"bogus state", "_replicator", "d", `{"_replication_state":"done","source":"http://h/a","target":"http://h/b"}`,
			"`_replication_state` is written by the replicator; \"done\" is not one of its states"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := p.ParseDoc(tc.db, tc.id, json.RawMessage(tc.doc))
			require.NotNil(t, d, "the parsed document is returned either way")
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, replicator.ErrForbidden)
			require.Equal(t, tc.reason, replicator.Reason(err))
		})
	}
	d, err := p.ParseDoc("_replicator", "d", json.RawMessage(good))
	require.NoError(t, err)
	require.Equal(t, "http://h/a/", d.Spec.Source.URL)
}

// L1: the longest document id the HTTP API accepts gives a job id the job
// layer accepts.
func TestLongestDocIDFitsAJobID(t *testing.T) {
	id := replicator.DocJobID(replicator.NewDBUUID(), strings.Repeat("z", repdb.MaxDocIDLength))
	require.LessOrEqual(t, len(id), fdbjobs.MaxNameSize)
}
