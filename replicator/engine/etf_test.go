package engine

import (
	"encoding/json"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTermToBinary(t *testing.T) {
	big1, _ := new(big.Int).SetString("18446744073709551616", 10) // 2^64
	tests := []struct {
		name string
		term any
		want []byte
	}{
		{"nil list", etfListT{}, []byte{131, 106}},
		{"empty string", etfStr(""), []byte{131, 106}},
		{"string", etfStr("ab"), []byte{131, 107, 0, 2, 'a', 'b'}},
		{"binary", "ab", []byte{131, 109, 0, 0, 0, 2, 'a', 'b'}},
		{"atom", etfAtomT("undefined"), append([]byte{131, 100, 0, 9}, "undefined"...)},
		{"small int", int64(1), []byte{131, 97, 1}},
		{"int", int64(256), []byte{131, 98, 0, 0, 1, 0}},
		{"negative int", int64(-1), []byte{131, 98, 255, 255, 255, 255}},
		{"big int", int64(1) << 40, []byte{131, 110, 6, 0, 0, 0, 0, 0, 0, 1}},
		{"bigger int", big1, []byte{131, 110, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"float", 1.5, []byte{131, 70, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}},
		{"tuple", etfTuple{etfAtomT("a"), int64(1)}, []byte{131, 104, 2, 100, 0, 1, 'a', 97, 1}},
		// As term_to_binary: a list of integers 0..255 is a string.
		{"list of bytes", etfListT{int64(1), big.NewInt(2)}, []byte{131, 107, 0, 2, 1, 2}},
		{"list", etfListT{int64(1), int64(256)}, []byte{131, 108, 0, 0, 0, 2, 97, 1, 98, 0, 0, 1, 0, 106}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := termToBinary(tt.term)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	_, err := termToBinary(struct{}{})
	require.Error(t, err)
	// fdbrep's earlier ids encoded every list as a list.
	got, err := encodeTerm(etfListT{int64(1), int64(2)}, true)
	require.NoError(t, err)
	require.Equal(t, []byte{131, 108, 0, 0, 0, 2, 97, 1, 97, 2, 106}, got)
}

func TestEJSON(t *testing.T) {
	v, err := ejson(json.RawMessage(`{"b":[1,2.5,"x",true,null],"a":{}}`), true)
	require.NoError(t, err)
	want := etfTuple{etfListT{
		etfTuple{"a", etfTuple{etfListT{}}},
		etfTuple{"b", etfListT{big.NewInt(1), 2.5, "x", etfAtomT("true"), etfAtomT("null")}},
	}}
	require.Equal(t, want, v)

	// As CouchDB's decoder: keys as written, a repeated one once, last.
	unsorted, err := ejson(json.RawMessage(`{"b":1,"a":2,"b":3}`), false)
	require.NoError(t, err)
	require.Equal(t, etfTuple{etfListT{etfTuple{"a", big.NewInt(2)}, etfTuple{"b", big.NewInt(3)}}}, unsorted)

	for _, bad := range []string{``, `{`, `[1,]`, `1 2`, `{"a"}`} {
		_, err := ejson(json.RawMessage(bad), true)
		require.Error(t, err, bad)
	}
}
