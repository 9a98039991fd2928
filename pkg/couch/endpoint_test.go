package couch_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		raw      string
		url      string // normalized, without credentials
		user     string
		pass     string
		headers  http.Header
		redacted string
	}{
		{name: "plain string", raw: `"http://h:5984/db"`, url: "http://h:5984/db/", redacted: "http://h:5984/db/"},
		{name: "trailing slash kept", raw: `"https://h/db/"`, url: "https://h/db/"},
		{name: "query left alone", raw: `"http://h/db?x=1"`, url: "http://h/db?x=1"},
		{name: "escaped db name", raw: `"http://h/a%2Fb"`, url: "http://h/a%2Fb/"},
		{name: "scheme case", raw: `"HTTP://h/db"`, url: "http://h/db/"},
		{name: "userinfo", raw: `"http://bob:pw@h/db"`, url: "http://h/db/", user: "bob", pass: "pw", redacted: "http://bob:*****@h/db/"},
		{name: "userinfo escaped", raw: `"http://bob:p%40ss%3Aw@h/db"`, url: "http://h/db/", user: "bob", pass: "p@ss:w"},
		{name: "userinfo without password dropped", raw: `"http://bob@h/db"`, url: "http://h/db/"},
		{name: "object url only", raw: `{"url":"http://h/db"}`, url: "http://h/db/"},
		{
			name: "object headers", raw: `{"url":"http://h/db","headers":{"x-a":"1","X-B":"2"}}`,
			url: "http://h/db/", headers: http.Header{"X-A": {"1"}, "X-B": {"2"}},
		},
		{
			name: "auth.basic", raw: `{"url":"http://h/db","auth":{"basic":{"username":"al","password":"s"}}}`,
			url: "http://h/db/", user: "al", pass: "s",
		},
		{
			name: "header basic", raw: fmt.Sprintf(`{"url":"http://h/db","headers":{"authorization":%q}}`, basic("hd", "hp")),
			url: "http://h/db/", user: "hd", pass: "hp",
		},
		{
			name: "bearer header kept", raw: `{"url":"http://h/db","headers":{"Authorization":"Bearer tok"}}`,
			url: "http://h/db/", headers: http.Header{"Authorization": {"Bearer tok"}},
		},
		{
			name: "bad basic header removed, no creds", raw: `{"url":"http://h/db","headers":{"Authorization":"Basic !!!"}}`,
			url: "http://h/db/",
		},
		{
			name: "precedence auth over url over header",
			raw: fmt.Sprintf(`{"url":"http://u:up@h/db","headers":{"Authorization":%q},"auth":{"basic":{"username":"a","password":"ap"}}}`,
				basic("hd", "hp")),
			url: "http://h/db/", user: "a", pass: "ap",
		},
		{
			name: "precedence url over header",
			raw:  fmt.Sprintf(`{"url":"http://u:up@h/db","headers":{"Authorization":%q}}`, basic("hd", "hp")),
			url:  "http://h/db/", user: "u", pass: "up",
		},
		{name: "null headers and auth", raw: `{"url":"http://h/db","headers":null,"auth":null}`, url: "http://h/db/"},
		{name: "auth without basic", raw: `{"url":"http://h/db","auth":{"session":{}}}`, url: "http://h/db/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := couch.ParseEndpoint(json.RawMessage(tc.raw))
			require.NoError(t, err)
			require.Equal(t, tc.url, ep.URL.String())
			require.Nil(t, ep.URL.User)
			require.Equal(t, tc.user, ep.Username)
			require.Equal(t, tc.pass, ep.Password)
			if tc.headers == nil {
				tc.headers = http.Header{}
			}
			require.Equal(t, tc.headers, ep.Headers)
			if tc.redacted != "" {
				require.Equal(t, tc.redacted, ep.Redacted())
			}
			if tc.pass != "" {
				require.NotContains(t, ep.Redacted(), tc.pass)
				require.NotContains(t, fmt.Sprintf("%v %s %+v %#v", ep, ep, ep, ep), tc.pass)
			}
		})
	}
}

