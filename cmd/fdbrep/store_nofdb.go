//go:build !fdb

package main

import (
	"context"
	"errors"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// fdbBuild reports whether the binary has the FoundationDB backend.
const fdbBuild = false

func openFDB(context.Context, string, string, *zerolog.Logger) (kv.Database, error) {
	return nil, errors.New("this binary was built without FoundationDB support; rebuild with -tags fdb (needs libfdb_c)")
}
