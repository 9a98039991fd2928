package embedded_test

import (
	"context"
	"fmt"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

func ExampleOpen() {
	db, err := embedded.Open(embedded.Options{InMemory: true}) // or Options{Dir: path}
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()

	_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.Set(kv.Key("greeting"), []byte("hello"))
		tr.Add(kv.Key("counter"), []byte{1, 0, 0, 0})
		return nil, nil
	})
	if err != nil {
		panic(err)
	}
	v, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(kv.Key("greeting")).Get()
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(v))
	// Output: hello
}

func ExampleDB_watch() {
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()

	// A watch is set in a transaction and armed by its commit.
	w, err := kv.Transact(ctx, db, func(tr kv.Transaction) (kv.FutureNil, error) {
		return tr.Watch(kv.Key("job")), nil
	})
	if err != nil {
		panic(err)
	}
	_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.Set(kv.Key("job"), []byte("done"))
		return nil, nil
	})
	if err != nil {
		panic(err)
	}
	_, err = kv.Await(ctx, w)
	fmt.Println("changed:", err == nil)
	// Output: changed: true
}
