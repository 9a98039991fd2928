package frontend_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fdbrep/fdbrep/frontend"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// Example serves the API on an in-memory store with one admin, without a
// replication scheduler, and writes a replication document.
func Example() {
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	accounts, _, err := frontend.NewAccounts(map[string]string{"admin": "secret"}, nil, nil,
		frontend.AccountsOptions{PRF: "sha256", Iterations: 1000})
	if err != nil {
		panic(err)
	}
	srv, err := frontend.New(frontend.Options{DB: db, Accounts: accounts})
	if err != nil {
		panic(err)
	}
	if err := srv.Init(context.Background()); err != nil { // creates _replicator
		panic(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	req, _ := http.NewRequest("PUT", ts.URL+"/_replicator/my_rep",
		strings.NewReader(`{"source":"http://src:5984/foo","target":"http://tgt:5984/bar","continuous":true}`))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("admin", "secret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, strings.Contains(string(body), `"ok":true`))
	// Output: 201 true
}
