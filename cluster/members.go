package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

// MembersMax bounds the member records one transaction reads: the
// membership list and the removal of dead nodes see at most this many
// nodes.
const MembersMax = 1000

// PublishedMaxBytes bounds a node's published start-up configuration;
// beyond it the accounts sections ([admins], [users], [user_roles]) are
// left out.
const PublishedMaxBytes = 64 << 10

// Redacted replaces secret values (config.IsSecret) wherever a
// configuration is shown or published.
const Redacted = "*****"

// Member is one node's membership record.
type Member struct {
	Name    string   `json:"-"`
	Roles   []string `json:"roles"`
	Version string   `json:"version"`
	// Started, Seen and Expires are Unix milliseconds of the node's clock:
	// its start, its last heartbeat, and when it counts as dead without a
	// further heartbeat.
	Started int64 `json:"started"`
	Seen    int64 `json:"seen"`
	Expires int64 `json:"expires"`
	// Load is what the node's replication scheduler last reported (nil
	// before it did, and on nodes without the replication role).
	Load *Load `json:"load,omitempty"`
}

// Load is a replication node's work as its scheduler reports it at each
// of its intervals (Node.SetLoad): the replication nodes balance their
// jobs with the loads of the others.
type Load struct {
	// Running is the number of jobs the node runs, those it is stopping
	// included (its workers, until they leave).
	Running int `json:"running"`
}

// HasRole tells whether m runs role.
func (m Member) HasRole(role string) bool { return slices.Contains(m.Roles, role) }

// Alive tells whether m has not expired at now.
func (m Member) Alive(now time.Time) bool { return m.Expires > now.UnixMilli() }

func (s *Store) memberKey(name string) kv.Key    { return s.members.Pack(tuple.Tuple{name}) }
func (s *Store) publishedKey(name string) kv.Key { return s.published.Pack(tuple.Tuple{name}) }

// readMembers reads every member record (at most MembersMax), by name.
func (s *Store) readMembers(tr kv.ReadTransaction) ([]Member, error) {
	rows, err := tr.GetRange(s.members, kv.RangeOptions{Limit: MembersMax, Mode: kv.StreamingModeWantAll}).GetSliceWithError()
	if err != nil {
		return nil, err
	}
	out := make([]Member, 0, len(rows))
	for _, r := range rows {
		t, err := s.members.Unpack(r.Key)
		if err != nil || len(t) != 1 {
			return nil, fmt.Errorf("%w: member key %v", ErrCorrupt, r.Key)
		}
		name, _ := t[0].(string)
		var m Member
		if err := json.Unmarshal(r.Value, &m); err != nil || name == "" {
			return nil, fmt.Errorf("%w: member %q: %v", ErrCorrupt, name, err)
		}
		m.Name = name
		out = append(out, m)
	}
	return out, nil
}

// Members returns the nodes alive at now, by name.
func (s *Store) Members(ctx context.Context, now time.Time) ([]Member, error) {
	all, err := s.Records(ctx)
	if err != nil {
		return nil, err
	}
	alive := all[:0]
	for _, m := range all {
		if m.Alive(now) {
			alive = append(alive, m)
		}
	}
	return alive, nil
}

// Records returns every member record, by name: the nodes alive and the
// dead ones whose record has not been forgotten yet (ForgetAfter after it
// expired). A node that stopped gracefully left no record.
func (s *Store) Records(ctx context.Context) ([]Member, error) {
	all, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) ([]Member, error) { return s.readMembers(tr) })
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all, nil
}

// Member returns the record of node, alive or not.
func (s *Store) Member(ctx context.Context, node string) (Member, bool, error) {
	b, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(s.memberKey(node)).Get() })
	if err != nil || b == nil {
		return Member{}, false, err
	}
	var m Member
	if err := json.Unmarshal(b, &m); err != nil {
		return Member{}, false, fmt.Errorf("%w: member %q: %v", ErrCorrupt, node, err)
	}
	m.Name = node
	return m, true, nil
}

