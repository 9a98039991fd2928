package replicator

import (
	"encoding/json"
	"slices"
	"sort"
)

// ignoredFields are the fields of a CouchDB 3.5 replication (a
// _replicator document or a POST /_replicate body) that fdbrep accepts
// and ignores, with why: the replication is stored and runs without them,
// and the control plane logs a warning naming each.
var ignoredFields = map[string]string{
	"ibrowse_options": "options of CouchDB's HTTP client, ibrowse; fdbrep's is Go's, whose dialer already tries IPv6 and IPv4 addresses side by side (prefer_ipv6, the one option CouchDB accepts)",
}

// IgnoredFields returns the fields of obj, a replication, that fdbrep
// ignores (null ones aside), sorted.
func IgnoredFields(obj map[string]json.RawMessage) []string {
	var out []string
	for f := range ignoredFields {
		if v, ok := obj[f]; ok && !isNull(v) {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return slices.Clip(out)
}

// IgnoredFieldReason says why fdbrep ignores field.
func IgnoredFieldReason(field string) string { return ignoredFields[field] }
