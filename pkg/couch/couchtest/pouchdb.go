package couchtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// StartTimeoutDefault bounds how long StartPouchDB waits for GET / to answer
// after starting the process (a start normally takes well under 2 s).
const StartTimeoutDefault = 60 * time.Second

// startAttempts is how often StartPouchDB retries when the process dies before
// answering or another process answers on its port, which happen when that
// process grabbed the free port first.
const startAttempts = 3

// Server is a running pouchdb-server peer. Its methods that take a
// testing.TB fail the test on any error; they are meant for test set-up and
// assertions, not for the code under test.
type Server struct {
	base     *url.URL // http://127.0.0.1:port, no userinfo
	dir      string
	logPath  string
	admin    string
	password string
	client   *http.Client

	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has exited
	waitErr  error         // set before exited is closed
	stopOnce sync.Once
	stopped  atomic.Bool // Stop was called
	onStop   func()      // extra clean-up (LaunchPouchDB's temp dir)
	// halt stops a server that is not this process's child (CouchDB,
	// started by its script); nil for pouchdb-server.
	halt func()
	name string // "pouchdb-server" or "CouchDB", for messages
	// uuid is the server uuid this pouchdb-server was configured with:
	// waitReady takes only an answer that names it, since another process
	// that took the free port first answers too ("" for CouchDB).
	uuid string
}

// Option configures StartPouchDB.
type Option func(*startConfig)

type startConfig struct {
	admin, password string
	timeout         time.Duration
}

// WithAdmin makes the peer require a server admin (name, password) for
// server-level operations; without it the peer runs in "admin party" mode.
// Anonymous requests may still read and write databases that have no
// _security members, as on CouchDB 1.x. The helper methods of Server
// authenticate as this admin.
func WithAdmin(name, password string) Option {
	return func(c *startConfig) { c.admin, c.password = name, password }
}

// WithStartTimeout replaces StartTimeoutDefault.
func WithStartTimeout(d time.Duration) Option {
	return func(c *startConfig) { c.timeout = d }
}

// StartPouchDB starts an in-memory pouchdb-server on 127.0.0.1 and stops it
// in t.Cleanup. See the package documentation for how the binary is found.
func StartPouchDB(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := launch(func() (string, error) { return t.TempDir(), nil }, t.Logf, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.cleanup(t) })
	return s
}

// LaunchPouchDB is StartPouchDB for callers without a testing.TB (such as
// benchmarks): the caller must Stop the server, which also removes its
// working directory. The helper methods taking a testing.TB are not for
// such callers; talk to the server with pkg/couch instead.
func LaunchPouchDB(opts ...Option) (*Server, error) {
	var dirs []string
	mkdir := func() (string, error) {
		d, err := os.MkdirTemp("", "fdbrep-pouchdb-")
		if err != nil {
			return "", fmt.Errorf("couchtest: %w", err)
		}
		dirs = append(dirs, d)
		return d, nil
	}
	removeAll := func() {
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	}
	s, err := launch(mkdir, func(string, ...any) {}, opts...)
	if err != nil {
		removeAll()
		return nil, err
	}
	s.onStop = removeAll
	return s, nil
}

// launch validates the options, finds the binary and starts the server,
// retrying when it dies before answering (another process took the port).
func launch(mkdir func() (string, error), logf func(string, ...any), opts ...Option) (*Server, error) {
	cfg := startConfig{timeout: StartTimeoutDefault}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("couchtest: start timeout must be positive, got %v", cfg.timeout)
	}
	if strings.ContainsAny(cfg.admin, ":@/") {
		return nil, fmt.Errorf("couchtest: admin name %q must not contain ':', '@' or '/'", cfg.admin)
	}
	bin, err := pouchDBServerBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		dir, err := mkdir()
		if err != nil {
			return nil, err
		}
		s, err := startOnce(dir, bin, cfg)
		if err == nil {
			return s, nil
		}
		lastErr = err
		logf("couchtest: pouchdb-server start attempt %d failed: %v", attempt, err)
	}
	return nil, fmt.Errorf("couchtest: could not start pouchdb-server: %w", lastErr)
}

