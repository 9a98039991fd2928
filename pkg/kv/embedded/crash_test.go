package embedded

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// crashDirEnv switches TestCrashChild on: it then runs a durable load in
// the directory it names until it is killed.
const crashDirEnv = "FDBREP_EMBEDDED_CRASH_DIR"

const crashWorkers = 8

// TestCrashChild is the child process of TestCrashRecovery. Each worker
// commits transactions that write two keys, bump a shared counter and add
// a versionstamped key, and prints "ack <worker> <seq> <version>" for every
// acknowledged commit.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("child process of TestCrashRecovery")
	}
	db, err := Open(Options{Dir: dir})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		outMu.Unlock()
	}
	emit("ready")
	var wg sync.WaitGroup
	for w := range crashWorkers {
		wg.Go(func() {
			// Continue after what a previous round left.
			seq, err := kv.ReadTransact(t.Context(), db, func(tr kv.ReadTransaction) (int, error) {
				return crashNextSeq(tr, w)
			})
			if err != nil {
				emit("error %v", err)
				os.Exit(4)
			}
			for ; ; seq++ {
				var tr kv.Transaction
				_, err := db.Transact(t.Context(), func(t kv.Transaction) (any, error) {
					tr = t
					crashTxn(t, w, seq)
					return nil, nil
				})
				if err != nil {
					emit("error %v", err)
					os.Exit(4)
				}
				cv, _ := tr.GetCommittedVersion()
				emit("ack %d %d %d", w, seq, cv)
			}
		})
	}
	wg.Wait()
}

func crashKey(w, seq int, part string) kv.Key {
	return kv.Key(fmt.Sprintf("crash/%d/%08d/%s", w, seq, part))
}

func crashTxn(tr kv.Transaction, w, seq int) {
	val := []byte(fmt.Sprintf("%d-%d", w, seq))
	tr.Set(crashKey(w, seq, "a"), val)
	tr.Set(crashKey(w, seq, "b"), val)
	tr.Add(kv.Key("count"), binary.LittleEndian.AppendUint64(nil, 1))
	k := append([]byte("stamp/"), make([]byte, 10)...)
	k = binary.LittleEndian.AppendUint32(k, 6)
	tr.SetVersionstampedKey(kv.Key(k), val)
}

// crashNextSeq returns the first sequence number worker w has not
// committed.
func crashNextSeq(tr kv.ReadTransaction, w int) (int, error) {
	r, err := kv.PrefixRange([]byte(fmt.Sprintf("crash/%d/", w)))
	if err != nil {
		return 0, err
	}
	kvs, err := tr.GetRange(r, kv.RangeOptions{Limit: 1, Reverse: true}).GetSliceWithError()
	if err != nil || len(kvs) == 0 {
		return 0, err
	}
	parts := strings.Split(string(kvs[0].Key), "/")
	n, err := strconv.Atoi(parts[2])
	return n + 1, err
}

// TestCrashRecovery kills a child process running a durable load at a
// random moment, reopens the store and checks that every acknowledged
// commit survived, that each transaction is all-or-nothing, and that
// versions keep increasing.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	dir := t.TempDir()
	acked := map[[2]int]bool{}
	var maxVersion int64
	const rounds = 3
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		lines := bufio.NewScanner(stdout)
		require.True(t, lines.Scan(), "child output")
		require.Equal(t, "ready", lines.Text())
		delay := time.Duration(20+rng.IntN(200)) * time.Millisecond
		t.Logf("round %d: kill after %v", round, delay)
		killer := time.AfterFunc(delay, func() { _ = cmd.Process.Kill() })
		n := 0
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			require.Equal(t, "ack", f[0], lines.Text())
			w, _ := strconv.Atoi(f[1])
			seq, _ := strconv.Atoi(f[2])
			v, _ := strconv.ParseInt(f[3], 10, 64)
			acked[[2]int{w, seq}] = true
			maxVersion = max(maxVersion, v)
			n++
		}
		killer.Stop()
		_ = cmd.Wait()
		t.Logf("round %d: %d commits acknowledged before the kill", round, n)
		crashVerify(t, dir, acked, maxVersion)
	}
}

func crashVerify(t *testing.T, dir string, acked map[[2]int]bool, maxVersion int64) {
	t.Helper()
	db := openDir(t, dir)
	defer func() { require.NoError(t, db.Close()) }()
	// Everything is read first, in one transaction, well within its
	// lifetime (the checks below take seconds on a loaded machine).
	tr := newTr(t, db)
	all, err := tr.GetRange(kr("crash/", "crash0"), kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err)
	count, err := tr.Get(kv.Key("count")).Get()
	require.NoError(t, err)
	stamps, err := tr.GetRange(kr("stamp/", "stamp0"), kv.RangeOptions{}).GetSliceWithError()
	require.NoError(t, err)
	present := map[[2]int]map[string]string{}
	for _, e := range all {
		parts := strings.Split(string(e.Key), "/")
		w, _ := strconv.Atoi(parts[1])
		seq, _ := strconv.Atoi(parts[2])
		id := [2]int{w, seq}
		if present[id] == nil {
			present[id] = map[string]string{}
		}
		present[id][parts[3]] = string(e.Value)
	}
	for id := range acked {
		if _, ok := present[id]; !ok {
			require.Failf(t, "acknowledged commit lost", "%v", id)
		}
	}
	perWorker := map[int]int{}
	for id, parts := range present {
		require.Len(t, parts, 2, "transaction %v is partial", id)
		require.Equal(t, parts["a"], parts["b"])
		perWorker[id[0]]++
	}
	// Each worker commits in sequence: what survived is a prefix.
	for id := range present {
		require.Less(t, id[1], perWorker[id[0]], "worker %d has a gap", id[0])
	}
	if len(present) > 0 {
		require.Equal(t, uint64(len(present)), binary.LittleEndian.Uint64(count), "counter matches the transactions")
	}
	require.Len(t, stamps, len(present), "one versionstamped key per transaction")
	// Versions increase across the crash.
	w := newTr(t, db)
	w.Set(kv.Key("after"), nil)
	_, err = w.Commit().Get()
	require.NoError(t, err)
	cv, err := w.GetCommittedVersion()
	require.NoError(t, err)
	require.Greater(t, cv, maxVersion)
	if len(stamps) > 0 {
		last := stamps[len(stamps)-1].Key[len("stamp/"):]
		require.Greater(t, uint64(cv), binary.BigEndian.Uint64(last))
	}
}
