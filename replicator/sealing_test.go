package replicator

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/internal/testutil"
	"github.com/fdbrep/fdbrep/pkg/seal"
)

func sealKeys(t *testing.T) (*seal.Sealer, *seal.Opener) {
	t.Helper()
	pub, priv := testutil.SealKeys(t)
	s, err := seal.LoadPublicKey(pub)
	require.NoError(t, err)
	o, err := seal.LoadPrivateKeys(priv)
	require.NoError(t, err)
	return s, o
}

// Every place a replication body may hold a credential is sealed, the
// parsed specification shows none of them, and the node that holds the
// key gets back exactly what the body as written parses to.
func TestSealBodyAndOpen(t *testing.T) {
	s, o := sealKeys(t)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("carol:hdr-secret-1"))
	for _, tc := range []struct{ name, body string }{
		{"url userinfo", `{"source":"http://bob:url-secret-1@h/a","target":"http://h/b"}`},
		{"object url userinfo", `{"source":{"url":"http://bob:url-secret-2@h/a"},"target":"http://h/b"}`},
		{"auth basic", `{"source":{"url":"http://h/a","auth":{"basic":{"username":"bob","password":"auth-secret-1"}}},"target":"http://h/b"}`},
		{"basic header", `{"source":{"url":"http://h/a","headers":{"Authorization":"` + basic + `"}},"target":"http://h/b"}`},
		{"basic header beside auth", `{"source":{"url":"http://h/a","auth":{"basic":{"username":"bob","password":"auth-secret-2"}},"headers":{"authorization":"` + basic + `"}},"target":"http://h/b"}`},
		{"bearer and other headers", `{"source":{"url":"http://h/a","headers":{"Authorization":"Bearer tok-secret-1","X-Api-Key":"key-secret-1"}},"target":"http://h/b"}`},
		{"proxies", `{"source":"http://h/a","target":"http://h/b","source_proxy":"http://pu:proxy-secret-1@p:3128","target_proxy":"socks5://pu:proxy-secret-2@p:1080"}`},
		{"proxy for both", `{"source":"http://h/a","target":{"url":"http://t:url-secret-3@h/b"},"proxy":"http://pu:proxy-secret-3@p:3128"}`},
		{"iam api key", `{"source":{"url":"http://h/a","auth":{"iam":{"api_key":"iam-secret-1","url":"https://iam.example/token"}}},"target":"http://h/b"}`},
		{"iam at its default url", `{"source":"http://h/a","target":{"url":"https://h/b","auth":{"iam":{"api_key":"iam-secret-2"}}}}`},
		{"oauth2 client secret", `{"source":"http://h/a","target":{"url":"http://h/b","auth":{"oauth2":{"url":"https://auth.example/token","client_id":"c","client_secret":"client-secret-1","scope":"db"}}},"proxy":"http://p:3128"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain, err := ParseSpec(json.RawMessage(tc.body))
			require.NoError(t, err)
			scope := DocScope("_replicator", tc.name)
			stored, err := SealJSON(s, json.RawMessage(tc.body), scope)
			require.NoError(t, err)
			require.NotContains(t, string(stored), "-secret", "a credential in the clear: %s", stored)
			require.NotContains(t, string(stored), strings.TrimPrefix(basic, "Basic "))
			sealed, err := ParseSpec(stored)
			require.NoError(t, err)
			require.True(t, sealed.Sealed())
			require.Equal(t, plain.Source.Redacted(), sealed.Source.Redacted(), "the views show the same user")
			again, err := SealJSON(s, stored, scope)
			require.NoError(t, err)
			require.JSONEq(t, string(stored), string(again), "sealed values are kept as they are")

			opened, err := sealed.Open(o, scope)
			require.NoError(t, err)
			want, err := plain.Replication()
			require.NoError(t, err)
			got, err := opened.Replication()
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.False(t, opened.Sealed())
			require.True(t, sealed.Sealed(), "Open leaves the job's specification sealed")

			_, err = sealed.Open(o, DocScope("_replicator", "another"))
			require.ErrorIs(t, err, seal.ErrCorrupt, "a sealed value copied to another document does not open")
			_, err = sealed.Open(nil, scope)
			require.ErrorIs(t, err, seal.ErrNoKey)
			require.Contains(t, OpenReason(err), s.ID(), "the reason names the key")
		})
	}
}

// A body carrying what reads show for a sealed credential is refused,
// naming the field, with its other credentials sealed all the same.
func TestSealBodyRedacted(t *testing.T) {
	s, _ := sealKeys(t)
	stored, err := SealJSON(s, json.RawMessage(`{"source":{"url":"http://h/a","auth":{"basic":{"username":"bob","password":"*****"}}},"target":"http://u:tgt-secret@h/b"}`), UserScope("bob"))
	require.ErrorIs(t, err, ErrBadRequest)
	require.Contains(t, Reason(err), "`source.password` is *****")
	require.NotContains(t, string(stored), "tgt-secret")
}

// POST /_replicate seals afresh each time: the same request matches the
// job it started, a different one does not.
func TestSameRequest(t *testing.T) {
	s, _ := sealKeys(t)
	body := `{"source":"http://bob:pw@h/a","target":"http://h/b","continuous":true}`
	seal := func(b string) *Spec {
		stored, err := SealJSON(s, json.RawMessage(b), UserScope("bob"))
		require.NoError(t, err)
		sp, err := ParseSpec(stored)
		require.NoError(t, err)
		return sp
	}
	a, b := seal(body), seal(body)
	require.False(t, SameReplication(a, b), "sealed afresh")
	require.True(t, SameRequest(a, b))
	require.False(t, SameRequest(a, seal(strings.Replace(body, "h/b", "h/c", 1))))
	plain, err := ParseSpec(json.RawMessage(body))
	require.NoError(t, err)
	require.False(t, SameRequest(plain, a), "a job stored in the clear is replaced by a sealed one")
}

// A sealed credential opens only for where it was sent when sealed: the
// scheme, host and port of its endpoint and of the endpoint's proxy (a
// proxy's password: of the proxy). Another database on the same server
// is the same destination.
func TestSealedValueBoundToDestination(t *testing.T) {
	s, o := sealKeys(t)
	body := `{"source":{"url":"https://svc:src-secret@db.example/a","headers":{"X-Api-Key":"key-secret"}},` +
		`"target":"http://t:tgt-secret@db.example:5984/b","target_proxy":"http://pu:proxy-secret@p:3128"}`
	scope := DocScope("_replicator", "bound")
	stored, err := SealJSON(s, json.RawMessage(body), scope)
	require.NoError(t, err)
	sealed, err := ParseSpec(stored)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		change func(*Spec)
		field  string // "" opens
	}{
		{"another database", func(c *Spec) { c.Source.URL = "https://db.example:443/other/" }, ""},
		{"host names in another case", func(c *Spec) { c.Target.URL = "HTTP://DB.Example:5984/b/" }, ""},
		{"another host", func(c *Spec) { c.Source.URL = "https://evil.example/a/" }, "source"},
		{"another port", func(c *Spec) { c.Source.URL = "https://db.example:8443/a/" }, "source"},
		{"another scheme", func(c *Spec) { c.Source.URL = "http://db.example:443/a/" }, "source"},
		{"a proxy added", func(c *Spec) { c.Source.Proxy = "http://evil.example:3128" }, "source"},
		{"another proxy", func(c *Spec) {
			c.Target.Proxy = strings.Replace(c.Target.Proxy, "@p:3128", "@evil.example:3128", 1)
		}, "target"},
		{"no proxy", func(c *Spec) { c.Target.Proxy = "" }, "target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sealed.clone()
			tc.change(c)
			opened, err := c.Open(o, scope)
			if tc.field == "" {
				require.NoError(t, err)
				require.Equal(t, "src-secret", opened.Source.Password)
				return
			}
			require.ErrorIs(t, err, seal.ErrCorrupt)
			require.Contains(t, err.Error(), "`"+tc.field+".")
			require.NotContains(t, err.Error(), "secret")
		})
	}
}

