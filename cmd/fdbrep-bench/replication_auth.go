package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// authBenchPassword is the admin password of the authenticated peers.
const authBenchPassword = "bench-admin-pw"

// authBench measures the engine against two pouchdb-server processes that
// require authentication (their databases admit the admin alone): the same
// replication with Basic on every request (each request makes the peer
// check the password) and with a session (one login per endpoint, then the
// cookie). Rounds alternate the two; the best rate of each and their ratio
// are printed.
func authBench(docs, docBytes, workers, batch, runs int) error {
	src, err := couchtest.LaunchPouchDB(couchtest.WithAdmin("admin", authBenchPassword))
	if err != nil {
		return err
	}
	defer src.Stop()
	tgt, err := couchtest.LaunchPouchDB(couchtest.WithAdmin("admin", authBenchPassword))
	if err != nil {
		return err
	}
	defer tgt.Stop()
	srcBase, tgtBase := authBase(src), authBase(tgt)
	fmt.Printf("authenticated peers: %d docs, source and target admit their admin alone\n", docs)
	if err := loadSource(srcBase, "src", docs, docBytes); err != nil {
		return err
	}
	if err := membersOnly(srcBase, "src"); err != nil {
		return err
	}
	modes := []struct {
		name string
		auth couch.AuthMode
	}{{"Basic on every request", couch.AuthBasic}, {"session (cookie)", couch.AuthSession}}
	rates := make([][]float64, len(modes))
	for run := 1; run <= runs; run++ {
		for i, m := range modes {
			db := fmt.Sprintf("auth%d-%d", run, i)
			if err := putDB(tgtBase, db); err != nil {
				return err
			}
			if err := membersOnly(tgtBase, db); err != nil {
				return err
			}
			rep := engine.Replication{WorkerProcesses: workers, WorkerBatchSize: batch}
			if rep.Source, err = couch.ParseEndpoint(json.RawMessage(strconv.Quote(srcBase + "/src"))); err != nil {
				return err
			}
			if rep.Target, err = couch.ParseEndpoint(json.RawMessage(strconv.Quote(tgtBase + "/" + db))); err != nil {
				return err
			}
			start := time.Now()
			res, err := engine.Start(context.Background(), rep, engine.Options{
				ServerUUID: "fdbrep-bench", Client: engine.ClientSettings{Auth: m.auth}}).Wait()
			if err != nil {
				return fmt.Errorf("engine, %s: %w", m.name, err)
			}
			d := time.Since(start)
			if res.Stats.DocsWritten != int64(docs) {
				return fmt.Errorf("engine, %s, wrote %d docs, want %d", m.name, res.Stats.DocsWritten, docs)
			}
			rates[i] = append(rates[i], float64(docs)/d.Seconds())
			fmt.Printf("  run %d: fdbrep engine, %-24s %6.0f docs/s\n", run, m.name+":", rates[i][len(rates[i])-1])
			if err := deleteDB(tgtBase, db); err != nil {
				return err
			}
		}
	}
	basic, session := best(rates[0]), best(rates[1])
	fmt.Printf("best of %d runs against authenticated peers:\n", runs)
	fmt.Printf("  Basic on every request:                  %8.0f docs/s\n", basic)
	fmt.Printf("  session (cookie):                        %8.0f docs/s\n", session)
	fmt.Printf("  session / Basic:                         %.2fx\n", session/basic)
	return nil
}

// authBase is the root URL of s with its admin's credentials.
func authBase(s *couchtest.Server) string {
	return strings.TrimSuffix(s.AuthDBURL("x"), "/x")
}

// membersOnly lets the admin alone read and write db.
func membersOnly(base, db string) error {
	_, err := doJSON(http.MethodPut, base+"/"+db+"/_security",
		map[string]any{"members": map[string]any{"names": []string{"admin"}}}, nil)
	return err
}
