//go:build fdb

package main

import (
	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/fdbkv"
)

func openFDB(clusterFile string) (kv.Database, error) { return fdbkv.Open(clusterFile) }
