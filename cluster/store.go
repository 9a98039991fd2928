package cluster

import (
	"context"
	"fmt"
	"maps"

	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// SubspaceDefault holds the package's keys when no subspace is given.
var SubspaceDefault = subspace.Sub("fdbrep_cluster")

// ScopeCluster names the cluster layer of runtime settings, which every
// node applies (/_node/_cluster/_config). Node names never start with "_".
const ScopeCluster = "_cluster"

// Bounds of the runtime settings, which keep every transaction that reads
// a node's layers under 2 × SettingsMax × (ValueMaxBytes + key) bytes.
const (
	// SettingsMax is the most settings one layer holds.
	SettingsMax = 256
	// ValueMaxBytes bounds a setting's value, and its section and key.
	ValueMaxBytes = 1024
)

// Key prefixes under the subspace.
const (
	keySettings  = 1
	keyVersion   = 2
	keyMembers   = 3
	keyPublished = 4
)

// Settings are one layer's values: section -> key -> value.
type Settings map[string]map[string]string

// Clone returns a deep copy of s.
func (s Settings) Clone() Settings {
	out := make(Settings, len(s))
	for sec, kvs := range s {
		out[sec] = maps.Clone(kvs)
	}
	return out
}

// Len is the number of settings in s.
func (s Settings) Len() int {
	n := 0
	for _, kvs := range s {
		n += len(kvs)
	}
	return n
}

// Get returns the value of section/key in s.
func (s Settings) Get(section, key string) (string, bool) {
	v, ok := s[section][key]
	return v, ok
}

// Set sets section/key in s.
func (s Settings) Set(section, key, value string) {
	if s[section] == nil {
		s[section] = map[string]string{}
	}
	s[section][key] = value
}

// Delete removes section/key from s.
func (s Settings) Delete(section, key string) {
	delete(s[section], key)
	if len(s[section]) == 0 {
		delete(s, section)
	}
}

// Layers are the runtime settings that apply to one node.
type Layers struct {
	// Version counts the changes of every layer of the cluster; it only
	// grows.
	Version int64
	// Cluster is the layer every node applies; Node is the node's own,
	// which wins over it.
	Cluster, Node Settings
}

// Sources of the layers, as config.Config.Source reports them.
const (
	SourceCluster = "_config (_cluster)"
	sourceNode    = "_config (%s)"
)

// ConfigLayers returns l as layers for config.Config.With, cluster first.
func (l Layers) ConfigLayers(node string) []config.Layer {
	return []config.Layer{
		{Source: SourceCluster, Values: l.Cluster},
		{Source: fmt.Sprintf(sourceNode, node), Values: l.Node},
	}
}

// Merge lays l over base: the configuration in effect on node.
func (l Layers) Merge(base *config.Config, node string) (*config.Config, error) {
	return base.With(l.ConfigLayers(node)...)
}

// Store reads and writes the package's keys. It is safe for concurrent
// use.
type Store struct {
	db                           kv.Database
	settings, members, published subspace.Subspace
	version                      kv.Key
}

// NewStore returns the store of the keys under sub (nil: SubspaceDefault).
func NewStore(db kv.Database, sub subspace.Subspace) *Store {
	if sub == nil {
		sub = SubspaceDefault
	}
	return &Store{db: db, settings: sub.Sub(keySettings), members: sub.Sub(keyMembers),
		published: sub.Sub(keyPublished), version: sub.Pack(tuple.Tuple{keyVersion})}
}

func (s *Store) settingKey(scope, section, key string) kv.Key {
	return s.settings.Pack(tuple.Tuple{scope, section, key})
}

// readScope reads one layer (at most SettingsMax settings).
func (s *Store) readScope(tr kv.ReadTransaction, scope string) (Settings, error) {
	sub := s.settings.Sub(scope)
	rows, err := tr.GetRange(sub, kv.RangeOptions{Limit: SettingsMax, Mode: kv.StreamingModeWantAll}).GetSliceWithError()
	if err != nil {
		return nil, err
	}
	out := Settings{}
	for _, r := range rows {
		t, err := sub.Unpack(r.Key)
		if err != nil || len(t) != 2 {
			return nil, fmt.Errorf("%w: setting key %v", ErrCorrupt, r.Key)
		}
		sec, ok1 := t[0].(string)
		key, ok2 := t[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: setting key %v", ErrCorrupt, r.Key)
		}
		out.Set(sec, key, string(r.Value))
	}
	return out, nil
}

// readLayers reads the version and the layers of node ("" or ScopeCluster:
// the cluster layer only).
func (s *Store) readLayers(tr kv.ReadTransaction, node string) (Layers, error) {
	v, err := tr.Get(s.version).Get()
	if err != nil {
		return Layers{}, err
	}
	l := Layers{Version: kv.DecodeInt64(v), Node: Settings{}}
	if l.Cluster, err = s.readScope(tr, ScopeCluster); err != nil {
		return Layers{}, err
	}
	if node != "" && node != ScopeCluster {
		if l.Node, err = s.readScope(tr, node); err != nil {
			return Layers{}, err
		}
	}
	return l, nil
}

// Layers reads the runtime settings of node (ScopeCluster: the cluster
// layer only) in one transaction.
func (s *Store) Layers(ctx context.Context, node string) (Layers, error) {
	return kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) (Layers, error) { return s.readLayers(tr, node) })
}

