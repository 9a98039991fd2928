package kvtest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

var modelTests = []conformanceTest{
	onDB("RandomTransactions", testModelRandom),
}

// traceModel logs every transaction of the model test (set
// FDBREP_KVTEST_TRACE=1 when replaying a seed).
var traceModel = os.Getenv("FDBREP_KVTEST_TRACE") != ""

// Model test parameters.
const (
	modelTransactions = 200
	modelMaxOps       = 14
)

// modelKeys is the small key alphabet of the model test, chosen so that
// random operations collide and hit the edges of the key space ("" is a
// valid key).
var modelKeys = []string{"", "a", "a\x00", "ab", "b", "ba", "c", "d", "d\xfe", "e"}

// model is the expected state: committed data, and the state a transaction
// sees (committed data plus its own writes). The test runs one transaction
// at a time, so a transaction reads exactly that.
type model struct {
	committed map[string][]byte
	tx        map[string][]byte
}

func (m *model) begin() { m.tx = maps(m.committed) }

func maps(src map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(src))
	for k, v := range src {
		out[k] = v
	}
	return out
}

// committedKVs returns the committed pairs in key order.
func (m *model) committedKVs() []kv.KeyValue {
	keys := make([]string, 0, len(m.committed))
	for k := range m.committed {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]kv.KeyValue, len(keys))
	for i, k := range keys {
		out[i] = kv.KeyValue{Key: kv.Key(k), Value: m.committed[k]}
	}
	return out
}

