package frontend

// The packages that declare the [replicator] keys this package's tests
// set, as a node's binary links them.
import _ "github.com/fdbrep/fdbrep/replicator/scheduler"