func startOnce(dir, bin string, cfg startConfig) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	configPath := filepath.Join(dir, "config.json")
	uuid := strconv.FormatInt(time.Now().UnixNano(), 16) + strconv.Itoa(os.Getpid())
	conf := map[string]any{
		"log":     map[string]any{"file": filepath.Join(dir, "log.txt")},
		"couchdb": map[string]any{"uuid": uuid},
	}
	if cfg.admin != "" {
		conf["admins"] = map[string]string{cfg.admin: cfg.password}
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(configPath, b, 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "stdout.txt")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child keeps its own descriptor

	cmd := exec.Command(bin, "--in-memory", "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--config", configPath, "--dir", filepath.Join(dir, "db"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{
		base:     &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
		dir:      dir,
		logPath:  logPath,
		admin:    cfg.admin,
		password: cfg.password,
		client:   peerClient(),
		cmd:      cmd,
		exited:   make(chan struct{}),
		name:     "pouchdb-server",
		uuid:     uuid,
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(cfg.timeout); err != nil {
		s.kill()
		return nil, fmt.Errorf("%w; output: %s", err, s.logTail())
	}
	return s, nil
}

// adminReady reports whether the peer takes the admin's credentials: GET
// /_session with them names the admin with the _admin role. pouchdb-server
// answers GET / before it has loaded the admins of its configuration, and
// meanwhile refuses them (401).
func (s *Server) adminReady(ctx context.Context) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/_session", nil)
	req.SetBasicAuth(s.admin, s.password)
	resp, err := s.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var session struct {
		UserCtx struct {
			Name  string   `json:"name"`
			Roles []string `json:"roles"`
		} `json:"userCtx"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&session) != nil {
		return false
	}
	return session.UserCtx.Name == s.admin && slices.Contains(session.UserCtx.Roles, "_admin")
}

// waitReady polls GET / until it answers 200 (and, with an admin, until
// the admin's credentials are taken: adminReady), the process exits or
// the timeout passes. A pouchdb-server's answer must name its own uuid: when
// another process took the port, the one that answers is not ours.
func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	delay := 20 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/", nil)
		resp, err := s.client.Do(req)
		var welcome struct {
			UUID string `json:"uuid"`
		}
		if err == nil {
			_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&welcome)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if s.uuid != "" && resp.StatusCode == http.StatusOK && welcome.UUID != s.uuid {
				cancel()
				return fmt.Errorf("%s: another process answers on %s (uuid %q)", s.name, s.URL(), welcome.UUID)
			}
		}
		if err == nil && resp.StatusCode == http.StatusOK && (s.admin == "" || s.adminReady(ctx)) {
			cancel()
			return nil
		}
		cancel()
		select {
		case <-s.exited:
			return fmt.Errorf("pouchdb-server exited before answering: %v", s.waitErr)
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pouchdb-server did not answer GET / within %v", timeout)
		}
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
}

// freePort asks the kernel for a free port on 127.0.0.1. Another process may
// take it before pouchdb-server binds it; StartPouchDB then retries.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) kill() {
	if s.halt != nil {
		s.halt()
		s.client.CloseIdleConnections()
		return
	}
	killProcessGroup(s.cmd)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
	s.client.CloseIdleConnections()
}

func (s *Server) cleanup(t testing.TB) {
	select {
	case <-s.exited:
		if !s.stopped.Load() {
			t.Logf("couchtest: %s %s exited during the test (%v); output tail:\n%s", s.name, s.URL(), s.waitErr, s.logTail())
		}
	default:
	}
	s.Stop()
}

// Stop kills the peer (its whole process group) and waits for it to exit. It
// may be called more than once; t.Cleanup calls it too.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.stopped.Store(true)
		s.kill()
		if s.onStop != nil {
			s.onStop()
		}
	})
}

// Exited reports whether the process has exited (after Stop, or because it
// crashed, which some malformed requests make pouchdb-server 4.2.0 do).
func (s *Server) Exited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	return tail(b, 4000)
}

// URL is the server root without a trailing slash, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string { return s.base.String() }

// DBURL is the URL of database name (escaped), without credentials or trailing
// slash.
func (s *Server) DBURL(name string) string { return s.URL() + "/" + url.PathEscape(name) }

// AuthDBURL is DBURL with the admin's credentials as URL userinfo (as users
// write replication endpoints); without WithAdmin it equals DBURL.
func (s *Server) AuthDBURL(name string) string {
	if s.admin == "" {
		return s.DBURL(name)
	}
	u := *s.base
	u.User = url.UserPassword(s.admin, s.password)
	return u.String() + "/" + url.PathEscape(name)
}

// Admin returns the admin credentials given to WithAdmin ("" when none).
func (s *Server) Admin() (name, password string) { return s.admin, s.password }

// peerClient is the client of a peer's helpers. It drops a connection
// idle for a second: pouchdb-server (Node.js) closes one idle for 5 s, and
// a request sent on it as it closes is reset, which Go retries for no PUT
// or POST (a test that spent a while building a binary after starting its
// peer failed its next PUT so).
func peerClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true, IdleConnTimeout: time.Second}}
}

// Dir is the peer's working directory (config.json, log.txt, stdout.txt).
func (s *Server) Dir() string { return s.dir }

// Request sends one request as the admin (if any) with a JSON body (nil for
// none; []byte is sent as is) and decodes a JSON reply into out (if non-nil
// and the reply is 2xx). It fails the test on a transport error and returns
// the status code; path is relative to the server root ("/db/doc").
func (s *Server) Request(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			b, err = json.Marshal(body)
			require.NoError(t, err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, rd)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.admin != "" {
		req.SetBasicAuth(s.admin, s.password)
	}
	resp, err := s.client.Do(req)
	require.NoError(t, err, "couchtest: %s %s", method, path)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "couchtest: %s %s", method, path)
	if out != nil && resp.StatusCode/100 == 2 {
		require.NoError(t, json.Unmarshal(data, out), "couchtest: %s %s: decode %q", method, path, data)
	}
	return resp.StatusCode
}

// must sends a request and requires one of the wanted statuses.
func (s *Server) must(t testing.TB, method, path string, body, out any, want ...int) {
	t.Helper()
	code := s.Request(t, method, path, body, out)
	require.Contains(t, want, code, "couchtest: %s %s answered %d", method, path, code)
}

// CreateDB creates database name.
func (s *Server) CreateDB(t testing.TB, name string) {
	t.Helper()
	s.must(t, http.MethodPut, "/"+url.PathEscape(name), nil, nil, http.StatusCreated)
}

// DeleteDB deletes database name.
func (s *Server) DeleteDB(t testing.TB, name string) {
	t.Helper()
	s.must(t, http.MethodDelete, "/"+url.PathEscape(name), nil, nil, http.StatusOK)
}

// DBInfo returns GET /db.
func (s *Server) DBInfo(t testing.TB, db string) map[string]any {
	t.Helper()
	var info map[string]any
	s.must(t, http.MethodGet, "/"+url.PathEscape(db), nil, &info, http.StatusOK)
	return info
}

// DocPath is the escaped path of a document below the server root; the
// _design/ and _local/ prefixes keep their slash.
func DocPath(db, id string) string {
	for _, p := range []string{"_design/", "_local/"} {
		if strings.HasPrefix(id, p) {
			return "/" + url.PathEscape(db) + "/" + p + url.PathEscape(id[len(p):])
		}
	}
	return "/" + url.PathEscape(db) + "/" + url.PathEscape(id)
}

// PutDoc writes doc (which must carry "_id", and "_rev" to update) and
// returns the new revision.
func (s *Server) PutDoc(t testing.TB, db string, doc map[string]any) string {
	t.Helper()
	id, ok := doc["_id"].(string)
	require.True(t, ok && id != "", "couchtest: PutDoc needs a string _id")
	var res struct {
		Rev string `json:"rev"`
	}
	s.must(t, http.MethodPut, DocPath(db, id), doc, &res, http.StatusCreated, http.StatusOK)
	return res.Rev
}

// GetDoc returns the winning revision of a document, or nil when it is
// missing or deleted. query is appended as is (e.g. "revs=true").
func (s *Server) GetDoc(t testing.TB, db, id string, query ...string) map[string]any {
	t.Helper()
	path := DocPath(db, id)
	if len(query) > 0 {
		path += "?" + strings.Join(query, "&")
	}
	var doc map[string]any
	code := s.Request(t, http.MethodGet, path, nil, &doc)
	if code == http.StatusNotFound {
		return nil
	}
	require.Equal(t, http.StatusOK, code, "couchtest: GET %s", path)
	return doc
}

// BulkResult is one entry of a _bulk_docs reply.
type BulkResult struct {
	ID     string `json:"id"`
	Rev    string `json:"rev,omitempty"`
	OK     bool   `json:"ok,omitempty"`
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// BulkDocs writes docs with POST _bulk_docs and returns the per-doc results;
// it does not fail on per-doc errors. With newEdits false the docs must carry
// _rev (and _revisions) and are stored as given (pouchdb-server then returns
// only errors).
func (s *Server) BulkDocs(t testing.TB, db string, docs []map[string]any, newEdits bool) []BulkResult {
	t.Helper()
	if docs == nil {
		docs = []map[string]any{}
	}
	body := map[string]any{"docs": docs}
	if !newEdits {
		body["new_edits"] = false
	}
	var res []BulkResult
	s.must(t, http.MethodPost, "/"+url.PathEscape(db)+"/_bulk_docs", body, &res, http.StatusCreated, http.StatusOK)
	return res
}

// AddDocs writes n small documents doc-<first>…doc-<first+n-1> (ids
// zero-padded to 8 digits so they sort numerically) in batches of 1000 and
// returns their ids.
func (s *Server) AddDocs(t testing.TB, db string, first, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for start := 0; start < n; start += 1000 {
		end := min(start+1000, n)
		docs := make([]map[string]any, 0, end-start)
		for i := start; i < end; i++ {
			id := fmt.Sprintf("doc-%08d", first+i)
			ids = append(ids, id)
			docs = append(docs, map[string]any{"_id": id, "n": first + i})
		}
		for _, r := range s.BulkDocs(t, db, docs, true) {
			require.Empty(t, r.Error, "couchtest: AddDocs %s: %s %s", r.ID, r.Error, r.Reason)
		}
	}
	return ids
}

// Row is one row of an _all_docs reply.
type Row struct {
	ID    string `json:"id"`
	Key   string `json:"key"`
	Value struct {
		Rev     string `json:"rev"`
		Deleted bool   `json:"deleted,omitempty"`
	} `json:"value"`
	Doc map[string]any `json:"doc,omitempty"`
}

// AllDocs returns every row of GET _all_docs (with include_docs=true when
// includeDocs), sorted by id.
func (s *Server) AllDocs(t testing.TB, db string, includeDocs bool) []Row {
	t.Helper()
	path := "/" + url.PathEscape(db) + "/_all_docs"
	if includeDocs {
		path += "?include_docs=true"
	}
	var res struct {
		Rows []Row `json:"rows"`
	}
	s.must(t, http.MethodGet, path, nil, &res, http.StatusOK)
	return res.Rows
}

// Change is one row of a _changes reply.
type Change struct {
	Seq     json.RawMessage `json:"seq"`
	ID      string          `json:"id"`
	Changes []struct {
		Rev string `json:"rev"`
	} `json:"changes"`
	Deleted bool `json:"deleted,omitempty"`
}

// Changes returns the normal (non-continuous) changes feed since seq ("0" for
// all) with style=all_docs, and its last_seq.
func (s *Server) Changes(t testing.TB, db, since string) ([]Change, json.RawMessage) {
	t.Helper()
	q := url.Values{"style": {"all_docs"}, "since": {since}}
	var res struct {
		Results []Change        `json:"results"`
		LastSeq json.RawMessage `json:"last_seq"`
	}
	s.must(t, http.MethodGet, "/"+url.PathEscape(db)+"/_changes?"+q.Encode(), nil, &res, http.StatusOK)
	return res.Results, res.LastSeq
}

// SetSecurity writes the database's _security object, e.g.
// {"members":{"names":["alice"]}} to close it to anonymous users.
func (s *Server) SetSecurity(t testing.TB, db string, sec map[string]any) {
	t.Helper()
	s.must(t, http.MethodPut, "/"+url.PathEscape(db)+"/_security", sec, nil, http.StatusOK, http.StatusCreated)
}
