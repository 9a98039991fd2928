//go:build fdb

package fdbkv

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// APIVersion is the FoundationDB client API version Open selects.
const APIVersion = 730

// codeAPIVersionAlreadySet is FoundationDB's api_version_already_set.
const codeAPIVersionAlreadySet = 2201

// handle is one FoundationDB database handle shared by every Open of the
// same cluster file; the binding caches handles by cluster file, so they
// must be shared and destroyed only when the last user closes.
type handle struct {
	clusterFile string
	db          fdb.Database
	refs        int
}

var (
	handlesMu sync.Mutex
	handles   = map[string]*handle{}
)

// Open connects to the FoundationDB cluster named by clusterFile, or by the
// platform's default cluster file when clusterFile is empty. It selects
// APIVersion first; it fails with ErrAPIVersion when the process already
// selected another version. Close the Database when done.
func Open(clusterFile string) (kv.Database, error) {
	handlesMu.Lock()
	defer handlesMu.Unlock()
	if err := fdb.APIVersion(APIVersion); err != nil {
		if kv.HasCode(convertErr(err), codeAPIVersionAlreadySet) {
			return nil, ErrAPIVersion
		}
		return nil, openError(clusterFile, err)
	}
	h := handles[clusterFile]
	if h == nil {
		db, err := fdb.OpenDatabase(clusterFile)
		if err != nil {
			return nil, openError(clusterFile, err)
		}
		h = &handle{clusterFile: clusterFile, db: db}
		handles[clusterFile] = h
	}
	h.refs++
	return &database{h: h}, nil
}

// database adapts fdb.Database to kv.Database.
type database struct {
	h      *handle
	closed atomic.Bool
}

var _ kv.Database = (*database)(nil)

func (d *database) CreateTransaction() (kv.Transaction, error) {
	if d.closed.Load() {
		return nil, kv.ErrDatabaseClosed
	}
	tr, err := d.h.db.CreateTransaction()
	if err != nil {
		return nil, convertErr(err)
	}
	return newTransaction(d, tr), nil
}

// Transact runs f in kv's retry loop; see kv.Transactor.
func (d *database) Transact(ctx context.Context, f func(kv.Transaction) (any, error)) (any, error) {
	return kv.Run(ctx, d.CreateTransaction, f)
}

// ReadTransact runs f in kv's retry loop without committing; see
// kv.ReadTransactor.
func (d *database) ReadTransact(ctx context.Context, f func(kv.ReadTransaction) (any, error)) (any, error) {
	return kv.RunRead(ctx, d.CreateTransaction, f)
}

// Close releases this handle; the FoundationDB handle is destroyed when the
// last Database opened on the same cluster file is closed. Closing twice is
// a no-op.
func (d *database) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	handlesMu.Lock()
	defer handlesMu.Unlock()
	d.h.refs--
	if d.h.refs == 0 {
		delete(handles, d.h.clusterFile)
		d.h.db.Close()
	}
	return nil
}
