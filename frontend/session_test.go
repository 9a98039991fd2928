package frontend

import (
	"hash"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/config"
)

// pbkdf2Runs records the PBKDF2 runs of password checks while a test
// runs: the iterations and key length of each.
type pbkdf2Runs struct {
	mu   sync.Mutex
	runs [][2]int
}

func recordPBKDF2(t *testing.T) *pbkdf2Runs {
	rec := &pbkdf2Runs{}
	orig := pbkdf2Key
	pbkdf2Key = func(h func() hash.Hash, password string, salt []byte, iter, keyLen int) ([]byte, error) {
		rec.mu.Lock()
		rec.runs = append(rec.runs, [2]int{iter, keyLen})
		rec.mu.Unlock()
		return orig(h, password, salt, iter, keyLen)
	}
	t.Cleanup(func() { pbkdf2Key = orig })
	return rec
}

// take returns the runs recorded since the last take.
func (r *pbkdf2Runs) take() [][2]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.runs
	r.runs = nil
	return out
}

// A login of a name nobody has checks a dummy hash of the configured cost
// ([chttpd_auth] pbkdf2_prf and iterations), once, as a login of a known
// name with a password hashed so: whatever hashes the accounts hold, and
// when the accounts came at run time. Its time does not tell which names
// exist.
func TestUnknownNamesCostTheConfiguredHash(t *testing.T) {
	const iterations, keyLen = 1234, 64 // sha512
	precomputed, err := HashPassword("cheap", "sha256", 7)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		admins map[string]string
		later  map[string]string // [users] applied at run time (SetAccounts)
	}{
		{"an admin hash of another cost", map[string]string{adminName: precomputed}, nil},
		{"accounts set at run time", nil, map[string]string{aliceName: alicePass}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]map[string]string{"chttpd_auth": {"pbkdf2_prf": "sha512", "iterations": "1234"}, "admins": tc.admins}
			cfg, err := config.FromMap(m)
			require.NoError(t, err)
			fromCfg, _, err := OptionsFromConfig(cfg)
			require.NoError(t, err)
			e := newEnv(t, func(o *Options) {
				c := fromCfg
				c.DB, c.Logger, c.Replicator, c.Version, c.LogRequests = o.DB, o.Logger, o.Replicator, o.Version, o.LogRequests
				*o = c
			})
			if tc.later != nil {
				m["users"] = tc.later
				cfg, err := config.FromMap(m)
				require.NoError(t, err)
				accounts, _, err := AccountsFromConfig(cfg)
				require.NoError(t, err)
				e.srv.SetAccounts(accounts)
			}
			rec := recordPBKDF2(t)
			requireError(t, e.do("GET", "/_session", &creds{Name: "ghost", Pass: "x"}, nil), 401, "unauthorized")
			require.Equal(t, [][2]int{{iterations, keyLen}}, rec.take(), "Basic")
			r := e.do("POST", "/_session", anon, map[string]any{"name": "ghost", "password": "x"})
			requireError(t, r, 401, "unauthorized")
			require.Equal(t, [][2]int{{iterations, keyLen}}, rec.take(), "POST /_session")
			if tc.later != nil {
				requireError(t, e.do("GET", "/_session", &creds{Name: aliceName, Pass: "wrong"}, nil), 401, "unauthorized")
				require.Equal(t, [][2]int{{iterations, keyLen}}, rec.take(), "a known name")
			}
		})
	}
}

// The AuthSession cookie's SameSite attribute is [chttpd_auth]
// same_site's (Lax by default), in any case, as CouchDB 3.5 reads it;
// empty sends none (CouchDB's default); other values stop the node.
func TestSessionCookieSameSite(t *testing.T) {
	for _, tc := range []struct {
		value string // "-": not set
		want  string // the attribute in Set-Cookie, "" for none
	}{
		{"-", "SameSite=Lax"},
		{"lax", "SameSite=Lax"},
		{"Strict", "SameSite=Strict"},
		{"none", "SameSite=None"},
		{"", ""},
	} {
		t.Run(tc.value, func(t *testing.T) {
			m := map[string]map[string]string{"chttpd_auth": {}}
			if tc.value != "-" {
				m["chttpd_auth"]["same_site"] = tc.value
			}
			cfg, err := config.FromMap(m)
			require.NoError(t, err)
			fromCfg, _, err := OptionsFromConfig(cfg)
			require.NoError(t, err)
			e := newEnv(t, func(o *Options) { o.SameSite = fromCfg.SameSite })
			r := e.do("POST", "/_session", anon, map[string]any{"name": aliceName, "password": alicePass})
			require.Equal(t, 200, r.Status, r.Raw)
			cookies := (&http.Response{Header: r.Header}).Cookies()
			require.Len(t, cookies, 1)
			attrs := strings.Split(r.Header.Get("Set-Cookie"), "; ")
			if tc.want == "" {
				for _, a := range attrs {
					require.False(t, strings.HasPrefix(a, "SameSite"), r.Header.Get("Set-Cookie"))
				}
				return
			}
			require.Contains(t, attrs, tc.want)
		})
	}
	_, err := config.FromMap(map[string]map[string]string{"chttpd_auth": {"same_site": "sometimes"}})
	require.ErrorIs(t, err, config.ErrInvalidValue)
	require.ErrorContains(t, err, "same_site")
}
