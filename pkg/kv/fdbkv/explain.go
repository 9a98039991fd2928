//go:build fdb

package fdbkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// statusKey is FoundationDB's status document in the special key space:
// the client reads it from the coordinators and the cluster controller,
// also while the database is unavailable.
const statusKey = "\xff\xff/status/json"

// Explain implements kv.Explainer: after a failed probe it says, in one
// sentence, what an operator should check. It reads the cluster file
// itself (missing, unreadable, not a cluster file), maps the tenant errors,
// and after a timeout, for :tls coordinators, shakes hands with one to
// tell a certificate refused or a wrong CA (explainTLS), then reads
// FoundationDB's status to tell coordinators
// that do not answer from a cluster with no database yet and from a
// database that is not available.
func (d *database) Explain(ctx context.Context, err error) string {
	file := d.h.clusterFile
	if file == "" {
		file = os.Getenv("FDB_CLUSTER_FILE")
	}
	if file != "" {
		content, rerr := os.ReadFile(file)
		switch {
		case errors.Is(rerr, fs.ErrNotExist):
			return fmt.Sprintf("the cluster file %s does not exist: set [fdb] cluster_file (-cluster-file) to the cluster's fdb.cluster (FoundationDB's packages install it as /etc/foundationdb/fdb.cluster)", file)
		case errors.Is(rerr, fs.ErrPermission):
			return fmt.Sprintf("the cluster file %s cannot be read by this process: give its user read and write access (the client rewrites it when the coordinators change)", file)
		case rerr != nil:
			return fmt.Sprintf("the cluster file %s cannot be read: %v", file, rerr)
		case !validClusterString(string(content)):
			return fmt.Sprintf("the cluster file %s is not a FoundationDB cluster file: it must hold one line description:ID@host:port[,host:port...], as fdbcli and FoundationDB's packages write it", file)
		}
	}
	switch {
	case kv.HasCode(err, kv.CodeTenantNotFound):
		return fmt.Sprintf("the tenant %q does not exist on this cluster: create it (fdbcli: tenant create %s), or leave [fdb] tenant empty", d.tenantName, d.tenantName)
	case kv.HasCode(err, kv.CodeTenantsDisabled), kv.HasCode(err, 2130), kv.HasCode(err, 2138):
		return "this cluster does not allow tenants as [fdb] tenant asks: configure it (fdbcli: configure tenant_mode=optional_experimental), or leave [fdb] tenant empty"
	case kv.HasCode(err, CodeClusterFileMissing):
		return "no cluster file was found: set [fdb] cluster_file (-cluster-file) to the cluster's fdb.cluster"
	case !kv.HasCode(err, kv.CodeTransactionTimedOut) && !kv.HasCode(err, kv.CodeTimedOut):
		return ""
	}
	if file != "" {
		// Before the status, which waits as long as the handshakes fail.
		if content, err := os.ReadFile(file); err == nil && tlsCoordinators(string(content)) {
			addrs := coordinators(string(content))
			down := unreachable(addrs)
			up := slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return slices.Contains(down, a) })
			if why := explainTLS(ctx, up, d.tls); why != "" {
				return why
			}
		}
	}
	st, serr := d.status(ctx)
	if serr != nil {
		// The status document takes long to gather on a cluster without
		// a database (15 s on 7.3.79): tell the cases apart by whether
		// the coordinators take connections.
		if file != "" {
			if content, err := os.ReadFile(file); err == nil {
				if down := unreachable(coordinators(string(content))); len(down) > 0 {
					return fmt.Sprintf("coordinators listed in %s do not take connections (%s): check that fdbserver runs there and that this host can reach their ports", file, strings.Join(down, ", "))
				}
				return fmt.Sprintf("the coordinators listed in %s take connections but the database does not answer: it may never have been created (fdbcli --exec \"configure new single ssd\" creates it once) or be recovering (see fdbcli status)", file)
			}
		}
		return fmt.Sprintf("no answer from the coordinators listed in %s within the probe's time: check that fdbserver runs there and that this host can reach their ports", fileOrDefault(file))
	}
	switch {
	case !st.Client.Coordinators.QuorumReachable:
		return fmt.Sprintf("not enough of the coordinators listed in %s answer (%s): check that fdbserver runs there and that this host can reach their ports", fileOrDefault(file), st.unreachable())
	case st.Cluster.RecoveryState.Name == "configuration_never_created":
		return fmt.Sprintf("the cluster of %s has no database yet (its coordinators know of none): create it once, e.g. fdbcli --exec \"configure new single ssd\" (double or triple redundancy on several machines)", fileOrDefault(file))
	case !st.Client.DatabaseStatus.Available:
		why := st.Cluster.RecoveryState.Description
		if why == "" {
			why = st.Cluster.RecoveryState.Name
		}
		return fmt.Sprintf("the cluster of %s answers but its database is not available (%s): see fdbcli status", fileOrDefault(file), strings.TrimSuffix(why, "."))
	}
	return ""
}

