//go:build !fdb

package main

import (
	"errors"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// fdbBuild reports whether the binary has the FoundationDB backend.
const fdbBuild = false

func openFDB(string, string) (kv.Database, error) {
	return nil, errors.New("this binary was built without FoundationDB support; rebuild with -tags fdb (needs libfdb_c)")
}
