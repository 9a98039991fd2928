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
// open files gets 1,100 connections that never finish a request, of one
// shape each run: idle, headers never finished, a PUT whose body never
// comes after its first byte (anonymous, a user's, an admin's, chunked),
// and all of them mixed. /_up, server admins and users must still be
// served: the node caps its connections below the file limit and closes
// the slowest to make room. Latencies are logged, not asserted.
func TestSlowClientsAtFileLimit(t *testing.T) {
	bin := buildBinary(t)
	adm := &testutil.Creds{Name: "adm", Pass: "adm-pw"}
	alice, bob := &testutil.Creds{Name: "alice", Pass: "alice-pw"}, &testutil.Creds{Name: "bob", Pass: "bob-pw"}
	put := func(auth string) string {
		return "PUT /_replicator/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n" + auth + "\r\n{"
	}
	var (
		idle        = ""
		halfHeaders = "GET /_all_dbs HTTP/1.1\r\nHost: x\r\n"
		anonPut     = put("")
		userPut     = put("Authorization: " + alice.Authorization() + "\r\n")
		adminPut    = put("Authorization: " + adm.Authorization() + "\r\n")
		chunkedPut  = "PUT /_replicator/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{"
	)
	for _, tc := range []struct {
		name  string
		heads []string
	}{
		{"idle", []string{idle}},
		{"headers never finished", []string{halfHeaders}},
		{"anonymous PUT body withheld", []string{anonPut}},
		{"user PUT body withheld", []string{userPut}},
		{"admin PUT body withheld", []string{adminPut}},
		{"chunked PUT body withheld", []string{chunkedPut}},
		{"mixed", []string{idle, halfHeaders, anonPut, userPut, adminPut, chunkedPut}},
	} {
		t.Run(tc.name, func(t *testing.T) { slowClients(t, bin, tc.heads, adm, bob) })
	}
}

// slowClients opens 1,100 connections to a node limited to 1,024 files,
// each sending heads[i % len(heads)] and nothing more, then checks that
// /_up, admin and user requests are answered.
func slowClients(t *testing.T, bin string, heads []string, adm, bob *testutil.Creds) {
	env := append(os.Environ(), "FDBREP_ADMINS__ADM=adm-pw", "FDBREP_USERS__ALICE=alice-pw", "FDBREP_USERS__BOB=bob-pw",
		"FDBREP_CHTTPD_AUTH__ITERATIONS=10", "FDBREP_LOG__REQUESTS=false")
	node := startProcess(t, "/bin/sh", env, "-c",
		`ulimit -n 1024 && exec "$0" serve -in-memory -bind 127.0.0.1:0 -log-format json`, bin)
	listening := node.waitLog(t, "HTTP API listening")
	addr := listening["addr"].(string)
	t.Logf("connection cap: %v", listening["max_connections"])
	require.Less(t, listening["max_connections"].(float64), 1024.0, "the cap leaves room under the file limit")
	base := "http://" + addr

	const clients = 1100
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
		t.Logf("%s: %d in %v", what, status, time.Since(began).Round(time.Microsecond))
		return status
	}
	for i := range 3 {
		require.Equal(t, 200, timed("GET /_up on a new connection", func() int { return testutil.Do(t, "GET", base+"/_up", nil, nil).Status }))
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
