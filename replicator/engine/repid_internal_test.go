package engine

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

func ep(t *testing.T, raw string) couch.Endpoint {
	t.Helper()
	e, err := couch.ParseEndpoint(json.RawMessage(raw))
	require.NoError(t, err)
	return e
}

// TestLegacyReplicationIDs: the ids fdbrep computed before it computed
// CouchDB's are still computed exactly (their checkpoints are taken over
// after an upgrade), and are among CheckpointIDs. The expected ids are
// those fdbrep's ReplicationID gave for these replications.
func TestLegacyReplicationIDs(t *testing.T) {
	const uuid = "0123456789abcdef0123456789abcdef"
	code := " function(doc) {\n return true; }\n"
	for _, tc := range []struct {
		rep  Replication
		want string
	}{
		{Replication{Source: ep(t, `"https://u:p@h/a"`), Target: ep(t, `"http://h:5984/b?x=1"`),
			Selector: json.RawMessage(`{"b":{"$in":[1,2]},"a":1}`), SinceSeq: json.RawMessage(`{"y":1,"x":[3]}`)},
			"9b3345d79f49a269787863a90bb1e235"},
		{Replication{Source: ep(t, `{"url":"https://h:6984/a","headers":{"Accept":"application/json","x-k":"v"}}`),
			Target: ep(t, `"http://h/b"`), Filter: "d/f", QueryParams: json.RawMessage(`{"b":"2","a":[1]}`), Continuous: true},
			"f3d9d74afc4d9dc684cc0fe65d2a1eac"},
	} {
		base, full, err := replicationIDWith(tc.rep, uuid, code, idOptions{legacy: true})
		require.NoError(t, err)
		require.Equal(t, tc.want, base)
		if tc.rep.Continuous {
			require.Equal(t, tc.want+"+continuous", full)
		}
		own, _, err := ReplicationID(tc.rep, uuid, code)
		require.NoError(t, err)
		require.NotEqual(t, own, base)
		others, err := CheckpointIDs(tc.rep, uuid, code)
		require.NoError(t, err)
		require.Contains(t, others, tc.want)
		require.NotContains(t, others, own)
	}
	// A replication whose ids never changed has no other id to look under.
	plain := Replication{Source: ep(t, `"http://h/a"`), Target: ep(t, `"http://h/b"`), DocIDs: []string{"x"}}
	others, err := CheckpointIDs(plain, uuid, "")
	require.NoError(t, err)
	require.Empty(t, others)
}

func TestTrimFilterCode(t *testing.T) {
	for in, want := range map[string]string{
		"f":                 "f",
		"  f  ":             "f",
		"  f  \n":           "f\n",      // "$" matches before a final newline
		"\tf\t":             "\tf\t",    // "\s" in an Erlang string is a space
		"f\n  g\n":          "f\n  g\n", // several lines: as it is
		" f\n\n":            " f\n\n",
		"":                  "",
		"   ":               "",
		" function() {} \r": "function() {} \r",
	} {
		require.Equal(t, want, trimFilterCode(in), strconv.Quote(in))
	}
}

// TestSelectorErrors: what mango_selector:normalize refuses is refused
// when the replication is validated, with Mango's reason.
func TestSelectorErrors(t *testing.T) {
	for sel, reason := range map[string]string{
		`{"a": {"$foo": 1}}`:           "Invalid operator: $foo",
		`{"$and": 1}`:                  "Bad argument for operator $and",
		`{"a": {"$size": -1}}`:         "Bad argument for operator $size",
		`{"a": {"$mod": [1.5, 0]}}`:    "Bad argument for operator $mod",
		`{"a": {"$exists": 1}}`:        "Bad argument for operator $exists",
		`{"a": {"$where": "x"}}`:       "Unsupported operator: $where",
		`{"a": {"$text": "x"}}`:        "Invalid field normalization on selector",
		`{"": 1}`:                      "One or more conditions is missing a field name.",
		`{"$not": {"$text": "x"}}`:     "Bad argument for operator $not",
		`{"a": {"$regex": 1}}`:         "Invalid operator: $regex",
		`{"a": {"$beginsWith": true}}`: "Invalid operator: $beginsWith",
	} {
		rep := Replication{Source: ep(t, `"http://h/a"`), Target: ep(t, `"http://h/b"`), Selector: json.RawMessage(sel)}
		err := rep.Validate()
		require.ErrorIs(t, err, ErrInvalidSpec, sel)
		require.ErrorContains(t, err, "parameter `selector`: "+reason, sel)
	}
	for _, sel := range []string{`{}`, `{"a": {}}`, `{"$or": []}`, `{"a": {"$elemMatch": {}}}`, `{"$text": 1}`} {
		rep := Replication{Source: ep(t, `"http://h/a"`), Target: ep(t, `"http://h/b"`), Selector: json.RawMessage(sel)}
		require.NoError(t, rep.Validate(), sel)
	}
}
