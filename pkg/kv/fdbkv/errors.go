//go:build fdb

package fdbkv

import (
	"errors"
	"fmt"

	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// ErrAPIVersion is returned by Open when the process already selected a
// FoundationDB API version other than APIVersion.
var ErrAPIVersion = errors.New("fdbkv: another FoundationDB API version is already selected")

// ErrTLS is returned by Open when the TLS settings cannot work: a file
// missing, unreadable or not what it should be, a certificate expired,
// or a cluster file with :tls coordinators and no certificate. The
// message names the setting and what to do.
var ErrTLS = errors.New("fdbkv: TLS")

// ErrTLSChanged is returned by Open when the process's FoundationDB
// network was set up with other TLS settings: they are the process's and
// set once, by the first Open.
var ErrTLSChanged = errors.New("fdbkv: the FoundationDB network of this process was set up with other TLS settings")

// convertErr returns err with every fdb.Error turned into the kv.Error with
// the same code, unwrapped, so that kv's retry loop recognises it. Other
// errors are returned as they are.
func convertErr(err error) error {
	if err == nil {
		return nil
	}
	var fe fdb.Error
	if errors.As(err, &fe) {
		return kv.Error{Code: fe.Code}
	}
	return err
}

// convertPanic turns a panic raised by the binding with an fdb.Error into a
// panic with the matching kv.Error. It must be deferred directly.
func convertPanic() {
	if r := recover(); r != nil {
		if e, ok := r.(error); ok {
			panic(convertErr(e))
		}
		panic(r)
	}
}

// guard runs f, turning a panic with an error (as MustGet raises) into a
// returned error, as kv's retry loop does. Other panics are re-raised.
func guard(f func() (any, error)) (any, error) {
	ret, err := kv.Guard(f)
	return ret, convertErr(err)
}

func openError(clusterFile string, err error) error {
	if clusterFile == "" {
		return fmt.Errorf("fdbkv: open default cluster file: %w", convertErr(err))
	}
	return fmt.Errorf("fdbkv: open cluster file %q: %w", clusterFile, convertErr(err))
}
