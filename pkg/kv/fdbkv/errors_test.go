//go:build fdb

package fdbkv

import (
	"testing"

	"github.com/apple/foundationdb/bindings/go/src/fdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// kv renders every code it knows as FoundationDB's client library does.
func TestErrorMessagesMatchTheClientLibrary(t *testing.T) {
	require.NoError(t, fdb.APIVersion(APIVersion))
	for _, code := range kv.Codes() {
		assert.Equalf(t, fdb.Error{Code: code}.Error(), kv.Error{Code: code}.Error(), "code %d", code)
	}
}
