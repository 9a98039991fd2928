package engine

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/couch"
)

// endpointID holds the parts of a normalized endpoint that enter the
// replication id (CouchDB's version 4 get_v4_endpoint): the basic-auth user
// name (never the password), host, port (0 for http's defaults 80 and
// 5984), path with query string, and the
// user-supplied headers sorted by key. Unlike CouchDB, an https endpoint
// always carries its port, so http and https endpoints never share an id.
type endpointID struct {
	User    *string
	Host    string
	Port    int
	Path    string
	Headers [][2]string
}

// endpointIDOf derives the id parts of a parsed endpoint; multi-valued
// headers are joined with ",".
func endpointIDOf(ep couch.Endpoint) endpointID {
	if ep.URL == nil {
		return endpointID{}
	}
	headers := make(map[string]string, len(ep.Headers))
	for k, v := range ep.Headers {
		headers[k] = strings.Join(v, ",")
	}
	return newEndpointID(ep.URL, ep.Username, headers)
}

// newEndpointID derives the id parts from a normalized endpoint URL (no
// userinfo, trailing slash), the basic-auth user ("" when none) and the
// user-supplied headers.
func newEndpointID(u *url.URL, user string, headers map[string]string) endpointID {
	e := endpointID{Host: u.Hostname(), Path: u.EscapedPath()}
	if user != "" {
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
	case strings.EqualFold(u.Scheme, "https"):
		// CouchDB hashes https and http alike (port 'default' for both);
		// we keep them apart by always naming the https port.
		if n == 0 {
			n = 443
		}
		e.Port = n
	case n == 80 || n == 5984 || n == 0:
	default:
		e.Port = n
	}
	for k, v := range headers {
		e.Headers = append(e.Headers, [2]string{k, v})
	}
	sort.Slice(e.Headers, func(i, j int) bool { return e.Headers[i][0] < e.Headers[j][0] })
	return e
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
	SinceSeq        json.RawMessage
	Continuous      bool
	CreateTarget    bool
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
	if len(in.SinceSeq) > 0 {
		v, err := ejson(in.SinceSeq, true)
		if err != nil {
			return "", "", err
		}
		terms = append(terms, v)
	}
	bin, err := termToBinary(terms)
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
