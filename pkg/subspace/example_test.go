package subspace_test

import (
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/subspace"
	"github.com/fdbrep/fdbrep/pkg/tuple"
)

func Example() {
	app := subspace.Sub("fdbrep")
	jobs := app.Sub("jobs", "replication")

	key := jobs.Pack(tuple.Tuple{"job-1", int64(7)})
	fmt.Println(key)
	fmt.Println(app.Contains(key), subspace.Sub("other").Contains(key))

	t, err := jobs.Unpack(key)
	if err != nil {
		panic(err)
	}
	fmt.Println(t)

	// A subspace is the range of its keys, for GetRange and ClearRange.
	var r kv.ExactRange = jobs
	begin, end := r.FDBRangeKeys()
	fmt.Println(begin, end)
	// Output:
	// \x02fdbrep\x00\x02jobs\x00\x02replication\x00\x02job-1\x00\x15\x07
	// true false
	// ("job-1", 7)
	// \x02fdbrep\x00\x02jobs\x00\x02replication\x00\x00 \x02fdbrep\x00\x02jobs\x00\x02replication\x00\xff
}
