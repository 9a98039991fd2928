package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCheckRuntimeKey(t *testing.T) {
	for _, tc := range []struct {
		section, key string
		apply        Apply
		err          error
		reason       string
	}{
		{"replicator", "max_jobs", ApplyReplication, nil, ""},
		{"replicator", "usage_coeff", ApplyAll, nil, ""},
		{"replicator", "priority_coeff", ApplyAll, nil, ""},
		{"replicator", "interval", ApplyReplication, nil, ""},
		{"log", "level", ApplyAll, nil, ""},
		{"admins", "Bob", ApplyFrontend, nil, ""},
		{"replicator.shares", "_replicator", ApplyAll, nil, ""},
		{"admins", "", ApplyFrontend, ErrInvalidValue, "empty name"},
		{"chttpd", "port", ApplyRestart, ErrRestartOnly, "[chttpd] port cannot change while the node runs"},
		{"chttpd_auth", "secret", ApplyRestart, ErrRestartOnly, "restart"},
		{"jwt_keys", "hmac:_default", ApplyRestart, ErrRestartOnly, "[jwt_keys] hmac:_default cannot change while the node runs"},
		{"replicator", "password", ApplyRestart, ErrRestartOnly, "restart"},
		{"replicator", "job_timeout_sec", ApplyRestart, ErrRestartOnly, "restart"},
		{"couchdb", "max_dbs_open", ApplyRestart, ErrNotUsed, "[couchdb] max_dbs_open is a CouchDB setting fdbrep does not use"},
		{"replicator", "verify_ssl_certificates_log", ApplyRestart, ErrNotUsed, "CouchDB setting"},
		{"replicator", "max_jbos", ApplyRestart, ErrUnknownKey, "did you mean [replicator] max_jobs?"},
		{"replicatr", "max_jobs", ApplyRestart, ErrUnknownKey, "did you mean [replicator]?"},
	} {
		t.Run(tc.section+"/"+tc.key, func(t *testing.T) {
			a, err := CheckRuntimeKey(tc.section, tc.key)
			require.Equal(t, tc.apply, a)
			if tc.err == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.err)
			require.Contains(t, err.Error(), tc.reason)
		})
	}
}

func TestWith(t *testing.T) {
	base, err := FromMap(map[string]map[string]string{"replicator": {"max_jobs": "10", "interval_sec": "5"}})
	require.NoError(t, err)
	c, err := base.With(
		Layer{Source: "_config (cluster)", Values: map[string]map[string]string{"replicator": {"max_jobs": "20", "interval": "2000"}}},
		Layer{Source: "_config (node)", Values: map[string]map[string]string{"replicator": {"max_jobs": "30"}, "log": {"level": "debug"}}},
	)
	require.NoError(t, err)
	require.Equal(t, int64(30), c.Int("replicator", "max_jobs"))
	require.Equal(t, "_config (node)", c.Source("replicator", "max_jobs"))
	require.Equal(t, 2*time.Second, c.Duration("replicator", "interval_sec"), "interval hides the interval_sec below it")
	_, ok := c.Get("replicator", "interval_sec")
	require.False(t, ok)
	v, ok := c.Get("replicator", "interval")
	require.True(t, ok)
	require.Equal(t, "2000", v)
	require.Equal(t, "debug", c.String("log", "level"))
	// The base is unchanged.
	require.Equal(t, int64(10), base.Int("replicator", "max_jobs"))
	require.Equal(t, 5*time.Second, base.Duration("replicator", "interval_sec"))

	for _, tc := range []struct {
		name   string
		values map[string]map[string]string
		want   string
	}{
		{"bad value", map[string]map[string]string{"replicator": {"max_jobs": "lots"}}, `[replicator] max_jobs = "lots" (_config): want an integer`},
		{"both intervals", map[string]map[string]string{"replicator": {"interval": "2000", "interval_sec": "2"}}, "both set"},
		{"backoffs crossed", map[string]map[string]string{"replicator": {"min_backoff_penalty_sec": "100", "max_backoff_penalty_sec": "50"}}, "under min_backoff_penalty_sec"},
		{"share", map[string]map[string]string{"replicator.shares": {"_replicator": "0"}}, "from 1 to 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := base.With(Layer{Source: "_config", Values: tc.values})
			require.ErrorIs(t, err, ErrInvalidValue)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestGetAndAll(t *testing.T) {
	c, err := FromMap(map[string]map[string]string{
		"admins": {"Adm": "-pbkdf2-x,y,1"}, "replicator.shares": {"_replicator": "200"},
	})
	require.NoError(t, err)
	all := c.All()
	require.Equal(t, "500", all["replicator"]["max_jobs"], "defaults are shown")
	require.Equal(t, "15", all["replicator"]["interval_sec"])
	require.Equal(t, "15000", all["replicator"]["interval"], "neither set: both names show the default")
	require.Equal(t, "-pbkdf2-x,y,1", all["admins"]["Adm"])
	require.Equal(t, "200", all["replicator.shares"]["_replicator"])
	_, ok := c.Get("couchdb", "max_dbs_open")
	require.False(t, ok)
	require.True(t, IsSecret("admins", "Adm"))
	require.True(t, IsSecret("chttpd_auth", "secret"))
	require.False(t, IsSecret("replicator", "max_jobs"))
}

func TestNodeNameRules(t *testing.T) {
	for _, name := range []string{"_cluster", "_local", "a/b"} {
		_, err := FromMap(map[string]map[string]string{"node": {"name": name}})
		require.ErrorIs(t, err, ErrInvalidValue, name)
	}
	_, err := FromMap(map[string]map[string]string{"node": {"name": "fdbrep@host-1"}})
	require.NoError(t, err)
}
