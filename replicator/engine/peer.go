package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// peer is one side of a replication with the protocol calls built on its
// transport.
type peer struct {
	t transport
	// pouch is set during setup when the peer is a pouchdb-server (its
	// database info carries "adapter"), whose quirks the engine avoids.
	// Read-only afterwards.
	pouch bool
}

func (p *peer) url() string { return p.t.redacted() }

// side is "source" or "target", for messages ("peer" for a test's fake
// transport).
func (p *peer) side() string {
	if t, ok := p.t.(couchTransport); ok {
		return t.side
	}
	return "peer"
}

// jsonHeader is the header set of JSON requests. Compression is declined:
// peers and engine share a fast link, and a compressing peer (express's
// compression middleware) buffers streamed feeds.
func jsonHeader() http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"},
		"Accept-Encoding": {"identity"}}
}

// do sends a request with a JSON body (when body is not nil) and decodes a
// 2xx JSON reply, at most AnswerMax, into out (when out is not nil). Other
// statuses are the transport's *statusError.
func (p *peer) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	req := httpRequest{method: method, path: path, query: query}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		req.body = b
	}
	return p.doRequest(ctx, req, out)
}

// doRequest is do for a request built by the caller (its body encoded, its
// maxBody set), with the JSON header.
func (p *peer) doRequest(ctx context.Context, req httpRequest, out any) error {
	req.header = jsonHeader()
	res, err := p.t.call(ctx, req)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(res.body, out); err != nil {
			return fmt.Errorf("%w: %s %s: bad JSON reply: %v", ErrHTTP, req.method, p.url()+req.path, err)
		}
	}
	return nil
}

// replyLimit is the name of the limit of a reply that may be as long as
// its request, and AnswerMax more.
const replyLimit = "AnswerMax plus the request's size"

// dbInfo is the part of GET {db}/ the engine uses.
type dbInfo struct {
	UpdateSeq         json.RawMessage `json:"update_seq"`
	InstanceStartTime json.RawMessage `json:"instance_start_time"`
	Adapter           string          `json:"adapter"`
	DocCount          int64           `json:"doc_count"`
	DocDelCount       int64           `json:"doc_del_count"`
	// PurgeSeq changes with every purge (CouchDB 2.3 and later; absent
	// elsewhere).
	PurgeSeq json.RawMessage `json:"purge_seq"`
}

// info reads the database info, mapping failures as CouchDB's db_open does:
// 401 unauthorized, 403 forbidden (each followed by the peer's reason),
// anything else but a JSON object with update_seq and instance_start_time
// is db_not_found.
func (p *peer) info(ctx context.Context) (dbInfo, error) {
	var info dbInfo
	err := p.do(ctx, http.MethodGet, "", nil, nil, &info)
	switch {
	case err == nil && len(info.UpdateSeq) > 0 && len(info.InstanceStartTime) > 0:
		return info, nil
	case errors.Is(err, ErrUnauthorized):
		return info, fmt.Errorf("%w: unauthorized to access or create database %s%s", ErrUnauthorized, p.url(), accessRefusal(err))
	case errors.Is(err, ErrForbidden):
		return info, fmt.Errorf("%w: forbidden to access database %s%s", ErrForbidden, p.url(), accessRefusal(err))
	case err != nil && statusOf(err) == 0:
		return info, err // transport failure after retries, max backoff, context
	default:
		return info, fmt.Errorf("%w: could not open %s", ErrDBNotFound, p.url())
	}
}

// create issues PUT {db} with the given parameters; only 401 and 403 are
// errors (an existing database is fine).
func (p *peer) create(ctx context.Context, params json.RawMessage) error {
	q, err := objectQuery(params, nil)
	if err != nil {
		return fmt.Errorf("%w: create_target_params: %v", ErrInvalidSpec, err)
	}
	// An existing database needs no PUT (CouchDB's would be answered 412
	// and ignored).
	_, err = p.info(ctx)
	if err == nil || !errors.Is(err, ErrDBNotFound) {
		return err
	}
	// pouchdb-server 4.2 crashes on a PUT {db} from a non-admin: ask it
	// who we are first.
	if p.isPouchServer(ctx) && !p.isAdmin(ctx) {
		return fmt.Errorf("%w: unauthorized to access or create database %s", ErrUnauthorized, p.url())
	}
	err = p.do(ctx, http.MethodPut, "", q, nil, nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnauthorized):
		return fmt.Errorf("%w: unauthorized to access or create database %s%s", ErrUnauthorized, p.url(), accessRefusal(err))
	case errors.Is(err, ErrForbidden):
		return fmt.Errorf("%w: forbidden to create database %s%s", ErrForbidden, p.url(), accessRefusal(err))
	case statusOf(err) != 0:
		return nil
	}
	return err
}

