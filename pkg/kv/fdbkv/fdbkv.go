//go:build fdb

package fdbkv

import (
	"context"
	"fmt"
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
// must be shared and destroyed only when the last user closes. mu is held
// shared while a transaction is created on the handle and exclusively
// while it is destroyed, so that no creation uses a destroyed handle.
type handle struct {
	clusterFile string
	db          fdb.Database
	refs        int // guarded by handlesMu

	mu        sync.RWMutex
	destroyed bool // guarded by mu
}

var (
	handlesMu sync.Mutex
	handles   = map[string]*handle{}
)

// Open is OpenWithOptions with the default Options.
func Open(clusterFile string) (kv.Database, error) {
	return OpenWithOptions(clusterFile, Options{})
}

// OpenWithOptions connects to the FoundationDB cluster named by
// clusterFile, or by the platform's default cluster file when clusterFile
// is empty. It selects APIVersion first; it fails with ErrAPIVersion when
// the process already selected another version. Opening contacts nobody:
// call kv.Probe to find out whether the cluster answers. Close the Database
// when done.
func OpenWithOptions(clusterFile string, o Options) (kv.Database, error) {
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
	return &database{h: h, timeoutMs: o.timeoutMillis()}, nil
}

// database adapts fdb.Database to kv.Database.
type database struct {
	h         *handle
	timeoutMs int64 // set on every new or reset transaction; 0: none
	closed    atomic.Bool
}

var _ kv.Database = (*database)(nil)

func (d *database) CreateTransaction() (kv.Transaction, error) {
	d.h.mu.RLock()
	defer d.h.mu.RUnlock()
	if d.closed.Load() || d.h.destroyed {
		return nil, kv.ErrDatabaseClosed
	}
	tr, err := d.h.db.CreateTransaction()
	if err != nil {
		return nil, convertErr(err)
	}
	t := newTransaction(d, tr)
	if err := t.setDefaults(); err != nil {
		tr.Cancel()
		return nil, err
	}
	return t, nil
}

// String names the cluster file, for kv.Probe's error.
func (d *database) String() string {
	if d.h.clusterFile == "" {
		return "FoundationDB (default cluster file)"
	}
	return fmt.Sprintf("FoundationDB (cluster file %s)", d.h.clusterFile)
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
		d.h.mu.Lock()
		d.h.destroyed = true
		d.h.db.Close()
		d.h.mu.Unlock()
	}
	return nil
}