// A token secret opens only for the token endpoint, the peer and the
// scope it was sealed for: kept while the peer moved, it would buy a token
// for another host.
func TestSealedTokenBoundToTokenEndpoint(t *testing.T) {
	s, o := sealKeys(t)
	body := `{"source":{"url":"https://db.example/a","auth":{"iam":{"api_key":"iam-secret","url":"https://iam.example/token"}}},"target":"http://h/b"}`
	scope := DocScope("_replicator", "token")
	stored, err := SealJSON(s, json.RawMessage(body), scope)
	require.NoError(t, err)
	require.NotContains(t, string(stored), "iam-secret")
	sealed, err := ParseSpec(stored)
	require.NoError(t, err)
	c := sealed.clone()
	c.Source.URL = "https://db.example/b/" // another database of the same server
	_, err = c.Open(o, scope)
	require.NoError(t, err)
	c = sealed.clone()
	c.Source.URL = "https://evil.example/a/" // the token would go there
	_, err = c.Open(o, scope)
	require.ErrorIs(t, err, seal.ErrCorrupt)
	c = sealed.clone()
	tok := *c.Source.Token
	tok.URL = "https://evil.example/token"
	c.Source.Token = &tok
	_, err = c.Open(o, scope)
	require.ErrorIs(t, err, seal.ErrCorrupt)
	require.Contains(t, err.Error(), "source.api_key")
}

// A Basic Authorization header beside token credentials is not taken as
// the endpoint's password (which would drop the token credentials): the
// parser refuses the two together.
func TestSealBodyBasicHeaderBesideToken(t *testing.T) {
	s, _ := sealKeys(t)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("carol:hdr-secret"))
	body := `{"source":{"url":"http://h/a","headers":{"Authorization":"` + basic + `"},"auth":{"iam":{"api_key":"iam-secret","url":"https://iam.example/token"}}},"target":"http://h/b"}`
	stored, err := SealJSON(s, json.RawMessage(body), DocScope("_replicator", "both"))
	require.NoError(t, err)
	_, err = ParseSpec(stored)
	require.ErrorIs(t, err, ErrBadRequest)
	require.Contains(t, Reason(err), "give one kind")
}