// LoginRefused is what the reason of an ErrUnauthorized or ErrForbidden
// says when the peer refused the session's login (a wrong password, a
// locked-out account) rather than access to the database: POST
// /_replicate answers such a failure as CouchDB does (500
// replication_auth_error), not with the 401 its client would take for its
// own login failing.
const LoginRefused = "the peer refused the login"

// lockedOut is the start of CouchDB's reason for a 403 to a user locked
// out by [chttpd_auth_lockout] ("Account is temporarily locked due to
// multiple authentication failures").
const lockedOut = "Account is temporarily locked"

// accessRefusal is what ends the message of a 401 or 403 answer: the peer's
// reason, saying when the answer was the login's, and naming a locked-out
// account as such.
func accessRefusal(err error) string {
	var se *statusError
	if !errors.As(err, &se) {
		return ""
	}
	var s string
	switch {
	case se.login && se.Name == "token_refused":
		s = ": its token endpoint " + se.URL + " refused the credentials: " + se.Reason
	case se.login && se.Reason != "":
		s = ": " + LoginRefused + ": " + se.Reason
	case se.login:
		s = fmt.Sprintf(": %s (HTTP %d)", LoginRefused, se.Status)
	case se.Reason != "":
		s = ": " + se.Reason
	}
	if se.Status == http.StatusForbidden && strings.HasPrefix(se.Reason, lockedOut) {
		s += " (the account is locked out: CouchDB's [chttpd_auth_lockout] refuses a user's logins from an address, right " +
			"password or not, after threshold failed ones from there, until max_lifetime after the first; 5 and 5 minutes by default)"
	}
	return s
}

// isPouchServer reports whether the server root greets as express-pouchdb.
func (p *peer) isPouchServer(ctx context.Context) bool {
	var root map[string]json.RawMessage
	if err := p.do(ctx, http.MethodGet, "/", nil, nil, &root); err != nil {
		return false
	}
	_, ok := root["express-pouchdb"]
	return ok
}

// isAdmin reports whether the server's _session lists the _admin role for
// our credentials.
func (p *peer) isAdmin(ctx context.Context) bool {
	var s struct {
		UserCtx struct {
			Roles []string `json:"roles"`
		} `json:"userCtx"`
	}
	if err := p.do(ctx, http.MethodGet, "/_session", nil, nil, &s); err != nil {
		return false
	}
	return contains(s.UserCtx.Roles, "_admin")
}

// objectQuery turns a JSON object into query parameters: strings as is,
// other values JSON-encoded (or, for keys in jsonKeys, always JSON-encoded).
func objectQuery(obj json.RawMessage, jsonKeys map[string]bool) (url.Values, error) {
	q := url.Values{}
	if len(obj) == 0 || string(obj) == "null" {
		return q, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		var s string
		if !jsonKeys[k] && json.Unmarshal(v, &s) == nil {
			q.Set(k, s)
			continue
		}
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return nil, err
		}
		q.Set(k, c.String())
	}
	return q, nil
}

// escapeDocID encodes a document id for a URL path: the _design/ and
// _local/ prefixes stay, everything else (including "/") is escaped.
func escapeDocID(id string) string {
	for _, prefix := range []string{"_design/", "_local/"} {
		if strings.HasPrefix(id, prefix) {
			return prefix + url.PathEscape(id[len(prefix):])
		}
	}
	return url.PathEscape(id)
}

