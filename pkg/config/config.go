package config

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/ini.v1"
)

// Config is a loaded, validated configuration: the merge of the files given
// to Load (later files win), then the environment overrides. It is
// immutable and safe for concurrent use.
type Config struct {
	values   map[string]map[string]string // section -> key -> raw value
	sources  map[string]string            // "section/key" -> file or env var
	warnings []string
}

// Load reads the ini files in order (later files override earlier ones,
// key by key), applies overrides from environ (a list of NAME=value, as
// os.Environ returns; nil means none) and validates every value. A file
// that does not exist is an error.
//
// Validation covers every registered key (see Keys) (type, range, allowed words),
// [replicator.shares] values (integers 1..1000), [user_roles] values, and
// the node's roles. CouchDB's own sections and keys that fdbrep does not
// use are ignored and named by Warnings, so a CouchDB local.ini works as
// it is; a section or key that is neither fdbrep's nor CouchDB's is an
// error wrapping ErrUnknownKey that suggests the closest known key, since
// a typo would otherwise go unnoticed. So is an environment variable that
// looks like an override (FDBREP_<SECTION>__<KEY>) but names an unknown
// section.
func Load(files []string, environ []string) (*Config, error) {
	return LoadWith(files, environ, nil)
}

// Override is a value given to LoadWith beside the files and the
// environment: a command-line flag, say. Source names it in errors and
// in Source: "flag -roles" is said as the flag ("-roles \"x\" ([node]
// roles): …").
type Override struct {
	Section, Key, Value, Source string
}

// LoadWith is Load with overrides applied after the environment's.
func LoadWith(files []string, environ []string, overrides []Override) (*Config, error) {
	c := &Config{values: map[string]map[string]string{}, sources: map[string]string{}}
	for _, path := range files {
		if err := c.loadFile(path); err != nil {
			return nil, err
		}
	}
	if err := c.loadEnv(environ); err != nil {
		return nil, err
	}
	for _, o := range overrides {
		c.set(o.Section, o.Key, o.Value, o.Source)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Default returns the configuration with no files and no overrides.
func Default() *Config {
	c, err := Load(nil, nil)
	if err != nil {
		panic(err) // the registry's defaults are valid; tests check it
	}
	return c
}

// FromMap builds a configuration from section -> key -> value, for tests
// and embedding; it is validated like Load's.
func FromMap(m map[string]map[string]string) (*Config, error) {
	c := &Config{values: map[string]map[string]string{}, sources: map[string]string{}}
	for s, kvs := range m {
		for k, v := range kvs {
			c.set(s, k, v, "map")
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) set(section, key, value, source string) {
	section, key = Normalize(section, key)
	m := c.values[section]
	if m == nil {
		m = map[string]string{}
		c.values[section] = m
	}
	m[key] = strings.TrimSpace(value)
	c.sources[section+"/"+key] = source
}

func (c *Config) loadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrFile, path, err)
	}
	f, err := ini.LoadSources(ini.LoadOptions{
		// CouchDB ini files use ';' comments and may repeat keys (last
		// wins); values are taken verbatim (no quote or escape handling
		// surprises in password hashes). Only '=' separates a key from
		// its value: [jwt_keys] keys hold ':' (hmac:_default).
		IgnoreInlineComment:       true,
		SpaceBeforeInlineComment:  false,
		AllowShadows:              false,
		UnescapeValueDoubleQuotes: false,
		PreserveSurroundedQuote:   true,
		KeyValueDelimiters:        "=",
	}, quoteKeysWithEquals(data))
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrFile, path, err)
	}
	for _, sec := range f.Sections() {
		name := sec.Name()
		if name == ini.DefaultSection {
			if len(sec.Keys()) > 0 {
				c.warnings = append(c.warnings, fmt.Sprintf("%s: keys before the first [section] are ignored", path))
			}
			continue
		}
		for _, k := range sec.Keys() {
			c.set(name, k.Name(), k.Value(), path)
		}
	}
	return nil
}

