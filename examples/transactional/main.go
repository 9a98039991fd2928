// Transactional: an order and the job that ships it commit together, in
// one transaction of the caller's; when the transaction fails, neither
// exists.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/fdbrep/fdbrep/fdbjobs"
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/embedded"
)

// ShipArgs are the arguments of a "ship" job.
type ShipArgs struct {
	Order string `json:"order"`
}

// Kind names the job type.
func (ShipArgs) Kind() string { return "ship" }

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
	if err := client.SetTypeTimeout(ctx, nil, "ship", fdbjobs.TimeoutDefault); err != nil {
		log.Fatal(err)
	}
	order := func(id string, fail bool) error {
		_, err := kv.Transact(ctx, db, func(tr kv.Transaction) (string, error) {
			tr.Set(kv.Key("orders/"+id), []byte(`{"items":3}`))
			r, err := client.Insert(ctx, tr, ShipArgs{Order: id}, fdbjobs.InsertOptions{ID: "ship-" + id})
			if err == nil && fail {
				err = errors.New("payment declined") // the order and its job roll back
			}
			return r.ID, err
		})
		return err
	}
	fmt.Println("order 1:", order("1", false))
	fmt.Println("order 2:", order("2", true))
	for _, id := range []string{"1", "2"} {
		_, err := client.JobState(ctx, nil, "ship", "ship-"+id)
		v, rerr := kv.Transact(ctx, db, func(tr kv.Transaction) ([]byte, error) { return tr.Get(kv.Key("orders/" + id)).Get() })
		if rerr != nil {
			log.Fatal(rerr)
		}
		fmt.Printf("order %s stored: %v, its job: %v\n", id, v != nil, err == nil)
	}
}