// getLocal reads a checkpoint document; nil without error when absent.
func (p *peer) getLocal(ctx context.Context, id string) (*CheckpointDoc, error) {
	var d CheckpointDoc
	err := p.do(ctx, http.MethodGet, escapeDocID(id), nil, nil, &d)
	if statusOf(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// putLocal writes a checkpoint document and returns its new revision.
func (p *peer) putLocal(ctx context.Context, d *CheckpointDoc) (string, error) {
	var reply struct {
		Rev string `json:"rev"`
	}
	req := httpRequest{method: http.MethodPut, path: escapeDocID(d.ID), header: jsonHeader()}
	req.header.Set("X-Couch-Full-Commit", "false")
	b, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	req.body = b
	res, err := p.t.call(ctx, req)
	if err != nil {
		return "", err
	}
	_ = json.Unmarshal(res.body, &reply)
	return reply.Rev, nil
}

// ensureFullCommit returns the instance_start_time the peer reports.
func (p *peer) ensureFullCommit(ctx context.Context) (json.RawMessage, error) {
	var reply struct {
		InstanceStartTime json.RawMessage `json:"instance_start_time"`
	}
	req := httpRequest{method: http.MethodPost, path: "_ensure_full_commit", header: jsonHeader(), body: []byte("{}")}
	res, err := p.t.call(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(res.body, &reply); err != nil {
		return nil, fmt.Errorf("%w: _ensure_full_commit: %v", ErrHTTP, err)
	}
	return reply.InstanceStartTime, nil
}

// revsDiffEntry is one document's answer from _revs_diff.
type revsDiffEntry struct {
	Missing           []string `json:"missing"`
	PossibleAncestors []string `json:"possible_ancestors"`
}

// revsDiff asks which of revs the peer lacks. Its reply lists revisions
// asked about, and possible ancestors: it may be as long as the request,
// and AnswerMax more.
func (p *peer) revsDiff(ctx context.Context, revs map[string][]string) (map[string]revsDiffEntry, error) {
	b, err := json.Marshal(revs)
	if err != nil {
		return nil, err
	}
	out := map[string]revsDiffEntry{}
	req := httpRequest{method: http.MethodPost, path: "_revs_diff", body: b, maxBody: AnswerMax + int64(len(b)), limit: replyLimit}
	if err := p.doRequest(ctx, req, &out); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRevsDiff, err)
	}
	return out, nil
}

// hasDocs returns which of ids the peer has a revision of (live or
// deleted), from one POST _all_docs with those keys.
func (p *peer) hasDocs(ctx context.Context, ids []string) (map[string]bool, error) {
	b, err := json.Marshal(map[string][]string{"keys": ids})
	if err != nil {
		return nil, err
	}
	var reply struct {
		Rows []struct {
			Key   string `json:"key"`
			Error string `json:"error"`
		} `json:"rows"`
	}
	req := httpRequest{method: http.MethodPost, path: "_all_docs", header: jsonHeader(), body: b,
		maxBody: AnswerMax + 2*int64(len(b)), limit: replyLimit}
	if err := p.doRequest(ctx, req, &reply); err != nil {
		return nil, fmt.Errorf("%w: _all_docs: %w", ErrHTTP, err)
	}
	has := make(map[string]bool, len(reply.Rows))
	for _, r := range reply.Rows {
		if r.Error == "" {
			has[r.Key] = true
		}
	}
	return has, nil
}

// bulkGetDoc is one entry of a _bulk_get request.
type bulkGetDoc struct {
	ID        string   `json:"id"`
	Rev       string   `json:"rev"`
	AttsSince []string `json:"atts_since,omitempty"`
}

// bulkGet asks for the given revisions with revs=true, latest=true and
// attachment stubs, and calls each with every document of the reply, in
// the reply's order, as it is read: the reply is streamed, each of its
// results at most LargeDocMin, and all of them at most LargeDocMin per
// revision asked for, and AnswerMax more. Past either, or when the reply
// breaks, it returns an error having handed over what came before it;
// the caller fetches the rest one by one (open_revs, where large
// documents take turns), so no legitimate reply fails a run. An error of
// each is returned as it is. Options go both in the query string (CouchDB
// reads them there) and in the body (pouchdb-server reads both).
func (p *peer) bulkGet(ctx context.Context, reqs []bulkGetDoc, each func(*doc) error) error {
	q := url.Values{"revs": {"true"}, "latest": {"true"}, "attachments": {"false"}}
	body := map[string]any{"docs": reqs, "revs": true, "latest": true, "attachments": false}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req := httpRequest{method: http.MethodPost, path: "_bulk_get", query: q, header: jsonHeader(), body: b, stream: true,
		maxBody: int64(len(reqs))*LargeDocMin + AnswerMax, limit: "LargeDocMin per revision asked for, plus AnswerMax"}
	res, err := p.t.call(ctx, req)
	if err != nil {
		return err
	}
	defer res.stream.Close()
	if res.status != http.StatusOK {
		return unexpectedStatus(req, p.url(), res)
	}
	err = parseBulkGet(res.stream, LargeDocMin, each)
	if errors.Is(err, errPartTooLarge) {
		return &overLimit{side: p.side(), url: p.url(), what: "POST " + requestPath(p.url(), req.path) + " answered a result of",
			limit: LargeDocMin, name: "LargeDocMin"}
	}
	if ol, ok := asOverLimit(err); ok {
		return ol
	}
	return err
}

// attsSinceMaxBytes bounds the encoded atts_since parameter.
const attsSinceMaxBytes = 4000

// openRevs fetches revisions of one document with their attachment bodies:
// multipart/mixed from CouchDB, a JSON array with inline base64 from
// pouchdb-server. The answer is at most DocMax, and counted on lease,
// which the documents returned carry until they are written.
func (p *peer) openRevs(ctx context.Context, id string, revs, attsSince []string, latest bool, lease *docLease) ([]*doc, []string, error) {
	rb, _ := json.Marshal(revs)
	q := url.Values{"revs": {"true"}, "open_revs": {string(rb)}, "attachments": {"true"}}
	if latest {
		q.Set("latest", "true")
	}
	if len(attsSince) > 0 && !p.pouch { // pouchdb-server does not support atts_since
		// Keep the request line short (CouchDB stays under 7000 bytes).
		for n := len(attsSince); n > 0; n /= 2 {
			ab, _ := json.Marshal(attsSince[:n])
			if len(ab) <= attsSinceMaxBytes {
				q.Set("atts_since", string(ab))
				break
			}
		}
	}
	req := httpRequest{method: http.MethodGet, path: escapeDocID(id), query: q,
		header: http.Header{"Accept": {"multipart/mixed, application/json"}, "Accept-Encoding": {"identity"}}, stream: true,
		maxBody: DocMax, limit: "DocMax"}
	res, err := p.t.call(ctx, req)
	if err != nil {
		return nil, nil, settled{err}
	}
	defer res.stream.Close()
	if res.status != http.StatusOK {
		return nil, nil, settled{unexpectedStatus(req, p.url(), res)}
	}
	docs, missing, err := parseOpenRevs(res.header.Get("Content-Type"), &leaseReader{r: res.stream, lease: lease, ctx: ctx})
	if ol, ok := asOverLimit(err); ok {
		return nil, nil, ol
	}
	for _, d := range docs {
		d.lease = lease
	}
	return docs, missing, err
}

// bulkDocsError is one failed entry of a _bulk_docs reply.
type bulkDocsError struct {
	ID     string `json:"id"`
	Rev    string `json:"rev"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// bulkDocs writes already-encoded documents with new_edits=false and
// returns the entries the target reported as errors.
func (p *peer) bulkDocs(ctx context.Context, docs []json.RawMessage) ([]bulkDocsError, error) {
	size := 32
	for _, d := range docs {
		size += len(d) + 1
	}
	b := bytes.NewBuffer(make([]byte, 0, size))
	b.WriteString(`{"new_edits":false,"docs":[`)
	for i, d := range docs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(d)
	}
	b.WriteString("]}")
	req := httpRequest{method: http.MethodPost, path: "_bulk_docs", header: jsonHeader(), body: b.Bytes(),
		maxBody: AnswerMax + int64(b.Len()), limit: replyLimit}
	req.header.Set("X-Couch-Full-Commit", "false")
	// 417 answers the documents' results too, when some were refused.
	var reply []byte
	res, err := p.t.call(ctx, req)
	var se *statusError
	switch {
	case err == nil:
		reply = res.body
	case errors.As(err, &se) && se.Status == http.StatusExpectationFailed:
		reply = se.body
	default:
		return nil, err
	}
	var entries []bulkDocsError
	if err := json.Unmarshal(reply, &entries); err != nil {
		return nil, fmt.Errorf("%w: _bulk_docs reply: %v", ErrBulkDocs, err)
	}
	failed := entries[:0]
	for _, e := range entries {
		if e.Error != "" {
			failed = append(failed, e)
		}
	}
	return failed, nil
}

// putDoc writes one document with new_edits=false, as multipart/related
// when it carries attachment bodies.
func (p *peer) putDoc(ctx context.Context, d *doc, boundary string) error {
	ct, body, err := multipartDoc(ctx, d, boundary, p.pouch)
	if err != nil {
		return err
	}
	req := httpRequest{method: http.MethodPut, path: escapeDocID(d.ID), query: url.Values{"new_edits": {"false"}},
		header: http.Header{"Content-Type": {ct}, "Accept": {"application/json"}, "Accept-Encoding": {"identity"}}, body: body}
	_, err = p.t.call(ctx, req)
	return err
}

// pendingSince asks the source how many changes follow seq (the "pending"
// field of _changes?limit=0); nil when the source does not say.
func (p *peer) pendingSince(ctx context.Context, seq json.RawMessage) *int64 {
	var reply struct {
		Pending *int64 `json:"pending"`
	}
	q := url.Values{"since": {seqParam(seq)}, "limit": {"0"}}
	if err := p.do(ctx, http.MethodGet, "_changes", q, nil, &reply); err != nil {
		return nil
	}
	return reply.Pending
}