// quoteKeysWithEquals quotes, for the ini parser, the key of each line
// written "key= = value": as in CouchDB 3.3+, a key holding '=' (a JWT
// kid such as "rsa:h2k=") is read when " = " follows it, the key being
// what stands before the first " = ".
func quoteKeysWithEquals(data []byte) []byte {
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		t := bytes.TrimLeft(line, " \t")
		if len(t) == 0 || t[0] == ';' || t[0] == '#' || t[0] == '[' {
			continue
		}
		sep := bytes.Index(t, []byte(" = "))
		if sep > 0 && bytes.IndexByte(t[:sep], '=') >= 0 && bytes.IndexByte(t[:sep], '`') < 0 {
			lines[i] = slices.Concat([]byte("`"), t[:sep], []byte("`"), t[sep:])
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

func (c *Config) loadEnv(environ []string) error {
	bySection := map[string]string{}
	for s := range frozen().sections {
		bySection[envSection(s)] = s
	}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		rest := strings.TrimPrefix(name, EnvPrefix)
		secPart, keyPart, ok := strings.Cut(rest, "__")
		if !ok {
			continue // FDBREP_BIND and friends belong to the command line
		}
		section, known := bySection[secPart]
		if !known || keyPart == "" {
			return fmt.Errorf("%w: environment variable %s names no known section (want %s<SECTION>__<KEY>)", ErrUnknownKey, name, EnvPrefix)
		}
		c.set(section, strings.ToLower(keyPart), value, "env "+name)
	}
	return nil
}

func (c *Config) validate() error {
	// Fixed keys: parse every value that is set.
	for _, section := range c.sectionNames() {
		if !knownSection(section) {
			if err := c.checkUnknown(section, ""); err != nil {
				return err
			}
			continue
		}
		if freeForm(section) {
			continue
		}
		for _, key := range c.keyNames(section) {
			k := lookup(section, key)
			if k == nil {
				if err := c.checkUnknown(section, key); err != nil {
					return err
				}
				continue
			}
			if err := k.check(c.values[section][key]); err != nil {
				return c.wrap(k, err)
			}
		}
	}
	for _, db := range c.keyNames(SectionShares) {
		v := c.values[SectionShares][db]
		n, err := strconv.Atoi(v)
		if err != nil || n < SharesMin || n > SharesMax {
			return fmt.Errorf("%w: [%s] %s = %q (%s): want an integer from %d to %d", ErrInvalidValue, SectionShares, db, v, c.sources[SectionShares+"/"+db], SharesMin, SharesMax)
		}
		if db != "_replicator" && !strings.HasSuffix(db, "/_replicator") {
			return fmt.Errorf("%w: [%s] %s (%s): not a replicator database (want _replicator or a name ending in /_replicator)", ErrInvalidValue, SectionShares, db, c.sources[SectionShares+"/"+db])
		}
	}
	for _, section := range []string{SectionAdmins, SectionUsers} {
		for _, name := range c.keyNames(section) {
			if name == "" || strings.ContainsAny(name, ":") {
				return fmt.Errorf("%w: [%s] user name %q: must be non-empty and contain no ':'", ErrInvalidValue, section, name)
			}
			if c.values[section][name] == "" {
				return fmt.Errorf("%w: [%s] %s: empty password", ErrInvalidValue, section, name)
			}
		}
	}
	for _, k := range frozen().ordered {
		if k.Alias == "" || k.Name > k.Alias {
			continue // each pair once
		}
		_, a := c.values[k.Section][k.Name]
		if _, b := c.values[k.Section][k.Alias]; a && b {
			return fmt.Errorf("%w: [%s] %s (%s) and %s (%s) are both set: keep one", ErrInvalidValue,
				k.Section, k.Name, c.sources[k.Section+"/"+k.Name], k.Alias, c.sources[k.Section+"/"+k.Alias])
		}
	}
	if name := keyNodeName.Get(c); strings.HasPrefix(name, "_") || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%w: [node] name = %q (%s): must not start with '_' (names such as _local and _cluster are the API's) nor contain '/'",
			ErrInvalidValue, name, c.Source("node", "name"))
	}
	if len(c.Roles()) == 0 {
		return fmt.Errorf("%w: [node] roles: at least one role is required (%s or %s)", ErrInvalidValue, RoleAPIFrontend, RoleReplication)
	}
	for _, check := range checks() {
		if err := check(c); err != nil {
			return err
		}
	}
	if addr := keyHealthAddress.Get(c); addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("%w: [node] health_address = %q: %v", ErrInvalidValue, addr, err)
		}
		if _, err := strconv.Atoi(port); err != nil {
			return fmt.Errorf("%w: [node] health_address = %q: bad port", ErrInvalidValue, addr)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%w: [node] health_address = %q: must be a loopback address (127.0.0.1, ::1 or localhost)", ErrInvalidValue, addr)
		}
	}
	return nil
}

