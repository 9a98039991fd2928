package config

import (
	"fmt"
	"strings"
)

// Runtime changes: the _config API of api_frontend nodes stores settings
// in layers over a node's start-up configuration (see package cluster).
// This file holds what the layers need from the registry: which keys may
// change at run time (CheckRuntimeKey), how a layer merges (With), and the
// effective values a node shows (Get, All).

// Layer is a set of values laid over a configuration by With.
type Layer struct {
	// Source names where the values come from, for Source and errors
	// ("_config (cluster)"); "" keeps the source of the value replaced.
	Source string
	// Values maps section -> key -> value.
	Values map[string]map[string]string
}

// Normalize returns section and key as Load stores them: the section in
// lower case, and the key too except in [admins], [users] and
// [user_roles], whose keys are user names, and [jwt_keys], whose kids
// are compared as they are written.
func Normalize(section, key string) (string, string) {
	section = strings.ToLower(strings.TrimSpace(section))
	key = strings.TrimSpace(key)
	if !freeForm(section) || section == SectionShares {
		key = strings.ToLower(key)
	}
	return section, key
}

// SectionApply tells whether keys of a section may change at run time: a
// free-form section's apply ([jwt_keys]: ApplyRestart), or ApplyRestart
// with ok false for other sections (whose keys have their own, see
// CheckRuntimeKey).
func SectionApply(section string) (Apply, bool) {
	switch section {
	case SectionAdmins, SectionUsers, SectionUserRoles:
		return ApplyFrontend, true
	case SectionShares:
		return ApplyAll, true
	case SectionJWTKeys:
		return ApplyRestart, true
	}
	return ApplyRestart, false
}

// CheckRuntimeKey tells whether section/key (normalized) may be changed at
// run time and which nodes apply it. The error wraps ErrUnknownKey for a
// key that is neither fdbrep's nor CouchDB's (with a suggestion),
// ErrNotUsed for CouchDB's keys fdbrep ignores, ErrRestartOnly for keys
// read at start-up only.
func CheckRuntimeKey(section, key string) (Apply, error) {
	restartOnly := func() (Apply, error) {
		return ApplyRestart, fmt.Errorf("%w: [%s] %s cannot change while the node runs: set it in an ini file, the environment or a flag, and restart",
			ErrRestartOnly, section, key)
	}
	if a, ok := SectionApply(section); ok {
		switch {
		case a == ApplyRestart:
			return restartOnly()
		case key == "":
			return a, fmt.Errorf("%w: [%s]: empty name", ErrInvalidValue, section)
		}
		return a, nil
	}
	if k := lookup(section, key); k != nil {
		if k.Apply == ApplyRestart {
			return restartOnly()
		}
		return k.Apply, nil
	}
	if n := notImplementedKey(section, key); n != nil {
		return ApplyRestart, fmt.Errorf("%w: [%s] %s is a CouchDB setting fdbrep does not implement: %s", ErrNotUsed, section, key, n.Reason)
	}
	if couchDBSections[section] || couchDBKeys[section][key] {
		return ApplyRestart, fmt.Errorf("%w: [%s] %s is a CouchDB setting fdbrep does not use", ErrNotUsed, section, key)
	}
	if !knownSection(section) {
		return ApplyRestart, fmt.Errorf("%w: section [%s] is neither fdbrep's nor CouchDB's%s", ErrUnknownKey, section, suggest(section, ""))
	}
	return ApplyRestart, fmt.Errorf("%w: [%s] %s is neither fdbrep's nor CouchDB's%s", ErrUnknownKey, section, key, suggest(section, key))
}

// IsSecret tells whether the value of section/key must never be shown:
// secret keys, the password hashes of [admins] and [users], and the HMAC
// keys of [jwt_keys] (its public keys are shown).
func IsSecret(section, key string) bool {
	if section == SectionAdmins || section == SectionUsers || section == SectionJWTKeys && strings.HasPrefix(key, "hmac:") {
		return true
	}
	k := lookup(section, key)
	return k != nil && k.Secret
}

