package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fdbrep.ini")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestDefaultsAreValid(t *testing.T) {
	c := Default()
	for _, k := range Keys() {
		require.NoError(t, k.check(k.Default), "[%s] %s", k.Section, k.Name)
		require.NotEmpty(t, k.Doc, "[%s] %s", k.Section, k.Name)
	}
	require.Equal(t, int64(500), c.Int("replicator", "max_jobs"))
	require.Equal(t, "127.0.0.1:5984", c.BindAddress())
	require.Equal(t, []string{RoleAPIFrontend, RoleReplication}, c.Roles())
	require.Equal(t, SharesDefault, c.Shares("_replicator"))
	require.Equal(t, 0.5, c.Float("replicator", "usage_coeff"))
	require.Equal(t, 0.98, c.Float("replicator", "priority_coeff"))
	require.True(t, c.Bool("chttpd", "admin_only_all_dbs"))
	require.Equal(t, "default", c.Source("replicator", "max_jobs"))
	require.Empty(t, c.Warnings())
}

func TestLoadFilesAndEnv(t *testing.T) {
	base := writeFile(t, `
; CouchDB-style comment
[replicator]
max_jobs = 10
max_churn = 3

[replicator.shares]
_replicator = 200
another/_replicator = 50

[admins]
Admin = -pbkdf2:sha256-abc,def,10

[chttpd]
port = 15984

[node]
roles = replication

[cluster]
q = 2
`)
	local := writeFile(t, "[replicator]\nmax_churn = 7\nverify_ssl_certificates_log = true\n")
	c, err := Load([]string{base, local}, []string{
		"FDBREP_REPLICATOR__MAX_JOBS=42",
		"FDBREP_CHTTPD__BIND_ADDRESS=0.0.0.0",
		"FDBREP_BIND=ignored-no-double-underscore",
		"PATH=/bin",
		"FDBREP_REPLICATOR_SHARES___REPLICATOR=300",
		"FDBREP_CHTTPD_AUTH__TIMEOUT=5",
	})
	require.NoError(t, err)
	require.Equal(t, int64(42), c.Int("replicator", "max_jobs"))
	require.Equal(t, "env FDBREP_REPLICATOR__MAX_JOBS", c.Source("replicator", "max_jobs"))
	require.Equal(t, int64(7), c.Int("replicator", "max_churn"))
	require.Equal(t, local, c.Source("replicator", "max_churn"))
	require.Equal(t, "0.0.0.0:15984", c.BindAddress())
	require.Equal(t, 300, c.Shares("_replicator"))
	require.Equal(t, 50, c.Shares("another/_replicator"))
	require.Equal(t, int64(5), c.Int("chttpd_auth", "timeout"))
	require.Equal(t, map[string]string{"Admin": "-pbkdf2:sha256-abc,def,10"}, c.Admins())
	require.True(t, c.HasRole(RoleReplication))
	require.False(t, c.HasRole(RoleAPIFrontend))
	w := strings.Join(c.Warnings(), "\n")
	require.Contains(t, w, "[cluster] is a CouchDB section fdbrep does not use")
	require.Contains(t, w, "[replicator] verify_ssl_certificates_log is a CouchDB setting fdbrep does not implement: fdbrep verifies certificates by default")
	require.Contains(t, w, "; ignored ("+local+")")
}

