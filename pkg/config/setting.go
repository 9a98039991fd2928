package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Settings: a key declared once, by the package that owns the value it
// sets. The package registers it at initialization with its default taken
// from its Go constant, its range, its live-apply rule and its doc
// (RegisterInt, RegisterDuration, ...), and reads it through the typed
// setting the registration returns; Load validates values against that
// declaration and docs/CONFIG.md is generated from it. This is how
// CockroachDB's cluster settings are declared.

// Forever is the upper bound of a RegisterDuration key without a maximum of
// its own: the most a time.Duration holds.
const Forever = time.Duration(math.MaxInt64)

// Unbounded is the upper bound of a RegisterInt key without a maximum of
// its own.
const Unbounded = maxInt

// Option adjusts a key being registered.
type Option func(*Key)

// Live makes a key changeable at run time, applied by the nodes a names.
func Live(a Apply) Option { return func(k *Key) { k.Apply = a } }

// InUnit names what an integer key counts ("bytes"), where its name does
// not say.
func InUnit(unit string) Option { return func(k *Key) { k.Unit = unit } }

// AliasOf makes a key the other name of an already registered one: Load
// refuses both set, a layer setting one hides the other (see With), and
// either's setting reads the one set.
func AliasOf(other string) Option { return func(k *Key) { k.Alias = other } }

// InfinityWord is CouchDB's value for no limit (request_timeout,
// max_document_id_length).
const InfinityWord = "infinity"

// OrInfinity lets an integer or duration key also take CouchDB's word
// "infinity", no limit: its getter reads it as 0, and a default of 0 is
// written infinity.
func OrInfinity() Option {
	return func(k *Key) {
		k.Infinity = true
		if k.Default == "0" {
			k.Default = InfinityWord
		}
	}
}

// IntSetting is a registered integer key.
type IntSetting struct{ key *Key }

// RegisterInt declares an integer key with its default and inclusive
// range (max Unbounded for none).
func RegisterInt(section, name string, def, min, max int64, doc string, opts ...Option) IntSetting {
	k := register(Key{Section: section, Name: name, Kind: KindInt, Default: strconv.FormatInt(def, 10),
		Min: float64(min), Max: float64(max), HasRange: true, Doc: doc}, opts)
	return IntSetting{k}
}

// Get returns the setting's value in c.
func (s IntSetting) Get(c *Config) int64 { return c.Int(s.key.Section, s.key.Name) }

// Name is the key's name.
func (s IntSetting) Name() string { return s.key.Name }

// DurationSetting is a registered key of a whole number of a time unit.
type DurationSetting struct{ key *Key }

// RegisterDuration declares a key counting unit (time.Second or
// time.Millisecond) with its default and inclusive range (max Forever for
// none; a value still fits a time.Duration). The default and the bounds
// must be whole units.
func RegisterDuration(section, name string, unit, def, min, max time.Duration, doc string, opts ...Option) DurationSetting {
	var words string
	switch unit {
	case time.Second:
		words = "seconds"
	case time.Millisecond:
		words = "milliseconds"
	default:
		panic(fmt.Sprintf("config: [%s] %s: unit %v is not a second or a millisecond", section, name, unit))
	}
	for _, d := range []time.Duration{def, min} {
		if d%unit != 0 {
			panic(fmt.Sprintf("config: [%s] %s: %v is not a whole number of %s", section, name, d, words))
		}
	}
	hi := float64(maxInt)
	if max != Forever {
		hi = float64(max / unit)
	}
	k := register(Key{Section: section, Name: name, Kind: KindInt, Default: strconv.FormatInt(int64(def/unit), 10),
		Min: float64(min / unit), Max: hi, HasRange: true, Unit: words, per: unit, Doc: doc}, opts)
	return DurationSetting{k}
}

// Get returns the setting's value in c: its alias's when that is the one
// set.
func (s DurationSetting) Get(c *Config) time.Duration { return c.Duration(s.key.Section, s.key.Name) }

// Name is the key's name.
func (s DurationSetting) Name() string { return s.key.Name }

// FloatSetting is a registered number key.
type FloatSetting struct{ key *Key }

// RegisterFloat declares a number key with its default and inclusive
// range.
func RegisterFloat(section, name string, def, min, max float64, doc string, opts ...Option) FloatSetting {
	k := register(Key{Section: section, Name: name, Kind: KindFloat, Default: num(def), Min: min, Max: max, HasRange: true, Doc: doc}, opts)
	return FloatSetting{k}
}

// Get returns the setting's value in c.
func (s FloatSetting) Get(c *Config) float64 { return c.Float(s.key.Section, s.key.Name) }

// BoolSetting is a registered boolean key.
type BoolSetting struct{ key *Key }

// RegisterBool declares a boolean key with its default.
func RegisterBool(section, name string, def bool, doc string, opts ...Option) BoolSetting {
	k := register(Key{Section: section, Name: name, Kind: KindBool, Default: strconv.FormatBool(def), Doc: doc}, opts)
	return BoolSetting{k}
}

// Get returns the setting's value in c.
func (s BoolSetting) Get(c *Config) bool { return c.Bool(s.key.Section, s.key.Name) }

// StringSetting is a registered string key.
type StringSetting struct{ key *Key }

// RegisterString declares a string key with its default, and the words
// it may take (none: any string).
func RegisterString(section, name, def, doc string, oneOf []string, opts ...Option) StringSetting {
	k := register(Key{Section: section, Name: name, Kind: KindString, Default: def, OneOf: oneOf, Doc: doc}, opts)
	return StringSetting{k}
}

// Get returns the setting's value in c.
func (s StringSetting) Get(c *Config) string { return c.String(s.key.Section, s.key.Name) }

// Duration returns a registered key of a time unit (RegisterDuration) as a
// time.Duration: its alias's value when that is the one set.
func (c *Config) Duration(section, key string) time.Duration {
	k := lookup(section, key)
	if k == nil || k.per == 0 {
		panic(fmt.Errorf("%w: [%s] %s is not a registered duration", ErrUnknownKey, section, key))
	}
	if k.Alias != "" {
		if _, set := c.values[section][k.Alias]; set {
			if _, own := c.values[section][key]; !own {
				k = lookup(section, k.Alias)
				key = k.Name
			}
		}
	}
	return time.Duration(c.Int(section, key)) * k.per
}

// RegisterCheck adds a rule between registered keys that Load, FromMap
// and With apply after each value passed its own checks; its error should
// wrap ErrInvalidValue and name the keys and their sources.
func RegisterCheck(check func(*Config) error) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.frozen {
		panic("config: RegisterCheck after the registry was first used")
	}
	reg.checks = append(reg.checks, check)
}

// Secret keeps a key's value out of errors, logs and the _config API.
func Secret() Option { return func(k *Key) { k.Secret = true } }

// ListSetting is a registered list key (comma-separated words).
type ListSetting struct{ key *Key }

// RegisterList declares a list key with its default, and the words its
// items may be (none: any).
func RegisterList(section, name string, def []string, doc string, oneOf []string, opts ...Option) ListSetting {
	k := register(Key{Section: section, Name: name, Kind: KindList, Default: strings.Join(def, ","), OneOf: oneOf, Doc: doc}, opts)
	return ListSetting{k}
}

// Get returns the setting's items in c.
func (s ListSetting) Get(c *Config) []string { return c.List(s.key.Section, s.key.Name) }

// Name is the key's name.
func (s ListSetting) Name() string { return s.key.Name }
