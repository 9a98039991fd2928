package repdb_test

import (
	"fmt"

	"github.com/fdbrep/fdbrep/repdb"
)

// IsReplicatorDB tells which databases hold replication documents.
func ExampleIsReplicatorDB() {
	for _, name := range []string{"_replicator", "team/_replicator", "team_replicator"} {
		fmt.Println(name, repdb.IsReplicatorDB(name))
	}
	// Output:
	// _replicator true
	// team/_replicator true
	// team_replicator false
}