// CodeClusterFileMissing is FoundationDB's no_cluster_file_found.
const CodeClusterFileMissing = 1515

func fileOrDefault(file string) string {
	if file == "" {
		return "the default cluster file"
	}
	return file
}

// validClusterString reports whether s has the shape of a cluster file's
// connection string: description:ID@addresses.
func validClusterString(s string) bool {
	line := strings.TrimSpace(s)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = strings.TrimSpace(line[:i])
	}
	at := strings.IndexByte(line, '@')
	colon := strings.IndexByte(line, ':')
	return colon > 0 && at > colon+1 && at < len(line)-1
}

// coordinators returns the addresses (host:port) a cluster file lists.
func coordinators(content string) []string {
	line := strings.TrimSpace(content)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	at := strings.IndexByte(line, '@')
	if at < 0 {
		return nil
	}
	var out []string
	for _, a := range strings.Split(line[at+1:], ",") {
		a = strings.TrimSuffix(strings.TrimSpace(a), ":tls")
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

// coordinatorDialTimeout bounds each connection attempt of unreachable.
const coordinatorDialTimeout = time.Second

// unreachable returns the addresses that do not take a TCP connection
// within coordinatorDialTimeout, trying them all at once.
func unreachable(addrs []string) []string {
	down := make([]bool, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", a, coordinatorDialTimeout)
			if err != nil {
				down[i] = true
				return
			}
			_ = c.Close()
		}()
	}
	wg.Wait()
	var out []string
	for i, a := range addrs {
		if down[i] {
			out = append(out, a)
		}
	}
	return out
}

// clusterStatus is the part of FoundationDB's status document Explain
// reads.
type clusterStatus struct {
	Client struct {
		Coordinators struct {
			QuorumReachable bool `json:"quorum_reachable"`
			Coordinators    []struct {
				Address   string `json:"address"`
				Reachable bool   `json:"reachable"`
			} `json:"coordinators"`
		} `json:"coordinators"`
		DatabaseStatus struct {
			Available bool `json:"available"`
		} `json:"database_status"`
	} `json:"client"`
	Cluster struct {
		RecoveryState struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"recovery_state"`
	} `json:"cluster"`
}

func (s clusterStatus) unreachable() string {
	var out []string
	for _, c := range s.Client.Coordinators.Coordinators {
		if !c.Reachable {
			out = append(out, c.Address)
		}
	}
	if len(out) == 0 {
		return "none reachable"
	}
	return "unreachable: " + strings.Join(out, ", ")
}

// status reads FoundationDB's status document, outside any tenant, within
// ctx.
func (d *database) status(ctx context.Context) (clusterStatus, error) {
	var st clusterStatus
	tr, err := d.h.db.CreateTransaction()
	if err != nil {
		return st, convertErr(err)
	}
	defer tr.Cancel()
	if dl, ok := ctx.Deadline(); ok {
		ms := max(1, time.Until(dl).Milliseconds())
		if err := tr.Options().SetTimeout(ms); err != nil {
			return st, convertErr(err)
		}
	}
	v, err := tr.Get(fdb.Key(statusKey)).Get()
	if err != nil {
		return st, convertErr(err)
	}
	if err := json.Unmarshal(v, &st); err != nil {
		return st, err
	}
	return st, nil
}