func TestParseEndpointErrors(t *testing.T) {
	for _, tc := range []struct {
		name, raw, msg string
	}{
		{"empty", ``, "missing endpoint"},
		{"null", `null`, "missing endpoint"},
		{"number", `42`, "must be a URL string or an object"},
		{"array", `["http://h/db"]`, "must be a URL string or an object"},
		{"local name", `"mydb"`, "local database names are not supported"},
		{"other scheme", `"ftp://h/db"`, "only http and https"},
		{"no host", `"http:///db"`, "invalid url"},
		{"bad port", `"http://h:99999/db"`, "invalid port"},
		{"bad url with password", `"http://bob:hunter2@h:x/db"`, "invalid"},
		// A password of digits with an unescaped '/', '?' or '#' parses
		// as a port, and the rest of it as the path or the query.
		{"password in the path", `"http://bob:2024/hunter2@h/db"`, "escape '@', '/', '?' and '#'"},
		{"password in the query", `"http://bob:2024?hunter2@h/db"`, "escape '@', '/', '?' and '#'"},
		{"password in the fragment", `"http://bob:2024#hunter2@h/db"`, "escape '@', '/', '?' and '#'"},
		{"an @ in the path", `"http://h/db@x"`, "escape '@', '/', '?' and '#'"},
		{"object without url", `{"headers":{}}`, `no string "url"`},
		{"url not string", `{"url":5}`, "not valid JSON"},
		{"headers not strings", `{"url":"http://h/db","headers":{"a":1}}`, "object of strings"},
		{"header with newline", `{"url":"http://h/db","headers":{"a":"x\r\nb: y"}}`, "not a valid HTTP header"},
		{"auth not object", `{"url":"http://h/db","auth":"x"}`, "auth"},
		{"basic without username", `{"url":"http://h/db","auth":{"basic":{"password":"hunter2"}}}`, "non-empty string"},
		{"basic without password", `{"url":"http://h/db","auth":{"basic":{"username":"u"}}}`, "non-empty string"},
		{"truncated", `{"url":"http://h/db"`, "not valid JSON"},
		{"iam without key", `{"url":"http://h/db","auth":{"iam":{}}}`, `"auth.iam" needs a non-empty string "api_key"`},
		{"iam key not string", `{"url":"http://h/db","auth":{"iam":{"api_key":5}}}`, `"auth.iam" needs`},
		{"iam and oauth2", `{"url":"http://h/db","auth":{"iam":{"api_key":"hunter2"},"oauth2":{"url":"https://a/t","client_id":"c","client_secret":"hunter2"}}}`, "give one"},
		{"iam and basic", `{"url":"http://h/db","auth":{"basic":{"username":"u","password":"hunter2"},"iam":{"api_key":"hunter2"}}}`, "give one kind"},
		{"iam and url password", `{"url":"http://u:hunter2@h/db","auth":{"iam":{"api_key":"hunter2"}}}`, "give one kind"},
		{"iam and bearer header", `{"url":"http://h/db","headers":{"Authorization":"Bearer hunter2"},"auth":{"iam":{"api_key":"hunter2"}}}`, "give one kind"},
		{"oauth2 without url", `{"url":"http://h/db","auth":{"oauth2":{"client_id":"c","client_secret":"hunter2"}}}`, `"auth.oauth2" needs strings "url"`},
		{"oauth2 without client", `{"url":"http://h/db","auth":{"oauth2":{"url":"https://a/t","client_secret":"hunter2"}}}`, `"client_id" (not empty)`},
		{"token url not http", `{"url":"http://h/db","auth":{"iam":{"api_key":"hunter2","url":"ftp://a/t"}}}`, "not an http(s) URL"},
		{"auth member near iam", `{"url":"http://h/db","auth":{"IAM":{"api_key":"hunter2"}}}`, "did you mean"},
		{"auth member near oauth2", `{"url":"http://h/db","auth":{"oauth":{"client_secret":"hunter2"}}}`, "did you mean"},
		{"iam unknown member", `{"url":"http://h/db","auth":{"iam":{"api_key":"k","password":"hunter2"}}}`, `"auth.iam" has "password"`},
		{"iam key blank", `{"url":"http://h/db","auth":{"iam":{"api_key":"   "}}}`, `"auth.iam" needs`},
		{"token url with password", `{"url":"http://h/db","auth":{"iam":{"api_key":"k","url":"https://u:hunter2@a/t"}}}`, "without credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := couch.ParseEndpoint(json.RawMessage(tc.raw))
			require.ErrorIs(t, err, couch.ErrInvalidEndpoint)
			require.Contains(t, err.Error(), tc.msg)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

func ExampleParseEndpoint() {
	ep, err := couch.ParseEndpoint(json.RawMessage(`{"url": "http://bob:secret@127.0.0.1:5984/db",
		"headers": {"X-Tenant": "acme"}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ep.URL)
	fmt.Println(ep.Redacted())
	fmt.Println(ep.Username, ep.Headers.Get("X-Tenant"))
	// Output:
	// http://127.0.0.1:5984/db/
	// http://bob:*****@127.0.0.1:5984/db/
	// bob acme
}

// M2: an endpoint URL that does not parse never comes back with its
// password in the error, whatever the password holds.
func TestInvalidEndpointErrorsHidePasswords(t *testing.T) {
	for _, raw := range []string{
		"http://padm:Alice/LeakPw14@127.0.0.1:25986/secsrc",
		"http://padm:Echo?Pw8@127.0.0.1/x",
		"http://padm:Echo#Pw8@127.0.0.1/x",
		"http://padm:Ech@o/Pw8@127.0.0.1:99999/x",
		"ftp://padm:Pw8secret@h/x",
		"padm:Pw8secret@h/x",
	} {
		_, err := couch.ParseEndpoint(json.RawMessage(strconv.Quote(raw)))
		require.ErrorIs(t, err, couch.ErrInvalidEndpoint, raw)
		for _, secret := range []string{"LeakPw14", "Pw8", "o/Pw8"} {
			require.NotContains(t, err.Error(), secret, raw)
		}
	}
}
