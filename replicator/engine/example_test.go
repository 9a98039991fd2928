package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// Example replicates a small database into a new one on a pouchdb-server.
func Example() {
	srv, err := couchtest.LaunchPouchDB()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPut, "/source", ""},
		{http.MethodPost, "/source/_bulk_docs", `{"docs": [{"_id": "a"}, {"_id": "b"}, {"_id": "c"}]}`},
	} {
		r, _ := http.NewRequest(req.method, srv.URL()+req.path, strings.NewReader(req.body))
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}

	// The replicator package parses _replicator documents into a
	// Replication; here it is built directly.
	source, err := couch.ParseEndpoint(json.RawMessage(strconv.Quote(srv.URL() + "/source")))
	if err != nil {
		log.Fatal(err)
	}
	target, err := couch.ParseEndpoint(json.RawMessage(strconv.Quote(srv.URL() + "/copy")))
	if err != nil {
		log.Fatal(err)
	}
	rep := engine.Replication{Source: source, Target: target, CreateTarget: true}
	res, err := engine.Start(context.Background(), rep, engine.Options{ServerUUID: "example"}).Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("written:", res.Stats.DocsWritten, "through:", res.Stats.ThroughSeq, "sessions:", len(res.History))
	// Output:
	// written: 3 through: 3 sessions: 1
}
