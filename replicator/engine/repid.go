package engine

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// couchDBDefaultHeaders are the headers CouchDB 3.5's replicator sends on
// every request (#httpdb.headers); a custom header equal to one of them is
// not hashed.
var couchDBDefaultHeaders = [][2]string{{"Accept", "application/json"}, {"User-Agent", "CouchDB-Replicator/3.5.0"}}

// idOptions choose among the ways a replication id has been computed: the
// zero value is fdbrep's (CouchDB 3.5's, with since_seq); the others are
// the ids a replication's checkpoints may have been written under, by
// CouchDB or by an earlier fdbrep (CheckpointIDs).
type idOptions struct {
	// noSinceSeq leaves since_seq out, as CouchDB 3.5 does (it starts a
	// since_seq replication from since_seq at every start; CouchDB after
	// 3.5 hashes it, and uses a checkpoint found first, as fdbrep).
	noSinceSeq bool
	// escapedUser hashes a user name percent-encoded, as CouchDB hashes
	// the user name of a URL's userinfo as written
	// (http://bob%40example.com:pw@host/db).
	escapedUser bool
	// lowerHeaders hashes custom header names in lower case: CouchDB
	// hashes them as written, fdbrep knows them canonicalized (X-Api-Key).
	lowerHeaders bool
	// legacy is fdbrep's algorithm before it computed CouchDB's ids: an
	// https port always named (443 too), a selector with its keys sorted
	// but not normalized, query_params and since_seq with their keys
	// sorted, a filter's code trimmed of all surrounding white space, and
	// custom headers equal to CouchDB's defaults hashed, and lists of
	// integers 0..255 encoded as lists (term_to_binary makes them
	// strings).
	legacy bool
}

// endpointID holds the parts of a normalized endpoint that enter the
// replication id (CouchDB's version 4 get_v4_endpoint): the basic-auth user
// name (never the password), host, port (0 for the scheme's defaults:
// http's 80 and 5984, https's 443), path with query string, and the
// user-supplied headers sorted by name, without those equal to CouchDB's
// own (couchDBDefaultHeaders). As in CouchDB, http and https endpoints of
// one host and path share an id.
type endpointID struct {
	User    *string
	Host    string
	Port    int
	Path    string
	Headers [][2]string
}

// endpointIDOf derives the id parts of a parsed endpoint; multi-valued
// headers are joined with ",".
func endpointIDOf(ep couch.Endpoint, o idOptions) endpointID {
	if ep.URL == nil {
		return endpointID{}
	}
	u := ep.URL
	e := endpointID{Host: u.Hostname(), Path: u.EscapedPath()}
	if user := ep.Username; user != "" {
		if o.escapedUser {
			user = url.User(user).String()
		}
		e.User = &user
	}
	if u.RawQuery != "" {
		e.Path += "?" + u.RawQuery
	}
	if e.Path == "" {
		e.Path = "/"
	}
	n, _ := strconv.Atoi(u.Port())
	switch {
	case strings.EqualFold(u.Scheme, "https") && o.legacy:
		e.Port = cmpOr(n, 443)
	case strings.EqualFold(u.Scheme, "https") && (n == 443 || n == 0):
	case !strings.EqualFold(u.Scheme, "https") && (n == 80 || n == 5984 || n == 0):
	default:
		e.Port = n
	}
	for k, v := range ep.Headers {
		h := [2]string{k, strings.Join(v, ",")}
		if o.lowerHeaders {
			h[0] = strings.ToLower(h[0])
		}
		if !o.legacy && slices.Contains(couchDBDefaultHeaders, h) {
			continue
		}
		e.Headers = append(e.Headers, h)
	}
	sort.SliceStable(e.Headers, func(i, j int) bool { return e.Headers[i][0] < e.Headers[j][0] })
	if !o.legacy {
		// lists:ukeysort: one header per name, the first.
		e.Headers = slices.CompactFunc(e.Headers, func(a, b [2]string) bool { return a[0] == b[0] })
	}
	return e
}