func (m *model) sortedKeys() []string {
	keys := make([]string, 0, len(m.tx))
	for k := range m.tx {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// resolve resolves a selector as FoundationDB does: the last key less than
// (or equal to) the reference, moved by offset; before the first key is "",
// after the last is "\xff". It also returns the index into keys, clamped to
// [0, len(keys)], for range reads.
func (m *model) resolve(keys []string, s kv.KeySelector) (string, int) {
	ref := string(s.Key.FDBKey())
	i := -1
	for j, k := range keys {
		if k < ref || (s.OrEqual && k == ref) {
			i = j
		}
	}
	idx := i + s.Offset
	switch {
	case idx < 0:
		return "", 0
	case idx >= len(keys):
		return "\xff", len(keys)
	}
	return keys[idx], idx
}

func (m *model) getRange(begin, end kv.KeySelector, opts kv.RangeOptions) []kv.KeyValue {
	keys := m.sortedKeys()
	_, b := m.resolve(keys, begin)
	_, e := m.resolve(keys, end)
	var out []kv.KeyValue
	for i := b; i < e; i++ {
		out = append(out, kv.KeyValue{Key: kv.Key(keys[i]), Value: m.tx[keys[i]]})
	}
	if opts.Reverse {
		slices.Reverse(out)
	}
	if opts.Limit > 0 && len(out) > opts.Limit {
		out = out[:opts.Limit]
	}
	return out
}

// modelAdd is FoundationDB's add: little-endian, the result as long as
// param.
func modelAdd(existing, param []byte) []byte {
	out := make([]byte, len(param))
	carry := 0
	for i := range param {
		a := 0
		if i < len(existing) {
			a = int(existing[i])
		}
		s := a + int(param[i]) + carry
		out[i] = byte(s)
		carry = s >> 8
	}
	return out
}

func modelXor(existing, param []byte) []byte {
	out := make([]byte, len(param))
	for i := range param {
		var a byte
		if i < len(existing) {
			a = existing[i]
		}
		out[i] = a ^ param[i]
	}
	return out
}

// testModelRandom runs random transactions of writes, clears, atomic
// operations and reads of every kind, checking every read against the model
// (read-your-writes, selectors, range options) and the committed state after
// every commit. Some transactions are abandoned instead of committed.
func testModelRandom(t *testing.T, db kv.Database) {
	seed := Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	m := &model{committed: map[string][]byte{}}
	randKey := func() string { return modelKeys[rng.IntN(len(modelKeys))] }
	randValue := func() []byte {
		v := make([]byte, 1+rng.IntN(3))
		for i := range v {
			v[i] = byte('0' + rng.IntN(10))
		}
		return v
	}
	randSelector := func() kv.KeySelector {
		return kv.KeySelector{Key: kv.Key(randKey()), OrEqual: rng.IntN(2) == 0, Offset: rng.IntN(5) - 2}
	}

	for txn := 0; txn < modelTransactions; txn++ {
		var log []string
		committed := fmtKVs(m.committedKVs())
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, transaction %d: %s\ncommitted before it: %s\noperations:\n  %s", seed, txn,
				fmt.Sprintf(format, args...), committed, strings.Join(log, "\n  "))
		}
		m.begin()
		tr := newTr(t, db)
		aborted := false
		// After a CompareAndClear, FoundationDB's read-your-writes cache
		// counts its key as present when it resolves a key selector that
		// moves from key to key (an offset other than 1), whatever the
		// key's value: the embedded store counts only keys that exist. So
		// such selectors are not mixed with CompareAndClear in one
		// transaction (fdbrep does neither; see kv/embedded's doc).
		compareAndCleared := false
		selector := func() kv.KeySelector {
			s := randSelector()
			if compareAndCleared {
				s.Offset = 1
			}
			return s
		}
		// readOK handles a read error: fault injection may fail a read
		// with a retryable error, which abandons the transaction.
		readOK := func(err error) bool {
			if err == nil {
				return true
			}
			if kv.IsRetryable(err) {
				aborted = true
				return false
			}
			fail("read failed: %v", err)
			return false
		}
		nops := 1 + rng.IntN(modelMaxOps)
		for op := 0; op < nops && !aborted; op++ {
			switch rng.IntN(10) {
			case 0, 1:
				k, v := randKey(), randValue()
				log = append(log, fmt.Sprintf("set %q=%q", k, v))
				tr.Set(kv.Key(k), v)
				m.tx[k] = v
			case 2:
				k := randKey()
				log = append(log, fmt.Sprintf("clear %q", k))
				tr.Clear(kv.Key(k))
				delete(m.tx, k)
			case 3:
				b, e := randKey(), randKey()
				if b > e {
					b, e = e, b
				}
				log = append(log, fmt.Sprintf("clear range [%q, %q)", b, e))
				tr.ClearRange(kv.KeyRange{Begin: kv.Key(b), End: kv.Key(e)})
				for k := range m.tx {
					if k >= b && k < e {
						delete(m.tx, k)
					}
				}
			case 4:
				k := randKey()
				param := []byte{byte(rng.IntN(256)), byte(rng.IntN(3))}[:1+rng.IntN(2)]
				switch rng.IntN(3) {
				case 0:
					log = append(log, fmt.Sprintf("add %q %x", k, param))
					tr.Add(kv.Key(k), param)
					m.tx[k] = modelAdd(m.tx[k], param)
				case 1:
					log = append(log, fmt.Sprintf("xor %q %x", k, param))
					tr.BitXor(kv.Key(k), param)
					m.tx[k] = modelXor(m.tx[k], param)
				case 2:
					cur, ok := m.tx[k]
					if ok && rng.IntN(2) == 0 {
						param = cur
					}
					log = append(log, fmt.Sprintf("compare and clear %q %x", k, param))
					tr.CompareAndClear(kv.Key(k), param)
					compareAndCleared = true
					if ok && bytes.Equal(cur, param) {
						delete(m.tx, k)
					}
				}
			case 5:
				k := randKey()
				var rt kv.ReadTransaction = tr
				if rng.IntN(3) == 0 {
					rt = tr.Snapshot()
				}
				v, err := rt.Get(kv.Key(k)).Get()
				log = append(log, fmt.Sprintf("get %q -> %q", k, v))
				if !readOK(err) {
					break
				}
				want, ok := m.tx[k]
				if !ok {
					want = nil
				}
				if !bytes.Equal(want, v) || (want == nil) != (v == nil) {
					fail("get %q: got %q, want %q", k, v, want)
				}
			case 6:
				s := selector()
				got, err := tr.GetKey(s).Get()
				log = append(log, fmt.Sprintf("get key %+v -> %q", s, got))
				if !readOK(err) {
					break
				}
				want, _ := m.resolve(m.sortedKeys(), s)
				if string(got) != want {
					fail("get key %q or-equal=%v offset=%d: got %q, want %q", s.Key, s.OrEqual, s.Offset, got, want)
				}
			default:
				var begin, end kv.KeySelector
				if rng.IntN(2) == 0 {
					b, e := randKey(), randKey()
					if b > e {
						b, e = e, b
					}
					begin, end = kv.FirstGreaterOrEqual(kv.Key(b)), kv.FirstGreaterOrEqual(kv.Key(e))
				} else {
					begin, end = selector(), selector()
				}
				opts := kv.RangeOptions{Limit: rng.IntN(5), Reverse: rng.IntN(2) == 0}
				var got []kv.KeyValue
				var err error
				if rng.IntN(2) == 0 {
					got, err = tr.GetRange(kv.SelectorRange{Begin: begin, End: end}, opts).GetSliceWithError()
				} else {
					it := tr.GetRange(kv.SelectorRange{Begin: begin, End: end}, opts).Iterator()
					for it.Advance() {
						var e kv.KeyValue
						if e, err = it.Get(); err != nil {
							break
						}
						got = append(got, e)
					}
				}
				log = append(log, fmt.Sprintf("get range %+v %+v %+v -> %d rows", begin, end, opts, len(got)))
				if !readOK(err) {
					break
				}
				want := m.getRange(begin, end, opts)
				if !equalKVs(want, got) {
					fail("get range %+v..%+v %+v:\n got  %s\n want %s", begin, end, opts, fmtKVs(got), fmtKVs(want))
				}
			}
		}
		if aborted || rng.IntN(8) == 0 {
			tr.Cancel()
			if traceModel {
				t.Logf("transaction %d abandoned:\n  %s", txn, strings.Join(log, "\n  "))
			}
			continue
		}
		if traceModel {
			t.Logf("transaction %d:\n  %s", txn, strings.Join(log, "\n  "))
		}
		err := commit(tr)
		switch {
		case err == nil:
			m.committed = m.tx
		case kv.IsMaybeCommitted(err):
			// Find out which it was.
			if equalState(readAll(t, db, kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")}), m.tx) {
				m.committed = m.tx
			}
		case kv.IsRetryable(err):
		default:
			fail("commit: %v", err)
		}
		got := readAll(t, db, kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")})
		if !equalState(got, m.committed) {
			fail("committed state:\n got  %s\n want %v", fmtKVs(got), m.committed)
		}
	}
	require.NotNil(t, m.committed)
}

func equalKVs(a, b []kv.KeyValue) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

func equalState(kvs []kv.KeyValue, state map[string][]byte) bool {
	if len(kvs) != len(state) {
		return false
	}
	for _, e := range kvs {
		v, ok := state[string(e.Key)]
		if !ok || !bytes.Equal(v, e.Value) {
			return false
		}
	}
	return true
}

func fmtKVs(kvs []kv.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, e := range kvs {
		parts[i] = fmt.Sprintf("%q=%q", e.Key, e.Value)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
