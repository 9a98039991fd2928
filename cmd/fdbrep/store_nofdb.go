//go:build !fdb

package main

import (
	"context"
	"errors"

	"github.com/rs/zerolog"

	"github.com/fdbrep/fdbrep/pkg/config"
	"github.com/fdbrep/fdbrep/pkg/kv"
)

// fdbBuild reports whether the binary has the FoundationDB backend.
const fdbBuild = false

func openFDB(context.Context, *config.Config, *zerolog.Logger) (kv.Database, error) {
	return nil, errors.New("this binary was built without FoundationDB support: make build-fdb builds bin/fdbrep-fdb, which has it (go build -tags fdb; it needs FoundationDB's client library, libfdb_c)")
}
