//go:build fdb

package fdbkv

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	// network is the TLS the process's FoundationDB network was set up
	// with; nil before the first Open.
	network *TLS
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
	if err := checkTLS(clusterFile, o.TLS, time.Now()); err != nil {
		return nil, err
	}
	if err := setupNetwork(o.TLS); err != nil {
		return nil, err
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
	d := &database{h: h, timeoutMs: o.timeoutMillis(), tenantName: o.Tenant, tls: o.TLS}
	if o.Tenant != "" {
		t, err := h.db.OpenTenant(fdb.Key(o.Tenant))
		if err != nil {
			return nil, openError(clusterFile, err)
		}
		d.tenant = &t
	}
	h.refs++
	return d, nil
}

// setupNetwork sets the process's FoundationDB network options from t
// on the first Open (the binding starts the network with the first
// database, after which they cannot change), and checks that a later
// Open asks for the same. Called with handlesMu held.
func setupNetwork(t TLS) error {
	if t.Refresh == 0 {
		t.Refresh = TLSRefreshDefault
	}
	if network != nil {
		if *network != t {
			return ErrTLSChanged
		}
		return nil
	}
	o := fdb.Options()
	set := []struct {
		value string
		apply func(string) error
	}{
		{t.CertificateFile, o.SetTLSCertPath},
		{t.KeyFile, o.SetTLSKeyPath},
		{t.CAFile, o.SetTLSCaPath},
		{t.VerifyPeers, func(v string) error { return o.SetTLSVerifyPeers([]byte(v)) }},
		{fmt.Sprintf("tls_cert_refresh_delay_seconds=%d", max(1, int64(t.Refresh/time.Second))), o.SetKnob},
	}
	for _, s := range set {
		if s.value == "" {
			continue
		}
		if err := s.apply(s.value); err != nil {
			return fmt.Errorf("%w: FoundationDB's client refused the setting %q: %w", ErrTLS, s.value, convertErr(err))
		}
	}
	network = &t
	return nil
}

// database adapts fdb.Database, or one of its tenants, to kv.Database.
type database struct {
	h          *handle
	tenant     *fdb.Tenant // nil: the whole database
	tenantName string
	tls        TLS   // as Open was given it, for Explain
	timeoutMs  int64 // set on every new or reset transaction; 0: none
	closed     atomic.Bool
}

var _ kv.Database = (*database)(nil)

func (d *database) CreateTransaction() (kv.Transaction, error) {
	d.h.mu.RLock()
	defer d.h.mu.RUnlock()
	if d.closed.Load() || d.h.destroyed {
		return nil, kv.ErrDatabaseClosed
	}
	var tr fdb.Transaction
	var err error
	if d.tenant != nil {
		tr, err = d.tenant.CreateTransaction()
	} else {
		tr, err = d.h.db.CreateTransaction()
	}
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

// String names the cluster file (and the tenant), for kv.Probe's error.
func (d *database) String() string {
	s := "FoundationDB (default cluster file"
	if d.h.clusterFile != "" {
		s = fmt.Sprintf("FoundationDB (cluster file %s", d.h.clusterFile)
	}
	if d.tenantName != "" {
		s += fmt.Sprintf(", tenant %q", d.tenantName)
	}
	return s + ")"
}

// FoundationDB marks the database as a real FoundationDB's, for the tests
// that accept what FoundationDB may do and the embedded store never does
// (kvtest).
func (d *database) FoundationDB() {}

// CreateTenant creates the tenant name in the cluster of db (a Database
// of this package, opened without a tenant). It fails when the tenant
// exists, and with FoundationDB's error when the cluster does not allow
// tenants.
func CreateTenant(ctx context.Context, db kv.Database, name string) error {
	return tenantOp(ctx, db, func(tr fdb.Transaction) error { return tr.CreateTenant(fdb.Key(name)) })
}

// DeleteTenant deletes the tenant name, which must be empty (clear its
// keys first, in a transaction of the tenant).
func DeleteTenant(ctx context.Context, db kv.Database, name string) error {
	return tenantOp(ctx, db, func(tr fdb.Transaction) error { return tr.DeleteTenant(fdb.Key(name)) })
}

func tenantOp(ctx context.Context, db kv.Database, op func(fdb.Transaction) error) error {
	d, ok := db.(*database)
	if !ok || d.tenant != nil {
		return fmt.Errorf("fdbkv: tenants are managed through a FoundationDB database opened without a tenant, not %v", db)
	}
	_, err := d.Transact(ctx, func(tr kv.Transaction) (any, error) {
		err := op(tr.(*transaction).tr)
		if fe, ok := err.(fdb.Error); ok {
			return nil, convertErr(fe)
		}
		return nil, err
	})
	return err
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
