// Unique: the same job inserted twice (by two nodes, say) is one job.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// ReindexArgs are the arguments of a "reindex" job.
type ReindexArgs struct {
	Index string `json:"index"`
}

// Kind names the job type.
func (ReindexArgs) Kind() string { return "reindex" }

func main() {
	ctx := context.Background()
	db, err := embedded.Open(embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	client, err := fdbjobs.New(db, fdbjobs.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// No Runtime here: the kind's timeout is what a Runtime would write.
	if err := client.SetTypeTimeout(ctx, nil, "reindex", fdbjobs.TimeoutDefault); err != nil {
		log.Fatal(err)
	}
	// One reindex of each index per hour, whatever its state but discarded
	// or cancelled (UniqueStatesDefault).
	opts := fdbjobs.InsertOptions{Unique: fdbjobs.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
	for _, index := range []string{"users", "users", "orders"} {
		r, err := client.Insert(ctx, nil, ReindexArgs{Index: index}, opts)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: duplicate %v\n", index, r.Duplicate)
	}
	n, err := client.PendingCount(ctx, nil, "reindex", 0, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "jobs pending")
}
