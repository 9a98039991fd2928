package tuple_test

import (
	"bytes"
	"fmt"
	"math/big"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

func Example() {
	key := tuple.Tuple{"jobs", int64(42), true, nil}.Pack()
	fmt.Println(kv.Printable(key))

	t, err := tuple.Unpack(key)
	if err != nil {
		panic(err)
	}
	fmt.Println(t)

	// Integers of any Go type and size order numerically.
	huge, _ := new(big.Int).SetString("-100000000000000000000", 10)
	fmt.Println(bytes.Compare(tuple.Tuple{huge}.Pack(), tuple.Tuple{int8(-1)}.Pack()) < 0)
	// Output:
	// \x02jobs\x00\x15*'\x00
	// ("jobs", 42, true, <nil>)
	// true
}

func ExampleTuple_PackWithVersionstamp() {
	t := tuple.Tuple{"log", tuple.IncompleteVersionstamp(0)}
	key, err := t.PackWithVersionstamp([]byte("p"))
	if err != nil {
		panic(err)
	}
	// The key ends with the little-endian offset of the 10 bytes the commit
	// fills in; pass it to kv.Transaction.SetVersionstampedKey.
	fmt.Println(kv.Printable(key))

	_, err = tuple.Tuple{"log"}.PackWithVersionstamp(nil)
	fmt.Println(err)
	// Output:
	// p\x02log\x003\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x07\x00\x00\x00
	// tuple: no incomplete versionstamp in a pack with versionstamp
}

func ExampleUnpack() {
	_, err := tuple.Unpack([]byte{0x16, 0x01})
	fmt.Println(err)
	// Output:
	// tuple: malformed encoding: truncated element at offset 0
}
