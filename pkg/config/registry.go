package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Kind is the type of a config value.
type Kind int

// Kinds of config values.
const (
	KindString Kind = iota
	KindInt
	KindBool
	KindFloat
	KindList // comma-separated strings
)

func (k Kind) String() string {
	return [...]string{"string", "integer", "boolean", "float", "list"}[k]
}

// Key describes one known config key: its type, default, range and meaning.
// Keys lists them all; docs/CONFIG.md is generated from them.
type Key struct {
	Section string
	Name    string
	Kind    Kind
	Default string
	// Min and Max bound KindInt and KindFloat values (inclusive) when
	// HasRange is set.
	Min, Max float64
	HasRange bool
	// Unit is what a KindInt value counts ("milliseconds", "seconds",
	// "bytes"; "" for a plain count), named by range errors. Keys named
	// …_msec and …_sec have theirs without saying.
	Unit string
	// Infinity lets a KindInt key take CouchDB's word "infinity" (no
	// limit), which its getters read as 0 (OrInfinity).
	Infinity bool
	// OneOf restricts KindString and KindList values to these words.
	OneOf []string
	// Secret values never appear in errors, logs or the _config API.
	Secret bool
	// Apply tells whether a change through the _config API takes effect
	// at run time, and on which nodes; ApplyRestart keys are refused there.
	Apply Apply
	// Alias is the other name of a setting held under two (see AliasOf).
	Alias string
	Doc   string

	per time.Duration // the unit of a RegisterDuration key
}

// Apply tells when a change to a key takes effect, and on which nodes a
// change made at run time (the _config API) is applied.
type Apply int

// When changes apply.
const (
	// ApplyRestart: read at start-up only; the _config API refuses it.
	ApplyRestart Apply = iota
	// ApplyAll: applied at run time by every node.
	ApplyAll
	// ApplyReplication: applied at run time by replication nodes.
	ApplyReplication
	// ApplyFrontend: applied at run time by api_frontend nodes.
	ApplyFrontend
)

func (a Apply) String() string {
	return [...]string{"restart", "live: all nodes", "live: replication nodes", "live: api_frontend nodes"}[a]
}

// Roles returns the node roles a change applies to (nil for ApplyRestart).
func (a Apply) Roles() []string {
	switch a {
	case ApplyAll:
		return []string{RoleAPIFrontend, RoleReplication}
	case ApplyReplication:
		return []string{RoleReplication}
	case ApplyFrontend:
		return []string{RoleAPIFrontend}
	}
	return nil
}

// Sections whose keys are free-form: every key is a name (an admin, a user,
// a replicator database, a JWT key) rather than a fixed setting.
const (
	SectionAdmins    = "admins"
	SectionUsers     = "users"
	SectionUserRoles = "user_roles"
	SectionShares    = "replicator.shares"
	// SectionJWTKeys holds the keys that verify JWTs, CouchDB's [jwt_keys]:
	// each key is a type and a kid ("hmac:_default", "rsa:kid", "ec:kid").
	SectionJWTKeys = "jwt_keys"
)

// Bounds and default of [replicator.shares] values, as in CouchDB.
const (
	SharesDefault = 100
	SharesMin     = 1
	SharesMax     = 1000
)

// Node roles.
const (
	RoleAPIFrontend = "api_frontend"
	RoleReplication = "replication"
)

const maxInt = 1 << 53

// max is k's upper bound: Max, and for a key of seconds or milliseconds
// at most what a time.Duration holds (about 292 years), so that no value
// the check lets through wraps around when a node turns it into one.
func (k *Key) max() float64 {
	switch k.unit() {
	case "seconds":
		return min(k.Max, float64(math.MaxInt64/int64(time.Second)))
	case "milliseconds":
		return min(k.Max, float64(math.MaxInt64/int64(time.Millisecond)))
	}
	return k.Max
}

// unit is what k's value counts: its Unit, or the one its name ends with.
func (k *Key) unit() string {
	switch {
	case k.Unit != "":
		return k.Unit
	case strings.HasSuffix(k.Name, "_msec"):
		return "milliseconds"
	case strings.HasSuffix(k.Name, "_sec"):
		return "seconds"
	}
	return ""
}

