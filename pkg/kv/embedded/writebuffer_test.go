package embedded

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func bs(s string) []byte { return []byte(s) }

// bufferView returns what b tells of each key: "=v" for a known value, "-"
// for a cleared key, "ops" for atomic operations on the stored value, "!"
// for an unreadable key, and "" for a key b knows nothing of.
func bufferView(b *writeBuffer, keys ...string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		e := b.entry(bs(k))
		switch {
		case e == nil:
			if _, ok := b.clearAt(bs(k)); ok {
				out[i] = "-"
			}
		case e.kind == entValue:
			out[i] = "=" + string(e.val)
		case e.kind == entAbsent:
			out[i] = "-"
		case e.kind == entOps:
			out[i] = "ops"
		case e.kind == entUnreadable:
			out[i] = "!"
		}
	}
	return out
}

func TestWriteBufferLog(t *testing.T) {
	var b writeBuffer
	require.True(t, b.empty())
	b.set(bs("a"), bs("1"))
	require.False(t, b.atomic)
	b.clear(bs("b"))
	b.clearRange(bs("c"), bs("e"))
	b.atomicOp(opAdd, bs("n"), []byte{1})
	b.setVersionstampedValue(bs("v"), make([]byte, 10), 0)
	b.setVersionstampedKey(bs("0123456789"), bs("x"), 0, span{bs("0"), bs("1")})
	require.False(t, b.empty())
	require.True(t, b.atomic)
	var ops []opType
	for _, m := range b.muts {
		ops = append(ops, m.op)
	}
	require.Equal(t, []opType{opSet, opClear, opClearRange, opAdd, opVersionstampedValue, opVersionstampedKey}, ops,
		"the log keeps every write in order")
	require.Equal(t, 2+1+2+2+11+11, b.size, "size counts keys and operands")
}

func TestWriteBufferClearRange(t *testing.T) {
	probes := []string{"a", "b", "b\x00", "c", "d", "e", "f", "g", "h"}
	for _, tc := range []struct {
		name    string
		clears  [][2]string
		cleared string // the probes cleared, concatenated
	}{
		{"one", [][2]string{{"b", "d"}}, "b b\x00 c"},
		{"disjoint", [][2]string{{"b", "d"}, {"f", "h"}}, "b b\x00 c f g"},
		{"touching", [][2]string{{"b", "d"}, {"d", "f"}}, "b b\x00 c d e"},
		{"touching before", [][2]string{{"d", "f"}, {"b", "d"}}, "b b\x00 c d e"},
		{"overlapping", [][2]string{{"b", "e"}, {"c", "g"}}, "b b\x00 c d e f"},
		{"inside", [][2]string{{"b", "g"}, {"c", "d"}}, "b b\x00 c d e f"},
		{"covering several", [][2]string{{"b", "c"}, {"d", "e"}, {"f", "g"}, {"a", "f"}}, "a b b\x00 c d e f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b writeBuffer
			for _, c := range tc.clears {
				b.clearRange(bs(c[0]), bs(c[1]))
			}
			var cleared []string
			for _, k := range probes {
				if _, ok := b.clearAt(bs(k)); ok {
					cleared = append(cleared, k)
				}
			}
			require.Equal(t, tc.cleared, strings.Join(cleared, " "))
			var prev span
			b.clears.Scan(func(s span) bool {
				require.Negative(t, bytes.Compare(s.begin, s.end), "empty range %q", s)
				require.LessOrEqual(t, bytes.Compare(prev.end, s.begin), 0, "%q overlaps %q", prev, s)
				prev = s
				return true
			})
		})
	}
	var b writeBuffer
	b.clearRange(bs("b"), bs("e"))
	b.clearRange(bs("c"), bs("g"))
	b.clearRange(bs("a"), bs("c"))
	require.Equal(t, 1, b.clears.Len(), "overlapping ranges merge into one")
}

func TestWriteBufferEntries(t *testing.T) {
	var b writeBuffer
	b.set(bs("a"), bs("1"))
	b.set(bs("c"), bs("3"))
	b.set(bs("e"), bs("5"))
	b.clearRange(bs("b"), bs("e"))
	require.Equal(t, []string{"=1", "-", "-", "-", "=5", ""}, bufferView(&b, "a", "b", "c", "d", "e", "f"),
		"a clear range drops the entries inside it")

	b.set(bs("c"), bs("new"))
	b.atomicOp(opAdd, bs("a"), []byte{1})           // on a known value
	b.atomicOp(opAdd, bs("d"), []byte{7})           // on a cleared key
	b.atomicOp(opAdd, bs("f"), []byte{2})           // on the stored value
	b.atomicOp(opCompareAndClear, bs("e"), bs("5")) // clears it
	b.setVersionstampedValue(bs("g"), make([]byte, 10), 0)
	require.Equal(t, []string{"=2", "-", "=new", "=\x07", "-", "ops", "!"}, bufferView(&b, "a", "b", "c", "d", "e", "f", "g"))

	v, ok, err := b.entry(bs("f")).resolve([]byte{40}, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte{42}, v, "stacked operations apply to the stored value")
	v, ok, err = b.entry(bs("f")).resolve(nil, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte{2}, v)
	_, _, err = b.entry(bs("g")).resolve(nil, false)
	require.ErrorIs(t, err, errUnreadable)
}

func TestWriteBufferUnreadable(t *testing.T) {
	var b writeBuffer
	overlaps := func(begin, end string) bool { return b.unreadableOverlaps(bs(begin), bs(end)) }
	require.False(t, overlaps("", "\xff"), "nothing is unreadable in an empty buffer")
	b.setVersionstampedKey(bs("k0123456789"), bs("v"), 1, span{bs("k1"), bs("k2")})
	require.True(t, overlaps("k1", "k2"))
	require.True(t, overlaps("k", "k1\x00"))
	require.True(t, overlaps("k1\xff", "z"))
	require.False(t, overlaps("k", "k1"), "a range that ends where the stamped key's range begins")
	require.False(t, overlaps("k2", "z"), "a range that begins where the stamped key's range ends")
}

func TestWriteBufferCursor(t *testing.T) {
	var empty writeBuffer
	var c entryCursor
	c.init(&empty, nil, maxReadKey, false)
	require.False(t, c.ok, "an empty buffer has no entries")
	c.release()

	var b writeBuffer
	for _, k := range []string{"a", "c", "e", "g"} {
		b.set(bs(k), bs(k))
	}
	for _, tc := range []struct {
		name       string
		begin, end string
		reverse    bool
		want       []string
	}{
		{"all", "", "z", false, []string{"a", "c", "e", "g"}},
		{"all reverse", "", "z", true, []string{"g", "e", "c", "a"}},
		{"end excluded", "c", "g", false, []string{"c", "e"}},
		{"end excluded reverse", "c", "g", true, []string{"e", "c"}},
		{"between keys", "b", "f", false, []string{"c", "e"}},
		{"between keys reverse", "b", "f", true, []string{"e", "c"}},
		{"none", "h", "z", false, nil},
		{"none reverse", "", "a", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c entryCursor
			c.init(&b, bs(tc.begin), bs(tc.end), tc.reverse)
			defer c.release()
			var got []string
			for ; c.ok; c.next() {
				got = append(got, string(c.entry().key))
			}
			require.Equal(t, tc.want, got)
		})
	}
}
