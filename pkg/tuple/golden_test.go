package tuple

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"math/rand" // v1, whose seeded sequence generated the golden vectors
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The golden vectors are FoundationDB's own: the file that the FDB Go
// binding's tests check its Pack against, taken from the Go module of the
// version fdbrep builds its FDB backend with.
const (
	fdbBindingModule  = "github.com/apple/foundationdb/bindings/go"
	fdbBindingVersion = "v0.0.0-20260629183922-51e1c42eb9a8"
	goldenPath        = "src/fdb/tuple/testdata/tuples.golden"
)

// fdbBindingDir returns the module cache directory of the FDB Go binding,
// downloading it through the module proxy if needed. The go command runs
// outside this module so that it never touches go.mod or go.sum.
func fdbBindingDir(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to locate the FDB golden vectors")
	cmd := exec.Command(goBin, "mod", "download", "-json", fdbBindingModule+"@"+fdbBindingVersion)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	require.NoError(t, err, "go mod download %s@%s: %s", fdbBindingModule, fdbBindingVersion, out)
	var info struct {
		Dir   string
		Error string
	}
	require.NoError(t, json.Unmarshal(out, &info))
	require.Empty(t, info.Error)
	require.NotEmpty(t, info.Dir)
	return info.Dir
}

// goldenCases rebuilds the tuples the golden file encodes, in the order the
// binding's test builds them: its random elements come from math/rand
// seeded with 1, so their sequence must be consumed in the same order.
func goldenCases() []struct {
	name  string
	tuple Tuple
} {
	rnd := rand.New(rand.NewSource(1))
	repeat := func(n int, gen func() TupleElement) Tuple {
		t := make(Tuple, n)
		for i := range t {
			t[i] = gen()
		}
		return t
	}
	constant := func(v TupleElement) func() TupleElement { return func() TupleElement { return v } }
	randInt := func() TupleElement { return rnd.Int63() }
	randFloat := func() TupleElement { return float32(rnd.NormFloat64()) }
	randDouble := func() TupleElement { return rnd.NormFloat64() }
	uuid := UUID{0x11, 0x00, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11, 0x00, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

	// Evaluated in order, so the random draws happen in the binding's order.
	return []struct {
		name  string
		tuple Tuple
	}{
		{"Simple", Tuple{uuid, "foobarbaz", 1234, nil}},
		{"Namespaces", Tuple{uuid, "github", "com", "apple", "foundationdb", "tree"}},
		{"ManyStrings", repeat(8, constant("namespace"))},
		{"ManyStringsNil", repeat(8, constant("nam\x00es\xffpace"))},
		{"ManyBytes", repeat(20, constant([]byte("namespace")))},
		{"ManyBytesNil", repeat(20, constant([]byte{0xff, 0x00, 0xff}))},
		{"LargeBytes", Tuple{uuid, bytes.Repeat([]byte("abcd"), 20)}},
		{"LargeBytesNil", Tuple{uuid, bytes.Repeat([]byte{0xff, 0x00, 0xff}, 20)}},
		{"Integers", repeat(20, randInt)},
		{"Floats", repeat(20, randFloat)},
		{"Doubles", repeat(20, randDouble)},
		{"UUIDs", Tuple{uuid, true, uuid, false, uuid, true, uuid, false, uuid, true}},
		{"NilCases", Tuple{"\x00", "\x00\xff", "\x00\x00\x00", "\xff\x00", ""}},
		{"Nested", Tuple{uuid, repeat(4, randInt), nil, repeat(4, constant([]byte("namespace"))), nil, repeat(4, randDouble), nil}},
	}
}

func TestGoldenVectors(t *testing.T) {
	f, err := os.Open(filepath.Join(fdbBindingDir(t), goldenPath))
	require.NoError(t, err)
	defer f.Close()
	var golden map[string][]byte
	require.NoError(t, gob.NewDecoder(f).Decode(&golden))

	cases := goldenCases()
	require.Len(t, golden, len(cases), "every golden vector has a case")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, ok := golden[tc.name]
			require.True(t, ok, "golden vector %q", tc.name)
			require.Equal(t, want, tc.tuple.Pack(), "Pack(%v)", tc.tuple)

			got, err := Unpack(want)
			require.NoError(t, err)
			requireSameTuple(t, normalize(tc.tuple), got)
			require.Equal(t, want, got.Pack(), "Pack(Unpack(golden))")
		})
	}
}