// With returns the configuration with layers laid over it, in order (later
// layers win), validated as Load validates files. A value for one name of
// an aliased setting ([replicator] interval and interval_sec) hides the
// other name's value from the layers below; one layer setting both is an
// error.
func (c *Config) With(layers ...Layer) (*Config, error) {
	n := &Config{values: map[string]map[string]string{}, sources: make(map[string]string, len(c.sources)),
		warnings: append([]string(nil), c.warnings...)}
	for s, kvs := range c.values {
		n.values[s] = make(map[string]string, len(kvs))
		for k, v := range kvs {
			n.values[s][k] = v
		}
	}
	for k, v := range c.sources {
		n.sources[k] = v
	}
	for _, l := range layers {
		for s, kvs := range l.Values {
			for k, v := range kvs {
				s, k := Normalize(s, k)
				if other, ok := frozen().aliases[s+"/"+k]; ok {
					if _, both := kvs[other]; both {
						return nil, fmt.Errorf("%w: [%s] %s and %s are both set (%s): keep one", ErrInvalidValue, s, k, other, l.Source)
					}
					delete(n.values[s], other)
					delete(n.sources, s+"/"+other)
				}
				src := l.Source
				if src == "" {
					src = n.Source(s, k)
				}
				n.set(s, k, v, src)
			}
		}
	}
	if err := n.validate(); err != nil {
		return nil, err
	}
	return n, nil
}

// Get returns the value in effect for section/key and whether there is
// one: a free-form section's entry, or a registered key's value or
// default. Of [replicator] interval and interval_sec, a name is hidden
// while the other one is set. CouchDB keys fdbrep ignores have none.
func (c *Config) Get(section, key string) (string, bool) {
	if freeForm(section) {
		v, ok := c.values[section][key]
		return v, ok
	}
	k := lookup(section, key)
	if k == nil {
		return "", false
	}
	if v, ok := c.values[section][key]; ok {
		return v, true
	}
	if other, ok := frozen().aliases[section+"/"+key]; ok {
		if _, set := c.values[section][other]; set {
			return "", false
		}
	}
	return k.Default, true
}

// All returns every value in effect, by section (see Get): each
// registered key and each entry of the free-form sections.
func (c *Config) All() map[string]map[string]string {
	out := map[string]map[string]string{}
	add := func(section, key string) {
		if v, ok := c.Get(section, key); ok {
			if out[section] == nil {
				out[section] = map[string]string{}
			}
			out[section][key] = v
		}
	}
	for _, k := range frozen().ordered {
		add(k.Section, k.Name)
	}
	for _, s := range []string{SectionAdmins, SectionUsers, SectionUserRoles, SectionShares, SectionJWTKeys} {
		for _, k := range c.keyNames(s) {
			add(s, k)
		}
	}
	return out
}

// Values returns a copy of the values set (by files, the environment,
// flags or layers; defaults not included), by section.
func (c *Config) Values() map[string]map[string]string {
	out := make(map[string]map[string]string, len(c.values))
	for s := range c.values {
		out[s] = c.Section(s)
	}
	return out
}

// Alias returns the other name of an aliased setting ([replicator]
// interval and interval_sec, health_threshold and health_threshold_sec), which one layer must not set together with
// section/key.
func Alias(section, key string) (string, bool) {
	other, ok := frozen().aliases[section+"/"+key]
	return other, ok
}

// CheckValue validates value for the registered key [section] key on its
// own (its kind, range and words), whatever other layers hold: a value
// that the merge of a node's layers would hide is refused as well. src
// names where it comes from in the error, as a merge names it. A key that
// is not registered (a section of free keys) passes.
func CheckValue(section, key, value, src string) error {
	k := lookup(section, key)
	if k == nil {
		return nil
	}
	if err := k.check(value); err != nil {
		if k.Secret {
			return fmt.Errorf("%w: [%s] %s (%s): %v", ErrInvalidValue, section, key, src, err)
		}
		return fmt.Errorf("%w: [%s] %s = %q (%s): %v", ErrInvalidValue, section, key, value, src, err)
	}
	return nil
}
