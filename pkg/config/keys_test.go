package config_test

// The packages that declare the [chttpd], [chttpd_auth] and [replicator]
// keys this package's tests load, as a node's binary links them.
import (
	_ "github.com/fdbrep/fdbrep/frontend"
	_ "github.com/fdbrep/fdbrep/replicator/scheduler"
)