// TLSRefreshSecDefault is [fdb] tls_refresh_sec's default (fdbkv's
// TLSRefreshDefault, in seconds).
const TLSRefreshSecDefault = 300

// The keys this package reads itself, for the node's composition root:
// the HTTP API's address, the store, the log and the node. Packages with
// settings of their own register theirs (see setting.go).
var (
	keyBindAddress = RegisterString("chttpd", "bind_address", "127.0.0.1",
		"Address the HTTP API listens on (api_frontend nodes). Use 0.0.0.0 to listen on every interface.", nil)
	keyPort = RegisterInt("chttpd", "port", 5984, 0, 65535,
		"Port of the HTTP API; 0 picks a free port.")
	_ = RegisterString("fdb", "backend", "embedded",
		"Storage backend: the embedded store, or a FoundationDB cluster (binary built with -tags fdb).", []string{"embedded", "fdb"})
	_ = RegisterString("fdb", "cluster_file", "",
		"FoundationDB cluster file (backend fdb); empty uses FoundationDB's default lookup.", nil)
	_ = RegisterString("fdb", "tenant", "",
		"FoundationDB tenant the node's keys live in (backend fdb): a key space of its own on a shared cluster, which must allow tenants and hold it (fdbcli: configure tenant_mode=optional_experimental, then tenant create NAME); empty uses the whole database.", nil)
	_ = RegisterString("fdb", "tls_certificate_file", "",
		"This node's certificate (PEM) for FoundationDB's mutual TLS (backend fdb, a cluster file with :tls addresses); the cluster's processes check it against their CA. Empty: FDB_TLS_CERTIFICATE_FILE.", nil)
	_ = RegisterString("fdb", "tls_key_file", "",
		"The private key (PEM, unencrypted) of tls_certificate_file. Empty: FDB_TLS_KEY_FILE.", nil)
	_ = RegisterString("fdb", "tls_ca_file", "",
		"CA certificates (PEM) the cluster's certificates must chain to. Empty: FDB_TLS_CA_FILE.", nil)
	_ = RegisterString("fdb", "tls_verify_peers", "",
		"FoundationDB's rules for the cluster's certificates (as fdbserver's --tls-verify-peers). Empty: FDB_TLS_VERIFY_PEERS, else FoundationDB's default Check.Valid=1 (a valid chain to tls_ca_file).", nil)
	_ = RegisterInt("fdb", "tls_refresh_sec", TLSRefreshSecDefault, 1, 86400,
		"How often FoundationDB's client rereads the TLS files: a certificate renewed on disk is used for new connections within this time, without a restart.")
	_ = RegisterString("fdb", "data_dir", "./data",
		"Directory of the embedded store (backend embedded).", nil)
	_ = RegisterBool("fdb", "in_memory", false,
		"Keep the embedded store in memory only: nothing survives a restart.")
	_ = RegisterString("log", "level", "info",
		"Least severity logged.", []string{"debug", "info", "warn", "error"}, Live(ApplyAll))
	_ = RegisterString("log", "format", "console",
		"Log format: human-readable console lines or JSON objects.", []string{"console", "json"})
	_ = RegisterBool("log", "requests", true,
		"Log one line per HTTP request (method, path, status, user, remote, bytes, duration_ms; never credentials).")
	keyNodeName = RegisterString("node", "name", "",
		"Name of this node in _scheduler, _active_tasks and _membership output and in /_node/{name} paths; empty means fdbrep@<hostname>. Must be unique in a cluster, must not start with _ nor contain /.", nil)
	keyRoles = RegisterList("node", "roles", []string{RoleAPIFrontend, RoleReplication},
		"Roles this node runs: api_frontend serves the HTTP API, replication runs replication jobs. A replication-only node opens no listener except health_address.",
		[]string{RoleAPIFrontend, RoleReplication})
	keyHealthAddress = RegisterString("node", "health_address", "",
		"Optional loopback address (host:port) serving GET /_up, /_node/_local/_stats and /_node/_local/_prometheus; meant for replication-only nodes. Must be a loopback address.", nil)
)

// sectionOrder is the order of the fixed sections in Keys and
// docs/CONFIG.md; a key registers in one of them.
var sectionOrder = []string{"couchdb", "chttpd", "chttpd_auth", "chttpd_auth_lockout", "jwt_auth", "ssl", "fdb", "log", "node", "replicator", "couch_jobs"}

