//go:build fdb

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fdbrep/fdbrep/pkg/kv"
	"github.com/fdbrep/fdbrep/pkg/kv/fdbkv"
)

func init() {
	openFDBStore = openTenant
	openFDBTenant = reopenTenant
	describeFDB = fdbDescription
	fdbServerCPU = serverCPU
}

// serverCPU returns the CPU time the cluster's fdbserver processes used so
// far, when they run on this machine: the processes whose pid files
// ../shared/fdb's fdb.sh keeps beside the cluster file (proc-N.pid). It
// returns 0 for a cluster elsewhere (none of those files).
func serverCPU() time.Duration {
	pids, _ := filepath.Glob(filepath.Join(filepath.Dir(fdbClusterFile()), "proc-*.pid"))
	var sum time.Duration
	for _, f := range pids {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		sum += procCPU(pid)
	}
	return sum
}

// admins are the clusters' databases without a tenant, by cluster file.
var admins struct {
	sync.Mutex
	m map[string]kv.Database
}

// fdbAdmin opens the cluster of fdbClusterFile without a tenant, once.
func fdbAdmin() (kv.Database, error) {
	admins.Lock()
	defer admins.Unlock()
	file := fdbClusterFile()
	if db, ok := admins.m[file]; ok {
		return db, nil
	}
	db, err := fdbkv.Open(file)
	if err == nil {
		err = kv.Probe(context.Background(), db, 0)
	}
	if err != nil {
		return nil, err
	}
	if admins.m == nil {
		admins.m = map[string]kv.Database{}
	}
	admins.m[file] = db
	return db, nil
}

// openTenant opens a new tenant of the cluster for a benchmark's store and
// returns it with its name; drop empties and deletes it.
func openTenant(name string) (db kv.Database, tenant string, drop func(), err error) {
	a, err := fdbAdmin()
	if err != nil {
		return nil, "", nil, err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	tenant = "fdbrep-bench/" + name + "/" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fdbkv.CreateTenant(ctx, a, tenant); err != nil {
		return nil, "", nil, fmt.Errorf("creating tenant %q (the cluster must allow tenants: fdbcli configure tenant_mode=optional_experimental): %w", tenant, err)
	}
	if db, err = reopenTenant(tenant); err != nil {
		return nil, "", nil, err
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// One range clear, whatever the tenant holds.
		_, _ = db.Transact(ctx, func(tr kv.Transaction) (any, error) {
			tr.ClearRange(kv.KeyRange{Begin: kv.Key(""), End: kv.Key("\xff")})
			return nil, nil
		})
		_ = db.Close()
		_ = fdbkv.DeleteTenant(ctx, a, tenant)
	}
	return db, tenant, drop, nil
}

// reopenTenant opens the existing tenant of the cluster.
func reopenTenant(tenant string) (kv.Database, error) {
	db, err := fdbkv.OpenWithOptions(fdbClusterFile(), fdbkv.Options{Tenant: tenant})
	if err != nil {
		return nil, fmt.Errorf("opening tenant %q: %w", tenant, err)
	}
	return db, nil
}

// fdbDescription names the cluster and its configuration, from its status.
func fdbDescription() string {
	desc := fmt.Sprintf("FoundationDB (cluster file %s", fdbClusterFile())
	a, err := fdbAdmin()
	if err != nil {
		return desc + ")"
	}
	tr, err := a.CreateTransaction()
	if err != nil {
		return desc + ")"
	}
	defer tr.Cancel()
	v, err := tr.Get(kv.Key("\xff\xff/status/json")).Get()
	var st struct {
		Cluster struct {
			Configuration struct {
				RedundancyMode string `json:"redundancy_mode"`
				StorageEngine  string `json:"storage_engine"`
			} `json:"configuration"`
			Processes map[string]json.RawMessage `json:"processes"`
		} `json:"cluster"`
	}
	if err != nil || json.Unmarshal(v, &st) != nil {
		return desc + ")"
	}
	c := st.Cluster
	return fmt.Sprintf("%s, %d processes, %s redundancy, storage engine %s)", desc, len(c.Processes),
		c.Configuration.RedundancyMode, c.Configuration.StorageEngine)
}
