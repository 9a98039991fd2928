package replicator_test

import (
	"encoding/json"
	"fmt"

	"github.com/fdbrep/fdbrep/replicator"
)

// ParseSpec validates a _replicator document or POST /_replicate body and
// normalizes it; its errors carry the reason to show the user.
func ExampleParseSpec() {
	s, err := replicator.ParseSpec(json.RawMessage(`{"source": "http://bob:secret@127.0.0.1:5984/a", "target": "http://127.0.0.1:5984/b", "continuous": true}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Source.Redacted(), s.Target.URL, s.Continuous)

	_, err = replicator.ParseSpec(json.RawMessage(`{"source": "http://127.0.0.1:5984/a", "doc_ids": ["x"], "filter": "d/f", "target": "http://127.0.0.1:5984/b"}`))
	fmt.Println(replicator.Reason(err))
	// Output:
	// http://bob:*****@127.0.0.1:5984/a/ http://127.0.0.1:5984/b/ true
	// `doc_ids`, `filter` and `selector` are mutually exclusive: use at most one
}