// heartbeat writes m's record, and publish (the node's start-up
// configuration) when always is set (the node's first heartbeat) or the
// record was missing (the node was forgotten while it could not reach the
// store).
func (s *Store) heartbeat(ctx context.Context, m Member, publish []byte, always bool) error {
	rec, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = kv.Transact(ctx, s.db, func(tr kv.Transaction) (struct{}, error) {
		old, err := tr.Snapshot().Get(s.memberKey(m.Name)).Get()
		if err != nil {
			return struct{}{}, err
		}
		if always || old == nil {
			tr.Set(s.publishedKey(m.Name), publish)
		}
		tr.Set(s.memberKey(m.Name), rec)
		return struct{}{}, nil
	})
	return err
}

// leave removes node's record and published configuration.
func (s *Store) leave(ctx context.Context, node string) error {
	_, err := kv.Transact(ctx, s.db, func(tr kv.Transaction) (struct{}, error) {
		tr.Clear(s.memberKey(node))
		tr.Clear(s.publishedKey(node))
		return struct{}{}, nil
	})
	return err
}

// forget removes the records of nodes expired before now - after. The
// records it clears are read in the same transaction, so a node that
// heartbeats meanwhile makes it retry and is kept.
func (s *Store) forget(ctx context.Context, now time.Time, after time.Duration) (int, error) {
	limit := now.Add(-after).UnixMilli()
	return kv.Transact(ctx, s.db, func(tr kv.Transaction) (int, error) {
		all, err := s.readMembers(tr)
		if err != nil {
			return 0, err
		}
		n := 0
		for _, m := range all {
			if m.Expires < limit {
				tr.Clear(s.memberKey(m.Name))
				tr.Clear(s.publishedKey(m.Name))
				n++
			}
		}
		return n, nil
	})
}

// Published returns the start-up configuration node published (secrets
// replaced by Redacted), or false when it has none.
func (s *Store) Published(ctx context.Context, node string) (*config.Config, bool, error) {
	b, err := kv.ReadTransact(ctx, s.db, func(tr kv.ReadTransaction) ([]byte, error) { return tr.Get(s.publishedKey(node)).Get() })
	if err != nil || b == nil {
		return nil, false, err
	}
	var m map[string]map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, false, fmt.Errorf("%w: published configuration of %q: %v", ErrCorrupt, node, err)
	}
	c, err := config.FromMap(m)
	if err != nil {
		return nil, false, fmt.Errorf("%w: published configuration of %q: %v", ErrCorrupt, node, err)
	}
	return c, true, nil
}

// Redact returns every value in effect in c (config.Config.All) with
// secret values replaced by Redacted.
func Redact(c *config.Config) map[string]map[string]string {
	all := c.All()
	for sec, kvs := range all {
		for k, v := range kvs {
			if v != "" && config.IsSecret(sec, k) {
				kvs[k] = Redacted
			}
		}
	}
	return all
}

// publication encodes the values set in c (config.Config.Values, secrets
// replaced by Redacted) for other nodes to read (see Published).
func publication(c *config.Config) []byte {
	all := c.Values()
	// The name and roles as the node has them, even where they are
	// defaults (a default name is the node's host name).
	if all["node"] == nil {
		all["node"] = map[string]string{}
	}
	all["node"]["name"], all["node"]["roles"] = c.NodeName(), strings.Join(c.Roles(), ",")
	for sec, kvs := range all {
		for k, v := range kvs {
			if v != "" && config.IsSecret(sec, k) {
				kvs[k] = Redacted
			}
		}
	}
	b, _ := json.Marshal(all)
	if len(b) > PublishedMaxBytes {
		delete(all, config.SectionAdmins)
		delete(all, config.SectionUsers)
		delete(all, config.SectionUserRoles)
		b, _ = json.Marshal(all)
	}
	return b
}
