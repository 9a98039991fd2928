package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
)

// TestSlowClientsAtFileLimit is H1 end to end: a node limited to 1,024
// open files gets 1,100 connections that never finish a request (idle,
// half-sent headers, anonymous and authenticated bodies withheld). /_up,
// server admins and users must still be served: the node caps its
// connections below the file limit and closes the slowest to make room.
// Latencies are logged, not asserted.
func TestSlowClientsAtFileLimit(t *testing.T) {
	bin := buildBinary(t)
	env := append(os.Environ(), "FDBREP_ADMINS__ADM=adm-pw", "FDBREP_USERS__ALICE=alice-pw", "FDBREP_USERS__BOB=bob-pw",
		"FDBREP_CHTTPD_AUTH__ITERATIONS=10", "FDBREP_LOG__REQUESTS=false")
	node := startProcess(t, "/bin/sh", env, "-c",
		`ulimit -n 1024 && exec "$0" serve -in-memory -bind 127.0.0.1:0 -log-format json`, bin)
	listening := node.waitLog(t, "HTTP API listening")
	addr := listening["addr"].(string)
	t.Logf("connection cap: %v", listening["max_connections"])
	require.Less(t, listening["max_connections"].(float64), 1024.0, "the cap leaves room under the file limit")
	base := "http://" + addr
	// alice holds hundreds of requests open; bob is another user, who must
	// not suffer for it (alice herself may get 429: her in-flight cap).
	adm := &testutil.Creds{Name: "adm", Pass: "adm-pw"}
	alice, bob := &testutil.Creds{Name: "alice", Pass: "alice-pw"}, &testutil.Creds{Name: "bob", Pass: "bob-pw"}

	const clients = 1100
	aliceAuth := "Authorization: " + alice.Authorization() + "\r\n"
	heads := []string{
		"",                                      // idle: connects and sends nothing
		"GET /_all_dbs HTTP/1.1\r\nHost: x\r\n", // headers never finished
		"PUT /_replicator/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
		"PUT /_replicator/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n" + aliceAuth + "\r\n{",
	}
	dialFailures, writeFailures := 0, 0
	for i := range clients {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			dialFailures++
			continue
		}
		t.Cleanup(func() { c.Close() })
		if head := heads[i%len(heads)]; head != "" {
			if _, err := io.WriteString(c, head); err != nil {
				writeFailures++
			}
		}
	}
	t.Logf("%d slow clients: %d dials and %d writes failed", clients, dialFailures, writeFailures)

	timed := func(what string, f func() int) int {
		began := time.Now()
		status := f()
		t.Logf("%s: %d in %v", what, status, time.Since(began).Round(time.Millisecond))
		return status
	}
	for i := range 3 {
		require.Equal(t, 200, timed("GET /_up", func() int { return testutil.Do(t, "GET", base+"/_up", nil, nil).Status }))
		require.Equal(t, 200, timed("admin GET /_all_dbs", func() int { return testutil.Do(t, "GET", base+"/_all_dbs", adm, nil).Status }))
		doc := map[string]any{"source": "http://127.0.0.1:1/a", "target": "http://127.0.0.1:1/b"}
		require.Equal(t, 201, timed("bob PUT", func() int {
			return testutil.Do(t, "PUT", fmt.Sprintf("%s/_replicator/ok%d", base, i), bob, doc).Status
		}))
	}
	select {
	case <-node.exited:
		t.Fatalf("the node exited: %v", node.err)
	default:
	}
}
