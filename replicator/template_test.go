package replicator_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/replicator"
)

// A template's document parses into a template, and each matching
// database's replication is the template with that database named.
func TestTemplateSpec(t *testing.T) {
	for _, c := range []struct {
		name, doc          string
		side               string
		match, nomatch     []string
		db, source, target string
	}{
		{name: "glob", doc: `{"source": {"url": "http://h:5984", "databases": "userdb-*"}, "target": "http://b:5984/copy-{db}", "continuous": true}`,
			side: "source", match: []string{"userdb-1", "userdb-"}, nomatch: []string{"user", "xuserdb-1", "_users"},
			db: "userdb-a/b", source: "http://h:5984/userdb-a%2Fb/", target: "http://b:5984/copy-userdb-a%2Fb/"},
		{name: "question", doc: `{"source": {"url": "http://h/", "databases": "db?"}, "target": "http://b/all"}`,
			side: "source", match: []string{"db1"}, nomatch: []string{"db", "db12"},
			db: "db1", source: "http://h/db1/", target: "http://b/all/"},
		{name: "system databases", doc: `{"source": {"url": "http://h/", "databases": "_*"}, "target": "http://b/copy{db}"}`,
			side: "source", match: []string{"_users", "_replicator"}, nomatch: []string{"users"},
			db: "_users", source: "http://h/_users/", target: "http://b/copy_users/"},
		{name: "regex on the target", doc: `{"source": "http://h/shared", "target": {"url": "http://b/", "databases": {"regex": "u[0-9]+"}}}`,
			side: "target", match: []string{"u1", "u22"}, nomatch: []string{"u", "xu1", "u1x", "_u1"},
			db: "u7", source: "http://h/shared/", target: "http://b/u7/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := replicator.ParseSpec(json.RawMessage(c.doc))
			require.NoError(t, err)
			require.NotNil(t, s.Template)
			require.Equal(t, c.side, s.Template.Side)
			m, err := s.Template.Matcher()
			require.NoError(t, err)
			for _, db := range c.match {
				require.True(t, m(db), db)
			}
			for _, db := range c.nomatch {
				require.False(t, m(db), db)
			}
			child, err := s.Child(c.db)
			require.NoError(t, err)
			require.Nil(t, child.Template)
			require.Equal(t, c.source, child.Source.URL)
			require.Equal(t, c.target, child.Target.URL)
			require.Equal(t, s.Continuous, child.Continuous)
			// The stored form round-trips.
			b, err := json.Marshal(s)
			require.NoError(t, err)
			var back replicator.Spec
			require.NoError(t, json.Unmarshal(b, &back))
			require.Equal(t, *s.Template, *back.Template)
		})
	}
}

// A template's bad input is refused with the field named.
func TestTemplateSpecRefused(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{"source": {"url": "http://h/", "databases": {"regex": "a("}}, "target": "http://b/{db}"}`, "`source.databases.regex` is not a valid regular expression"},
		{`{"source": {"url": "http://h/", "databases": {"regex": ""}}, "target": "http://b/{db}"}`, "`source.databases.regex` must be"},
		{`{"source": {"url": "http://h/", "databases": "A*"}, "target": "http://b/{db}"}`, "`source.databases`: \"A\" can match no database"},
		{`{"source": {"url": "http://h/", "databases": ""}, "target": "http://b/{db}"}`, "`source.databases` must be a pattern of 1"},
		{`{"source": {"url": "http://h/", "databases": ["a"]}, "target": "http://b/{db}"}`, "`source.databases` must be a pattern such as"},
		{`{"source": {"url": "http://h/", "databases": "a*"}, "target": {"url": "http://b/", "databases": "b*"}}`, "not both"},
		{`{"source": {"url": "http://h/x-{db}", "databases": "a*"}, "target": "http://b/{db}"}`, "`source` names {db}"},
		{`{"source": "http://h/a", "target": "http://b/{db}"}`, "`target` names {db}"},
		{`{"source": {"url": "http://h/?q=1", "databases": "a*"}, "target": "http://b/{db}"}`, "takes no query string"},
		{`{"source": {"url": "http://h/", "databases": "a*"}, "target": "http://b/x?q={db}"}`, "not in its query string"},
		{`{"source": {"url": "http://h/", "databases": {"regex": "a", "glob": "b"}}, "target": "http://b/{db}"}`, "with no other member"},
		{`{"source": {"url": "http://h/", "databases": null}, "target": "http://b/{db}"}`, "`source.databases` must be a pattern such as"},
		{`{"source": {"url": "http://h/", "databases": {"regex": "^u-["}}, "target": "http://b/{db}"}`, "missing closing ]: `[`"},
	} {
		_, err := replicator.ParseSpec(json.RawMessage(c.doc))
		require.ErrorIs(t, err, replicator.ErrBadRequest, c.doc)
		require.Contains(t, replicator.Reason(err), c.want, c.doc)
	}
	_, err := replicator.ParseRequest(json.RawMessage(`{"source": {"url": "http://h/", "databases": "a*"}, "target": "http://b/{db}"}`))
	require.ErrorIs(t, err, replicator.ErrBadRequest)
	require.Contains(t, replicator.Reason(err), "for _replicator documents")
}

// A template's replication's job id is no document's, and its view index
// document id lists it after its template's.
func TestChildJobID(t *testing.T) {
	require.Equal(t, "u:userdb-1|tmpl", replicator.ChildJobID("u", "tmpl", "userdb-1"))
	require.NotEqual(t, replicator.DocJobID("u", "tmpl"), replicator.ChildJobID("u", "tmpl", "userdb-1"))
	d := &replicator.JobData{DocID: "tmpl", TemplateDB: "userdb-1"}
	require.Equal(t, "tmpl\xffuserdb-1", d.IndexDocID())
	require.Equal(t, "tmpl", (&replicator.JobData{DocID: "tmpl"}).IndexDocID())
}

// A template whose other endpoint is on its own server makes no
// replication into a database it matches: it would feed itself.
func TestTemplateDoesNotFeedItself(t *testing.T) {
	_, err := replicator.ParseSpec(json.RawMessage(`{"source": {"url": "http://h/", "databases": "userdb-*"}, "target": "http://h/{db}-{db}"}`))
	require.ErrorContains(t, err, "would replicate into its own databases without end", "refused as it is written")
	s, err := replicator.ParseSpec(json.RawMessage(`{"source": {"url": "http://h/", "databases": {"regex": "userdb-.*"}}, "target": "http://h/{db}-{db}"}`))
	require.NoError(t, err, "a regular expression: no name to try it with; its replications say")
	_, err = s.Child("userdb-a")
	require.ErrorIs(t, err, replicator.ErrBadRequest)
	require.Contains(t, replicator.Reason(err), "the target of database userdb-a would be userdb-a-userdb-a, which the template matches too")
	s, err = replicator.ParseSpec(json.RawMessage(`{"source": {"url": "http://h/", "databases": "userdb-*"}, "target": "http://h/backup-{db}"}`))
	require.NoError(t, err)
	_, err = s.Child("userdb-a")
	require.NoError(t, err, "backup-userdb-a does not match")
	s, err = replicator.ParseSpec(json.RawMessage(`{"source": "http://h/userdb-shared", "target": {"url": "http://h/", "databases": "userdb-*"}}`))
	require.NoError(t, err)
	_, err = s.Child("userdb-a")
	require.NoError(t, err, "a fan-out from a database the pattern matches")
	_, err = s.Child("userdb-shared")
	require.ErrorContains(t, err, "the source of database userdb-shared would be itself")
}
