package embedded

import (
	"bytes"

	"github.com/tidwall/btree"
)

// span is the key range [begin, end).
type span struct {
	begin, end []byte
}

// histEntry says that the keys from key up to the next entry's key were last
// written at version ver; a version at or below the resolver's horizon means
// "not within the horizon", whatever its value.
type histEntry struct {
	key []byte
	ver int64
}

// resolver is FoundationDB's conflict history: a step function from keys to
// the version that last wrote them, kept for the transaction lifetime. It
// always holds an entry for the empty key. Only the commit leader uses it.
type resolver struct {
	tree *btree.BTreeG[histEntry]
	// horizon is the newest version forgotten by gc: a transaction whose
	// read version is older cannot be checked and gets transaction_too_old.
	horizon int64
	sweep   []byte // where the next gc step starts
	// dropped counts the entries the current sweep removed; productive
	// records whether the last full sweep removed a good share of the
	// history, in which case gc works faster.
	dropped    int
	productive bool

	dropBuf [][]byte // scratch for insert
	// hint remembers the path of the last search: a transaction's write
	// ranges come sorted, so each search starts near the previous one.
	hint btree.PathHint
}

func newResolver() *resolver {
	t := btree.NewBTreeGOptions(func(a, b histEntry) bool { return bytes.Compare(a.key, b.key) < 0 },
		btree.Options{NoLocks: true})
	t.Set(histEntry{key: []byte{}, ver: 0})
	return &resolver{tree: t}
}

// versionAt returns the last write version of key k.
func (r *resolver) versionAt(k []byte) int64 {
	var v int64
	r.tree.DescendHint(histEntry{key: k}, func(e histEntry) bool { v = e.ver; return false }, &r.hint)
	return v
}

// conflicts reports whether any key in one of the ranges was written after
// version rv.
func (r *resolver) conflicts(ranges []span, rv int64) bool {
	for _, s := range ranges {
		if r.versionAt(s.begin) > rv {
			return true
		}
		if isPoint(s) {
			continue // no boundary can lie strictly inside a single key's range
		}
		hit := false
		r.tree.Ascend(histEntry{key: s.begin}, func(e histEntry) bool {
			if bytes.Compare(e.key, s.end) >= 0 {
				return false
			}
			if e.ver > rv {
				hit = true
				return false
			}
			return true
		})
		if hit {
			return true
		}
	}
	return false
}

// insert records that the range s was written at version v, which is not
// older than any version already recorded.
func (r *resolver) insert(s span, v int64) {
	// The step at s.end keeps its version: find it, and whether s.end is a
	// boundary already.
	var endVer int64
	endExists := false
	r.tree.DescendHint(histEntry{key: s.end}, func(e histEntry) bool {
		endVer, endExists = e.ver, bytes.Equal(e.key, s.end)
		return false
	}, &r.hint)
	if !isPoint(s) { // the range of a single key holds no boundary but its begin
		r.dropInside(s)
	}
	r.tree.SetHint(histEntry{key: s.begin, ver: v}, &r.hint)
	if !endExists {
		r.tree.SetHint(histEntry{key: s.end, ver: endVer}, &r.hint)
	}
}

// dropInside drops the boundaries inside (s.begin, s.end); the one at
// s.begin is left for insert to overwrite.
func (r *resolver) dropInside(s span) {
	drop := r.dropBuf[:0]
	r.tree.Ascend(histEntry{key: s.begin}, func(e histEntry) bool {
		if bytes.Compare(e.key, s.end) >= 0 {
			return false
		}
		if !bytes.Equal(e.key, s.begin) {
			drop = append(drop, e.key)
		}
		return true
	})
	for _, k := range drop {
		r.tree.Delete(histEntry{key: k})
	}
	clear(drop)
	r.dropBuf = drop[:0]
}

// isPoint reports whether s is [k, k\x00).
func isPoint(s span) bool {
	n := len(s.begin)
	return len(s.end) == n+1 && s.end[n] == 0 && bytes.Equal(s.end[:n], s.begin)
}

// gc forgets versions up to horizon, visiting at most n entries from where
// the previous call stopped, so that the cost is spread over many batches.
// Runs of entries at or below the horizon are merged into their first. The
// merged entry keeps its version rather than becoming 0, which would cost
// a second tree update: conflicts never sees the difference, as it is only
// asked about read versions at or above the horizon (older ones get
// transaction_too_old first).
func (r *resolver) gc(horizon int64, n int) {
	if horizon > r.horizon {
		r.horizon = horizon
	}
	if r.productive {
		n = max(n, r.tree.Len()/16)
	}
	prevStale := false
	if len(r.sweep) > 0 {
		r.tree.Descend(histEntry{key: r.sweep}, func(e histEntry) bool {
			if bytes.Equal(e.key, r.sweep) {
				return true
			}
			prevStale = e.ver <= r.horizon
			return false
		})
	}
	// One pass deletes as it goes: deleting the merged entries one by one
	// afterwards, each with its own search, cost several times the sweep.
	dropped, visited := 0, 0
	wrapped := true
	r.tree.DeleteAscend(histEntry{key: r.sweep}, func(e histEntry) btree.Action {
		if visited >= n {
			r.sweep = e.key
			wrapped = false
			return btree.Stop
		}
		visited++
		stale := e.ver <= r.horizon
		if stale && prevStale && len(e.key) > 0 {
			dropped++
			return btree.Delete // prevStale stays true
		}
		prevStale = stale
		return btree.Keep
	})
	r.dropped += dropped
	if wrapped {
		r.sweep = nil
		r.productive = r.dropped > r.tree.Len()/4
		r.dropped = 0
	}
}
