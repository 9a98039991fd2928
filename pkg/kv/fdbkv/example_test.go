//go:build fdb

package fdbkv_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/fdbkv"
)

// Open a FoundationDB cluster through the kv API; the code written against
// kv.Database runs unchanged on the embedded backend. (No output: it needs
// a running cluster.)
func ExampleOpen() {
	db, err := fdbkv.Open("") // the platform's default cluster file
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	_, err = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
		tr.Set(kv.Key("hello"), []byte("world"))
		return nil, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	v, err := kv.ReadTransact(ctx, db, func(tr kv.ReadTransaction) ([]byte, error) {
		return tr.Get(kv.Key("hello")).Get()
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(v))
}