func cmpOr(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// term renders the endpoint as CouchDB's
// {remote, User, Host, Port, Path, Headers, undefined}.
func (e endpointID) term() etfTuple {
	var user any = etfAtomT("undefined")
	if e.User != nil {
		user = etfStr(*e.User)
	}
	var port any = etfAtomT("default")
	if e.Port != 0 {
		port = int64(e.Port)
	}
	headers := etfListT{}
	for _, h := range e.Headers {
		headers = append(headers, etfTuple{etfStr(h[0]), etfStr(h[1])})
	}
	return etfTuple{etfAtomT("remote"), user, etfStr(e.Host), port, etfStr(e.Path), headers, etfAtomT("undefined")}
}

// idInputs are the factors of a replication id besides the endpoints.
type idInputs struct {
	ServerUUID string
	Source     endpointID
	Target     endpointID
	// Filter is the filter part: nil, or the list CouchDB appends (see
	// ReplicationID).
	Filter          etfListT
	WinningRevsOnly bool
	// SkipDeleted is fdbrep's skip_deleted, hashed only when set (no
	// CouchDB replication has it).
	SkipDeleted bool
	// SinceSeq is since_seq's term, nil when it is not hashed.
	SinceSeq     any
	Continuous   bool
	CreateTarget bool
	// legacy encodes as fdbrep's earlier ids (idOptions.legacy).
	legacy bool
}

// replicationID hashes the inputs as CouchDB's version 4 algorithm does: the
// lowercase hex MD5 of term_to_binary([UUID, Src, Tgt | Filter ++ Winning ++
// Since]) and the "+continuous" / "+create_target" suffix.
func (in idInputs) replicationID() (base, full string, err error) {
	terms := etfListT{in.ServerUUID, in.Source.term(), in.Target.term()}
	terms = append(terms, in.Filter...)
	if in.WinningRevsOnly {
		terms = append(terms, "winning_revs_only")
	}
	if in.SkipDeleted {
		terms = append(terms, "skip_deleted")
	}
	if in.SinceSeq != nil {
		terms = append(terms, in.SinceSeq)
	}
	bin, err := encodeTerm(terms, in.legacy)
	if err != nil {
		return "", "", err
	}
	sum := md5.Sum(bin)
	base = hex.EncodeToString(sum[:])
	full = base
	if in.Continuous {
		full += "+continuous"
	}
	if in.CreateTarget {
		full += "+create_target"
	}
	return base, full, nil
}

// replicationIDWith is ReplicationID computed the way o says.
func replicationIDWith(rep Replication, serverUUID, filterCode string, o idOptions) (base, full string, err error) {
	in := idInputs{
		ServerUUID:      serverUUID,
		Source:          endpointIDOf(rep.Source, o),
		Target:          endpointIDOf(rep.Target, o),
		WinningRevsOnly: rep.WinningRevsOnly,
		SkipDeleted:     rep.SkipDeleted,
		Continuous:      rep.Continuous,
		CreateTarget:    rep.CreateTarget,
		legacy:          o.legacy,
	}
	if len(rep.SinceSeq) > 0 && !o.noSinceSeq {
		if in.SinceSeq, err = ejson(rep.SinceSeq, o.legacy); err != nil {
			return "", "", fmt.Errorf("%w: since_seq: %v", ErrInvalidSpec, err)
		}
	}
	switch {
	case rep.DocIDs != nil:
		list := etfListT{}
		for _, id := range rep.docIDs() {
			list = append(list, id)
		}
		in.Filter = etfListT{list}
	case len(rep.Selector) > 0:
		sel, err := ejson(rep.Selector, o.legacy)
		if err == nil && !o.legacy {
			sel, err = normalizeSelector(sel)
		}
		if err != nil {
			return "", "", fmt.Errorf("%w: selector: %w", ErrInvalidSpec, err)
		}
		in.Filter = etfListT{sel}
	case rep.Filter != "":
		var qp any = etfTuple{etfListT{}}
		if len(rep.QueryParams) > 0 && string(rep.QueryParams) != "null" {
			if qp, err = ejson(rep.QueryParams, o.legacy); err != nil {
				return "", "", fmt.Errorf("%w: query_params: %v", ErrInvalidSpec, err)
			}
		}
		name := rep.Filter
		if rep.userFilter() {
			name = trimFilterCode(filterCode)
			if o.legacy {
				name = strings.TrimSpace(filterCode)
			}
		}
		in.Filter = etfListT{name, qp}
	}
	return in.replicationID()
}

// trimFilterCode trims a filter function's source as CouchDB 3.5 does
// before hashing it: re:replace(Code, "^\s*(.*?)\s*$", "\1"), where the
// Erlang string's "\s" is a space (not PCRE's white space), "." matches
// no newline and "$" matches before a final newline. So spaces around a
// function of one line go (a final newline stays), and a function of
// several lines is hashed as it is.
func trimFilterCode(code string) string {
	body, nl := code, ""
	if strings.HasSuffix(code, "\n") {
		body, nl = code[:len(code)-1], "\n"
	}
	if strings.Contains(body, "\n") {
		return code
	}
	return strings.Trim(body, " ") + nl
}

// CheckpointIDs are the base ids, other than its own, under which a
// replication's checkpoints may have been written, in the order a run
// that finds none under its own looks for them (as CouchDB looks under the
// ids of its earlier algorithms): CouchDB 3.5's, where they differ from
// fdbrep's (since_seq, a user name percent-encoded in the URL, header
// names in lower case), then fdbrep's before it computed CouchDB's
// (legacy). Each is a request to the source when the run starts without a
// checkpoint; most replications have none or one.
func CheckpointIDs(rep Replication, serverUUID, filterCode string) ([]string, error) {
	own, _, err := replicationIDWith(rep, serverUUID, filterCode, idOptions{})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{own: true}
	var out []string
	add := func(o idOptions) error {
		base, _, err := replicationIDWith(rep, serverUUID, filterCode, o)
		if err != nil {
			return err
		}
		if !seen[base] {
			seen[base] = true
			out = append(out, base)
		}
		return nil
	}
	for _, o := range []idOptions{
		{noSinceSeq: true},
		{escapedUser: true}, {escapedUser: true, noSinceSeq: true},
		{lowerHeaders: true}, {lowerHeaders: true, noSinceSeq: true},
		{escapedUser: true, lowerHeaders: true}, {escapedUser: true, lowerHeaders: true, noSinceSeq: true},
		{legacy: true},
	} {
		if err := add(o); err != nil {
			return nil, err
		}
	}
	return out, nil
}