func TestLoadRejects(t *testing.T) {
	for _, tc := range []struct {
		name, ini string
		env       []string
		want      string
	}{
		{"not an int", "[replicator]\nmax_jobs = lots\n", nil, `[replicator] max_jobs = "lots"`},
		{"out of range", "[chttpd]\nport = 70000\n", nil, "want an integer from 0 to 65535"},
		{"float range", "[replicator]\nusage_coeff = 2\n", nil, "to 1"},
		{"bool", "[chttpd]\nrequire_valid_user = maybe\n", nil, "want true or false"},
		{"one of", "[log]\nformat = xml\n", nil, "want one of console, json"},
		{"bad role", "[node]\nroles = api_frontend,indexing\n", nil, `"indexing" is not one of`},
		{"no roles", "[node]\nroles = ,\n", nil, "at least one role"},
		{"shares range", "[replicator.shares]\n_replicator = 5000\n", nil, "from 1 to 1000"},
		{"shares db", "[replicator.shares]\nfoo = 5\n", nil, "not a replicator database"},
		{"empty admin password", "[admins]\nbob =\n", nil, "empty password"},
		{"health not loopback", "[node]\nhealth_address = 0.0.0.0:5986\n", nil, "loopback"},
		{"env unknown section", "", []string{"FDBREP_REPLICATR__MAX_JOBS=1"}, "FDBREP_REPLICATR__MAX_JOBS"},
		{"typo in a key", "[replicator]\ncheckpiont_interval = 5000\n", nil, "[replicator] checkpiont_interval (" /* file */},
		{"typo in a key: suggestion", "[replicator]\ncheckpiont_interval = 5000\n", nil, "did you mean [replicator] checkpoint_interval?"},
		{"key in the wrong section", "[chttpd]\nmax_jobs = 5\n", nil, "did you mean [replicator] max_jobs?"},
		{"typo in an env key", "", []string{"FDBREP_REPLICATOR__MAXJOBS=1"}, "env FDBREP_REPLICATOR__MAXJOBS"},
		{"typo in a section", "[replicatr]\nmax_jobs = 5\n", nil, "did you mean [replicator]?"},
		{"unknown section", "[mystery]\nx = 1\n", nil, "section [mystery]"},
		{"unknown key, nothing close", "[log]\ncolour = yes\n", nil, "[log] colour"},
		{"both intervals", "[replicator]\ninterval = 60000\ninterval_sec = 5\n", nil, "both set"},
		{"interval too small", "[replicator]\ninterval = 10\n", nil, "want an integer of at least 1000 (milliseconds)"},
		{"no upper bound", "[replicator]\nmax_churn = 0\n", nil, "want an integer of at least 1"},
		{"bounded", "[replicator]\nmax_jobs = 0\n", nil, "want an integer from 1 to 10000"},
		{"unit from the name", "[replicator]\nprogress_interval_msec = 5\n", nil, "want an integer from 100 to 60000 (milliseconds)"},
		{"seconds", "[replicator]\nmin_run_time_sec = 0\n", nil, "want an integer of at least 1 (seconds)"},
		{"env bad value", "", []string{"FDBREP_REPLICATOR__MAX_JOBS=-1"}, "env FDBREP_REPLICATOR__MAX_JOBS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]string{writeFile(t, tc.ini)}, tc.env)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrInvalidValue) || errors.Is(err, ErrUnknownKey), "%v", err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestSecretValueNotInError(t *testing.T) {
	// No registered secret has a type that can fail, so check the wrapper.
	c := &Config{values: map[string]map[string]string{"chttpd_auth": {"secret": "hunter2"}}, sources: map[string]string{}}
	err := c.wrap(lookup("chttpd_auth", "secret"), errors.New("bad"))
	require.NotContains(t, err.Error(), "hunter2")
}

func TestLoadFileErrors(t *testing.T) {
	_, err := Load([]string{filepath.Join(t.TempDir(), "missing.ini")}, nil)
	require.ErrorIs(t, err, ErrFile)
	_, err = Load([]string{writeFile(t, "[unterminated\n")}, nil)
	require.ErrorIs(t, err, ErrFile)
}

func TestGetterPanicsOnUnregisteredKey(t *testing.T) {
	require.Panics(t, func() { Default().Int("replicator", "no_such_key") })
}

func TestFromMap(t *testing.T) {
	c, err := FromMap(map[string]map[string]string{"users": {"bob": "pw"}, "user_roles": {"bob": "a, b"}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"bob": "pw"}, c.Users())
	require.Equal(t, []string{"a", "b"}, c.UserRoles("bob"))
	_, err = FromMap(map[string]map[string]string{"chttpd": {"port": "x"}})
	require.ErrorIs(t, err, ErrInvalidValue)
}

// A key of seconds or milliseconds takes no value that a node, turning it
// into a time.Duration, would wrap around (2^53 seconds did).
func TestDurationKeysFitADuration(t *testing.T) {
	most := map[string]int64{"seconds": math.MaxInt64 / int64(time.Second), "milliseconds": math.MaxInt64 / int64(time.Millisecond)}
	checked := 0
	for _, k := range Keys() {
		m, ok := most[k.unit()]
		if !ok || k.Kind != KindInt || k.Max < float64(m) {
			continue
		}
		checked++
		require.NoError(t, k.check(strconv.FormatInt(m, 10)), "[%s] %s", k.Section, k.Name)
		err := k.check(strconv.FormatInt(m+1, 10))
		require.Error(t, err, "[%s] %s", k.Section, k.Name)
		require.Contains(t, err.Error(), "from "+num(k.Min)+" to "+strconv.FormatInt(m, 10)+" ("+k.unit()+")")
		d := time.Duration(m) * map[string]time.Duration{"seconds": time.Second, "milliseconds": time.Millisecond}[k.unit()]
		require.Positive(t, d, "[%s] %s", k.Section, k.Name)
	}
	require.Greater(t, checked, 10)
}

func TestEnvName(t *testing.T) {
	require.Equal(t, "FDBREP_REPLICATOR__MAX_JOBS", EnvName("replicator", "max_jobs"))
	require.Equal(t, "FDBREP_REPLICATOR_SHARES___REPLICATOR", EnvName("replicator.shares", "_replicator"))
}

func ExampleLoad() {
	c, err := Load(nil, []string{"FDBREP_REPLICATOR__MAX_JOBS=100"})
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Int("replicator", "max_jobs"), c.Source("replicator", "max_jobs"))
	// Output: 100 env FDBREP_REPLICATOR__MAX_JOBS
}

func TestCouchDBLocalIni(t *testing.T) {
	// Parts of a CouchDB 3.x local.ini: used where fdbrep knows the key,
	// ignored with a warning where it does not.
	c, err := Load([]string{writeFile(t, `
[couchdb]
uuid = 0123456789abcdef0123456789abcdef
single_node = true

[couch_httpd_auth]
secret = s3cret
timeout = 1200

[httpd]
port = 5986

[replicator]
interval = 60000
max_jobs = 300
verify_ssl_certificates_log = true
`)}, nil)
	require.NoError(t, err)
	require.Equal(t, time.Minute, c.Duration("replicator", "interval_sec"))
	require.Equal(t, int64(300), c.Int("replicator", "max_jobs"))
	require.Equal(t, "0123456789abcdef0123456789abcdef", c.String("couchdb", "uuid"), "the server UUID is fdbrep's too")
	w := strings.Join(c.Warnings(), "\n")
	require.Contains(t, w, "[couchdb] single_node is a CouchDB setting fdbrep does not use")
	require.Contains(t, w, "[couch_httpd_auth] is a CouchDB section fdbrep does not use; ignored")
	require.Contains(t, w, "fdbrep reads secret, timeout from [chttpd_auth]")
	require.Contains(t, w, "fdbrep reads port from [chttpd]")
	require.Contains(t, w, "[replicator] verify_ssl_certificates_log")
	require.NotContains(t, w, "s3cret")

	require.Equal(t, 15*time.Second, Default().Duration("replicator", "interval_sec"))
}

// [jwt_keys] as CouchDB 3.5 reads it: keys hold ':' and, written
// "key= = value", '='; kids keep their case; HMAC secrets are secrets,
// public keys are not.
func TestJWTKeysSection(t *testing.T) {
	pemLine := func(pub any) string {
		der, err := x509.MarshalPKIXPublicKey(pub)
		require.NoError(t, err)
		return strings.ReplaceAll(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), "\n", `\n`)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	c, err := Load([]string{writeFile(t, "[jwt_keys]\nhmac:_default = aGVsbG8=\nrsa:h2k= = "+pemLine(&rk.PublicKey)+
		"\nec:Kid1="+pemLine(&ek.PublicKey)+"\n\n[admins]\nBob = -pbkdf2:sha256-ab,cd,10\n")}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"hmac:_default": "aGVsbG8=", "rsa:h2k=": pemLine(&rk.PublicKey), "ec:Kid1": pemLine(&ek.PublicKey)},
		c.Section(SectionJWTKeys))
	require.Equal(t, map[string]string{"Bob": "-pbkdf2:sha256-ab,cd,10"}, c.Admins())
	require.Empty(t, c.Warnings())
	require.Equal(t, c.Section(SectionJWTKeys), c.All()[SectionJWTKeys])
	require.True(t, IsSecret(SectionJWTKeys, "hmac:_default"))
	require.False(t, IsSecret(SectionJWTKeys, "rsa:h2k="))
}

// A key is declared once, and a declaration that contradicts itself, or
// comes after the registry was read, stops the program at start-up.
func TestRegisterRefusesContradictions(t *testing.T) {
	Keys() // freeze, as Load does
	for _, tc := range []struct {
		name     string
		register func()
		want     string
	}{
		{"default under its range", func() { RegisterInt("replicator", "x_max", 0, 1, 10, "doc") }, `default "0"`},
		{"no doc", func() { RegisterBool("replicator", "x_flag", true, "") }, "no doc"},
		{"unknown section", func() { RegisterBool("replicatr", "x_flag", true, "doc") }, "not a section"},
		{"default not whole units", func() {
			RegisterDuration("replicator", "x_sec", time.Second, 1500*time.Millisecond, time.Second, Forever, "doc")
		}, "not a whole number of seconds"},
		{"after the registry was read", func() { RegisterBool("replicator", "x_flag", true, "doc") }, "after the registry was first used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, fmt.Sprint(panicOf(t, tc.register)), tc.want)
		})
	}
	require.Nil(t, lookup("replicator", "x_flag"))
}

func panicOf(t *testing.T, f func()) (v any) {
	t.Helper()
	defer func() { v = recover() }()
	f()
	t.Fatal("no panic")
	return nil
}
