package main

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/couch/couchtest"
)

// A node replicates from and to a pouchdb-server behind a TLS terminator
// with a private CA when [replicator] ssl_trusted_certificates_file names
// the CA; without it the document is crashing with a reason that names
// the key. The peer's password is in no log line and no reply.
func TestServeReplicatesOverTLS(t *testing.T) {
	const peerPW = "peer-pw-5d1"
	peer := couchtest.StartPouchDB(t, couchtest.WithAdmin("padm", peerPW))
	peer.CreateDB(t, "src")
	peer.AddDocs(t, "src", 0, 25)
	root := couchtest.NewCA(t, "private root")
	proxy := couchtest.NewTLSProxy(t, peer.URL(), couchtest.TLSProxyConfig{Cert: root.Server(t)})
	base := "https://padm:" + url.QueryEscape(peerPW) + "@" + proxy.URL()[len("https://"):]
	adm := &testutil.Creds{Name: "adm", Pass: "adm-pw"}

	for _, tc := range []struct {
		name, keys, state string
	}{
		{"with the CA", "ssl_trusted_certificates_file = " + root.WriteCert(t), "completed"},
		{"without the CA", "", "crashing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ini := writeIni(t, "[admins]\nadm = adm-pw\n[chttpd_auth]\niterations = 10\n[replicator]\n"+tc.keys+"\n")
			addr, logs := startServe(t, "-config", ini, "-in-memory", "-bind", "127.0.0.1:0")
			api := "http://" + addr
			tgt := "tgt-" + tc.state
			r := testutil.Do(t, "PUT", api+"/_replicator/r", adm, map[string]any{
				"source": base + "/src", "target": base + "/" + tgt, "create_target": true})
			require.Equal(t, 201, r.Status, r.Raw)
			waitState(t, api, adm, "r", tc.state)
			r = testutil.Do(t, "GET", api+"/_scheduler/docs/_replicator/r", adm, nil)
			require.NotContains(t, r.Raw, peerPW)
			if tc.state == "completed" {
				require.Equal(t, 25, docCount(t, peer.AuthDBURL(tgt)))
			} else {
				info, _ := r.Body["info"].(map[string]any)
				require.Equal(t, "http_request_failed", info["error"])
				require.Contains(t, info["reason"], "certificate signed by unknown authority: set [replicator] ssl_trusted_certificates_file", r.Raw)
			}
			require.NotContains(t, logs.String(), peerPW)
		})
	}
}