func (c *Config) wrap(k *Key, err error) error {
	src := c.sources[k.Section+"/"+k.Name]
	if flag, ok := strings.CutPrefix(src, "flag "); ok && !k.Secret {
		return fmt.Errorf("%w: %s %q ([%s] %s): %v", ErrInvalidValue, flag, c.values[k.Section][k.Name], k.Section, k.Name, err)
	}
	if k.Secret {
		return fmt.Errorf("%w: [%s] %s (%s): %v", ErrInvalidValue, k.Section, k.Name, src, err)
	}
	return fmt.Errorf("%w: [%s] %s = %q (%s): %v", ErrInvalidValue, k.Section, k.Name, c.values[k.Section][k.Name], src, err)
}

func (k *Key) check(v string) error {
	switch k.Kind {
	case KindInt:
		if k.Infinity && v == InfinityWord {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || k.HasRange && (float64(n) < k.Min || float64(n) > k.max()) {
			return fmt.Errorf("want %s", k.wanted(err == nil && float64(n) > k.max()))
		}
	case KindFloat:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || k.HasRange && (f < k.Min || f > k.max()) {
			return fmt.Errorf("want %s", k.wanted(err == nil && f > k.max()))
		}
	case KindBool:
		if _, err := parseBool(v); err != nil {
			return err
		}
	case KindString:
		if len(k.OneOf) > 0 && !contains(k.OneOf, v) {
			return fmt.Errorf("want one of %s", strings.Join(k.OneOf, ", "))
		}
	case KindList:
		for _, item := range splitList(v) {
			if len(k.OneOf) > 0 && !contains(k.OneOf, item) {
				return fmt.Errorf("%q is not one of %s", item, strings.Join(k.OneOf, ", "))
			}
		}
	}
	return nil
}

// num prints a bound as it is written.
func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// wanted says what a KindInt or KindFloat key takes: "an integer of at
// least 1000 (milliseconds)", "an integer from 0 to 65535", "a number from
// 0.000001 to 1". A key without a maximum of its own names the one of its
// unit (see Key.max) only to a value over it (above).
func (k *Key) wanted(above bool) string {
	what := "a number"
	if k.Kind == KindInt {
		what = "an integer"
	}
	switch {
	case !k.HasRange:
	case k.Max >= maxInt && !above:
		what += " of at least " + num(k.Min)
	default:
		what += " from " + num(k.Min) + " to " + num(k.max())
	}
	if u := k.unit(); u != "" {
		what += " (" + u + ")"
	}
	if k.Infinity {
		what += ", or " + InfinityWord
	}
	return what
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("want true or false")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func (c *Config) sectionNames() []string {
	out := make([]string, 0, len(c.values))
	for s := range c.values {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func (c *Config) keyNames(section string) []string {
	out := make([]string, 0, len(c.values[section]))
	for k := range c.values[section] {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Warnings lists what Load ignored: CouchDB sections and keys fdbrep does
// not use, keys before the first section. Log them at startup.
func (c *Config) Warnings() []string { return append([]string(nil), c.warnings...) }

// Source tells where section/key was set: a file path, "env NAME", or
// "default".
func (c *Config) Source(section, key string) string {
	if s, ok := c.sources[section+"/"+key]; ok {
		return s
	}
	return "default"
}

func (c *Config) raw(section, key string) string {
	k := lookup(section, key)
	if k == nil {
		panic(fmt.Errorf("%w: [%s] %s is not a registered key", ErrUnknownKey, section, key))
	}
	if v, ok := c.values[section][key]; ok {
		return v
	}
	return k.Default
}

// String returns a registered string key (validated by Load). It panics for
// a key not registered: that is a programming error.
func (c *Config) String(section, key string) string { return c.raw(section, key) }

// Int returns a registered integer key (0 for "infinity", see
// OrInfinity).
func (c *Config) Int(section, key string) int64 {
	n, _ := strconv.ParseInt(c.raw(section, key), 10, 64)
	return n
}

// Bool returns a registered boolean key.
func (c *Config) Bool(section, key string) bool {
	b, _ := parseBool(c.raw(section, key))
	return b
}

// Float returns a registered float key.
func (c *Config) Float(section, key string) float64 {
	f, _ := strconv.ParseFloat(c.raw(section, key), 64)
	return f
}

// List returns a registered list key, split at commas.
func (c *Config) List(section, key string) []string { return splitList(c.raw(section, key)) }

// Section returns a copy of the raw values set in a section (defaults not
// included), for free-form sections and for callers with their own keys.
func (c *Config) Section(section string) map[string]string {
	out := make(map[string]string, len(c.values[section]))
	for k, v := range c.values[section] {
		out[k] = v
	}
	return out
}

// Roles returns the node's roles, deduplicated, in configuration order.
func (c *Config) Roles() []string {
	var out []string
	for _, r := range keyRoles.Get(c) {
		if !contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// HasRole tells whether the node runs role.
func (c *Config) HasRole(role string) bool { return contains(c.Roles(), role) }

// NodeName returns [node] name, or fdbrep@<hostname> when it is empty.
func (c *Config) NodeName() string {
	if n := keyNodeName.Get(c); n != "" {
		return n
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return "fdbrep@" + host
}

// BindAddress returns [chttpd] bind_address and port as host:port.
func (c *Config) BindAddress() string {
	return net.JoinHostPort(keyBindAddress.Get(c), strconv.FormatInt(keyPort.Get(c), 10))
}

// Shares returns the [replicator.shares] of db (SharesDefault when unset).
func (c *Config) Shares(db string) int {
	if v, ok := c.values[SectionShares][db]; ok {
		n, _ := strconv.Atoi(v)
		return n
	}
	return SharesDefault
}

// AllShares returns every [replicator.shares] entry.
func (c *Config) AllShares() map[string]int {
	out := map[string]int{}
	for db, v := range c.values[SectionShares] {
		n, _ := strconv.Atoi(v)
		out[db] = n
	}
	return out
}

// Admins returns [admins]: name -> password hash or plaintext, as written.
// Package frontend hashes plaintext entries when it loads them.
func (c *Config) Admins() map[string]string { return c.Section(SectionAdmins) }

// Users returns [users] (an fdbrep extension: non-admin accounts, which
// CouchDB keeps in its _users database): name -> password hash or
// plaintext.
func (c *Config) Users() map[string]string { return c.Section(SectionUsers) }

// UserRoles returns the roles of a [users] account from [user_roles].
func (c *Config) UserRoles(name string) []string {
	return splitList(c.values[SectionUserRoles][name])
}