// Update edits the runtime settings in one transaction: it reads the
// layers of node (ScopeCluster: the cluster layer only), lets edit change
// l.Cluster or l.Node (or refuse, with an error that aborts the
// transaction; edit must do no I/O and may run more than once), writes
// what changed and bumps the version when anything did. It returns the
// layers as edit left them.
func (s *Store) Update(ctx context.Context, node string, edit func(l *Layers) error) (Layers, error) {
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (Layers, error) {
		before, err := s.readLayers(tr, node)
		if err != nil {
			return Layers{}, err
		}
		after := Layers{Version: before.Version, Cluster: before.Cluster.Clone(), Node: before.Node.Clone()}
		if err := edit(&after); err != nil {
			return Layers{}, err
		}
		changed, err := s.write(tr, ScopeCluster, before.Cluster, after.Cluster)
		if err != nil {
			return Layers{}, err
		}
		if node != "" && node != ScopeCluster {
			c, err := s.write(tr, node, before.Node, after.Node)
			if err != nil {
				return Layers{}, err
			}
			changed = changed || c
		}
		if changed {
			tr.Add(s.version, kv.Int64(1))
			after.Version++
		}
		return after, nil
	})
}

// write stores the differences from before to after in scope.
func (s *Store) write(tr kv.Transaction, scope string, before, after Settings) (bool, error) {
	if after.Len() > SettingsMax {
		return false, fmt.Errorf("%w: %s would hold %d settings, at most %d", ErrTooMany, scope, after.Len(), SettingsMax)
	}
	changed := false
	for sec, kvs := range after {
		for k, v := range kvs {
			if len(sec) > ValueMaxBytes || len(k) > ValueMaxBytes || len(v) > ValueMaxBytes {
				return false, fmt.Errorf("%w: [%s] names and values are at most %d bytes", ErrTooLarge, sec, ValueMaxBytes)
			}
			if old, ok := before.Get(sec, k); !ok || old != v {
				tr.Set(s.settingKey(scope, sec, k), []byte(v))
				changed = true
			}
		}
	}
	for sec, kvs := range before {
		for k := range kvs {
			if _, ok := after.Get(sec, k); !ok {
				tr.Clear(s.settingKey(scope, sec, k))
				changed = true
			}
		}
	}
	return changed, nil
}

// Watch returns a future that fires once the version changes after the
// layers in l were read (l comes from the same transaction).
func (s *Store) watchVersion(tr kv.Transaction) kv.FutureNil { return tr.Watch(s.version) }
