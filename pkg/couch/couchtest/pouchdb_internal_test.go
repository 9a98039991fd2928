package couchtest

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// When another process took the free port first, the answer on it is not
// our pouchdb-server's: waitReady refuses it (the launch retries) instead
// of handing the test a server that is someone else's and goes away.
func TestWaitReadyRefusesAnotherProcess(t *testing.T) {
	t.Parallel()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"express-pouchdb":"Welcome!","uuid":"theirs"}`))
	}))
	t.Cleanup(other.Close)
	u, err := url.Parse(other.URL)
	require.NoError(t, err)
	s := &Server{base: u, client: peerClient(), exited: make(chan struct{}), name: "pouchdb-server", uuid: "ours"}
	err = s.waitReady(time.Minute)
	require.ErrorContains(t, err, `another process answers`)

	s.uuid = "theirs"
	require.NoError(t, s.waitReady(time.Minute))
}