// reg is the registry: filled while packages initialize, frozen when first
// read (Keys, Load, a getter), after which registering is a programming
// error.
var reg struct {
	mu     sync.Mutex
	keys   []*Key
	checks []func(*Config) error
	frozen bool

	once sync.Once
	r    registry
}

// registry is the frozen registry's indexes.
type registry struct {
	ordered  []*Key
	index    map[string]*Key
	sections map[string]bool   // every section fdbrep reads, fixed and free-form
	aliases  map[string]string // "section/key" -> the other name
}

// register adds k, adjusted by opts, to the registry. A declaration that
// contradicts itself (a default out of its own range, no doc, a section
// not in sectionOrder, a name taken, an alias not registered before it)
// panics: it is a programming error the first test run catches.
func register(k Key, opts []Option) *Key {
	for _, o := range opts {
		o(&k)
	}
	where := fmt.Sprintf("config: [%s] %s", k.Section, k.Name)
	switch {
	case !slices.Contains(sectionOrder, k.Section):
		panic(where + ": not a section of sectionOrder")
	case k.Doc == "":
		panic(where + ": no doc")
	}
	if err := k.check(k.Default); err != nil {
		panic(fmt.Sprintf("%s: default %q: %v", where, k.Default, err))
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.frozen {
		panic(where + ": registered after the registry was first used")
	}
	aliased := k.Alias == ""
	for _, o := range reg.keys {
		if o.Section == k.Section && o.Name == k.Name {
			panic(where + ": registered twice")
		}
		aliased = aliased || o.Section == k.Section && o.Name == k.Alias && o.per != 0 && k.per != 0
	}
	if !aliased {
		panic(where + ": alias " + k.Alias + " is not a duration registered before it")
	}
	p := &k
	reg.keys = append(reg.keys, p)
	return p
}

// frozen returns the registry, freezing it at the first call.
func frozen() *registry {
	reg.once.Do(func() {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		reg.frozen = true
		r := &reg.r
		r.index = map[string]*Key{}
		r.aliases = map[string]string{}
		r.sections = map[string]bool{SectionAdmins: true, SectionUsers: true, SectionUserRoles: true, SectionShares: true, SectionJWTKeys: true}
		for _, section := range sectionOrder {
			for _, k := range reg.keys {
				if k.Section != section {
					continue
				}
				r.ordered = append(r.ordered, k)
				r.index[k.Section+"/"+k.Name] = k
				r.sections[k.Section] = true
				if k.Alias != "" {
					r.aliases[k.Section+"/"+k.Name] = k.Alias
					r.aliases[k.Section+"/"+k.Alias] = k.Name
					r.index[k.Section+"/"+k.Alias].Alias = k.Name
				}
			}
		}
	})
	return &reg.r
}

// Keys returns every registered key, by section in documentation order
// and, within a section, in the order the packages registered them.
func Keys() []Key {
	out := make([]Key, 0, len(frozen().ordered))
	for _, k := range frozen().ordered {
		out = append(out, *k)
	}
	return out
}

func lookup(section, name string) *Key {
	return frozen().index[section+"/"+name]
}

func knownSection(section string) bool { return frozen().sections[section] }

// checks returns the rules between keys (RegisterCheck).
func checks() []func(*Config) error {
	frozen()
	return reg.checks
}

func freeForm(section string) bool {
	switch section {
	case SectionAdmins, SectionUsers, SectionUserRoles, SectionShares, SectionJWTKeys:
		return true
	}
	return false
}

// EnvPrefix starts every environment override.
const EnvPrefix = "FDBREP_"

// EnvName is the environment variable that overrides section/key:
// FDBREP_<SECTION>__<KEY>, upper case, with the dots of section names
// turned into single underscores (FDBREP_REPLICATOR__MAX_JOBS,
// FDBREP_REPLICATOR_SHARES___REPLICATOR, FDBREP_ADMINS__ADMIN).
func EnvName(section, key string) string {
	return EnvPrefix + envSection(section) + "__" + strings.ToUpper(key)
}

func envSection(section string) string {
	return strings.ToUpper(strings.ReplaceAll(section, ".", "_"))
}
