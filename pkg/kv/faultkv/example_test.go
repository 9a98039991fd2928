package faultkv_test

import (
	"context"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv"
)

func Example() {
	inner, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		panic(err)
	}
	// Half the commits report commit_unknown_result after committing.
	db := faultkv.Wrap(inner, faultkv.Options{Seed: 1, CommitUnknownResult: 0.5})
	defer db.Close()

	runs := 0
	for range 10 {
		_, err := db.Transact(context.Background(), func(tr kv.Transaction) (any, error) {
			runs++
			tr.Set(kv.Key("k"), []byte("v")) // idempotent: safe to run twice
			return nil, nil
		})
		if err != nil {
			panic(err)
		}
	}
	s := db.Stats()
	fmt.Println(runs == 10+int(s.CommitUnknownResult), s.CommitUnknownResult > 0)
	// Output: true true
}
