package couch

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// WalkSecrets names every credential of a replication document and puts
// f's result in its place, copying the nested objects it changes.
func TestWalkSecrets(t *testing.T) {
	body := map[string]any{}
	require.NoError(t, json.Unmarshal([]byte(`{
		"source": "http://bob:s1@h/a",
		"target": {"url": "https://t:s2@h/b", "auth": {"basic": {"username": "u", "password": "s3"}},
		           "headers": {"X-Token": "s4", "Accept": "s5"}},
		"proxy": "http://p:s6@proxy:3128",
		"source_proxy": "not a url, no userinfo",
		"target_proxy": "http://u:s 7@host/",
		"other": "http://keep:me@h/"}`), &body))
	target := body["target"].(map[string]any)
	var seen []string
	require.NoError(t, WalkSecrets(body, func(field, v string) (string, error) {
		seen = append(seen, field+"="+v)
		return "X" + strings.ToUpper(v), nil
	}))
	sort.Strings(seen)
	require.Equal(t, []string{
		"proxy.url=http://u:s 7@host/", "proxy=s6", "source.password=s1", "target.header.accept=s5",
		"target.header.x-token=s4", "target.password=s2", "target.password=s3",
	}, seen)
	require.Equal(t, "http://bob:XS1@h/a", body["source"])
	require.Equal(t, "https://t:XS2@h/b", body["target"].(map[string]any)["url"])
	require.Equal(t, "XHTTP://U:S 7@HOST/", body["target_proxy"], "a URL that does not parse is passed whole")
	require.Equal(t, "not a url, no userinfo", body["source_proxy"])
	require.Equal(t, "http://keep:me@h/", body["other"], "only a replication's fields")
	require.Equal(t, "s4", target["headers"].(map[string]any)["X-Token"], "nested objects are copied, not changed")
	require.Equal(t, "s3", target["auth"].(map[string]any)["basic"].(map[string]any)["password"])

	// The redacted password is printed as the views print it.
	body = map[string]any{"source": "http://bob:pw@h/a"}
	require.NoError(t, WalkSecrets(body, func(_, _ string) (string, error) { return Redacted, nil }))
	require.Equal(t, "http://bob:*****@h/a", body["source"])
}

// WalkSecretsTo gives each credential where it is sent: its endpoint's
// origin with its proxy's, or a proxy's own origin.
func TestWalkSecretsTo(t *testing.T) {
	body := map[string]any{}
	require.NoError(t, json.Unmarshal([]byte(`{
		"source": "HTTP://bob:s1@DB.example/a",
		"target": {"url": "https://h:6984/b", "auth": {"basic": {"username": "u", "password": "s2"}},
		           "headers": {"X-Token": "s3"}},
		"target_proxy": "socks5://p:s4@[::1]/"}`), &body))
	seen := map[string]string{}
	require.NoError(t, WalkSecretsTo(body, func(field, dest, v string) (string, error) {
		seen[v] = field + " to " + dest
		return v, nil
	}))
	require.Equal(t, map[string]string{
		"s1": "source.password to http://db.example:80",
		"s2": "target.password to https://h:6984 via socks5://[::1]:1080",
		"s3": "target.header.x-token to https://h:6984 via socks5://[::1]:1080",
		"s4": "proxy to socks5://[::1]:1080",
	}, seen)

	for raw, want := range map[string]string{
		"https://h/db": "https://h:443", "http://H:5984": "http://h:5984", "not a url": "", "": "", "/db": "",
	} {
		require.Equal(t, want, Origin(raw), raw)
	}
}

// A credential replaced in a URL leaves the rest of the URL as it was
// written: a template's "{db}" is not escaped, nor an escape undone.
func TestWalkSecretsToKeepsTheURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://bob:pw@h:5984/copy-{db}":      "http://bob:X@h:5984/copy-{db}",
		"http://bob:pw@h/a%2Fb?x=1#f":         "http://bob:X@h/a%2Fb?x=1#f",
		"https://b%40ob:p%3Aw@h/":             "https://b%40ob:X@h/",
		"http://bob:pw@h:5984/c-%7Bdb%7D/":    "http://bob:X@h:5984/c-%7Bdb%7D/",
		"http://bob:pw@[::1]:5984/db?since=0": "http://bob:X@[::1]:5984/db?since=0",
	} {
		body := map[string]any{"source": raw}
		require.NoError(t, WalkSecretsTo(body, func(_, _, v string) (string, error) { return "X", nil }))
		require.Equal(t, want, body["source"], raw)
	}
	// A password of digits with an unescaped '/' or '?' parses as a port
	// and a path or query: such a URL goes whole, as one that does not
	// parse.
	for _, raw := range []string{"http://bob:2024/pw@h/db", "http://bob:2024?pw@h/db"} {
		body := map[string]any{"source": raw}
		var fields []string
		require.NoError(t, WalkSecretsTo(body, func(field, _, v string) (string, error) {
			fields = append(fields, field)
			return "X", nil
		}))
		require.Equal(t, []string{"source." + SecretURL}, fields, raw)
		require.Equal(t, "X", body["source"], raw)
	}
}
