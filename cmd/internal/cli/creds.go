package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/fhs/go-netrc/netrc"
)

// Environment variables the client commands read (flags win over them).
const (
	// EnvCluster names the cluster (-cluster).
	EnvCluster = "FDBREP_CLUSTER"
	// EnvUser is the cluster user (-user).
	EnvUser = "FDBREP_USER"
	// EnvPassword is the cluster password (-password).
	EnvPassword = "FDBREP_PASSWORD"
	// EnvNetrc names the netrc file (-netrc), as curl and git read it.
	EnvNetrc = "NETRC"
	// EnvCACert names the CA file an https:// cluster's certificate must
	// chain to (-cacert).
	EnvCACert = "FDBREP_CACERT"
	// EnvCert and EnvKey name a client certificate and its key (-cert,
	// -key), for a cluster that asks for one ([ssl]
	// verify_ssl_certificates).
	EnvCert = "FDBREP_CERT"
	EnvKey  = "FDBREP_KEY"
)

// NetrcDefault is the netrc file read when neither -netrc nor $NETRC names
// one, relative to the home directory; a missing default file is no error.
const NetrcDefault = ".netrc"

// Creds are Basic credentials; the zero value sends none.
type Creds struct {
	User, Password string
}

// clusterFlags are the flags of every command that talks to a cluster:
// where it is and who we are.
type clusterFlags struct {
	cluster  string
	user     string
	password string
	netrc    string
	cacert   string
	cert     string
	key      string
	set      map[string]bool // flags given on the command line
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.cluster, "cluster", "", "URL of a running cluster's HTTP API, e.g. http://127.0.0.1:5984 (env "+EnvCluster+")")
	c.registerCreds(fs)
}

// registerCreds registers the flags of who we are, without -cluster (a
// command that names its server otherwise).
func (c *clusterFlags) registerCreds(fs *flag.FlagSet) {
	fs.StringVar(&c.user, "user", "", "user name on the cluster (env "+EnvUser+"; else the URL's, else the netrc entry of the cluster's host)")
	fs.StringVar(&c.password, "password", "", "password on the cluster; other local users can see command lines: prefer env "+EnvPassword+" or a netrc file")
	fs.StringVar(&c.netrc, "netrc", "", "netrc file with credentials for the cluster and for endpoints given without any (env "+EnvNetrc+"; default ~/"+NetrcDefault+")")
	fs.StringVar(&c.cacert, "cacert", "", "CA certificates (PEM) an https:// cluster's certificate must chain to, instead of the system's (env "+EnvCACert+")")
	fs.StringVar(&c.cert, "cert", "", "client certificate (PEM) for a cluster that asks for one (env "+EnvCert+"; with -key)")
	fs.StringVar(&c.key, "key", "", "the client certificate's private key (PEM, unencrypted; env "+EnvKey+")")
}

// flagOrEnv is the flag name's value when the command line gave it, else
// the environment variable's.
func (c *clusterFlags) flagOrEnv(name, value, env string) string {
	if c.set[name] {
		return value
	}
	return os.Getenv(env)
}

// tlsConfig is the TLS of -cacert, -cert and -key (or their variables);
// nil when none is given (the system's CAs, no client certificate).
func (c *clusterFlags) tlsConfig() (*tls.Config, error) {
	ca := c.flagOrEnv("cacert", c.cacert, EnvCACert)
	cert, key := c.flagOrEnv("cert", c.cert, EnvCert), c.flagOrEnv("key", c.key, EnvKey)
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("-cacert: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-cacert %s holds no PEM certificate", ca)
		}
	}
	if cert != "" || key != "" {
		if cert == "" || key == "" {
			return nil, errors.New("-cert and -key go together: give both")
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("-cert %s and -key %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// visited records which flags the command line gave.
func (c *clusterFlags) visited(fs *flag.FlagSet) {
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
}

// clusterURL is -cluster, else $FDBREP_CLUSTER, else def.
func (c *clusterFlags) clusterURL(def string) string {
	if c.set["cluster"] {
		return c.cluster
	}
	if v := os.Getenv(EnvCluster); v != "" {
		return v
	}
	return def
}

// netrcFile is the netrc file to read and whether it was named (a named
// file must exist).
func (c *clusterFlags) netrcFile() (path string, named bool) {
	if c.set["netrc"] {
		return c.netrc, true
	}
	if v := os.Getenv(EnvNetrc); v != "" {
		return v, true
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", false
	}
	return filepath.Join(home, NetrcDefault), false
}

// credentials resolves everything the command needs to authenticate: the
// cluster's credentials and the netrc entries for endpoints.
func (c *clusterFlags) credentials() (*credSource, error) {
	path, named := c.netrcFile()
	cs := &credSource{}
	if path != "" {
		machines, _, err := netrc.ParseFile(path)
		var perr *netrc.Error
		switch {
		case errors.As(err, &perr):
			// The parser's message may quote a word of the file, which
			// could be (part of) a password.
			return nil, fmt.Errorf("netrc file %s, line %d: not in netrc format", perr.Filename, perr.LineNum)
		case errors.Is(err, fs.ErrNotExist) && !named:
		case err != nil:
			return nil, fmt.Errorf("netrc file: %w", err)
		}
		cs.machines = machines
	}
	if c.set["user"] {
		cs.flagUser = &c.user
	}
	if c.set["password"] {
		cs.flagPass = &c.password
	}
	var err error
	if cs.tls, err = c.tlsConfig(); err != nil {
		return nil, err
	}
	return cs, nil
}

// credSource answers which credentials to use for a URL.
type credSource struct {
	machines           []*netrc.Machine
	flagUser, flagPass *string
	tls                *tls.Config // for an https:// cluster; nil: Go's defaults
}

// netrcFor returns the login and password of the netrc entry for host
// (without port), or of the "default" entry; ok is false when there is
// neither, or when the entry has no password.
func (cs *credSource) netrcFor(host string) (Creds, bool) {
	var def *netrc.Machine
	for _, m := range cs.machines {
		if m.Name == host && m.Password != "" {
			return Creds{User: m.Login, Password: m.Password}, true
		}
		if m.Name == "" {
			def = m
		}
	}
	if def != nil && def.Password != "" {
		return Creds{User: def.Login, Password: def.Password}, true
	}
	return Creds{}, false
}

// cluster returns the cluster's credentials, in order of precedence:
// -user and -password, the URL's userinfo, $FDBREP_USER and
// $FDBREP_PASSWORD, the netrc entry of the URL's host. A user named by a
// flag or the environment without a password takes the password of the
// netrc entry when its login matches.
func (cs *credSource) cluster(u *url.URL) Creds {
	var c Creds
	if u.User != nil {
		c.User = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	if v := os.Getenv(EnvUser); v != "" && u.User == nil {
		c.User = v
	}
	if v, ok := os.LookupEnv(EnvPassword); ok && (u.User == nil || c.Password == "") {
		c.Password = v
	}
	if cs.flagUser != nil {
		c.User = *cs.flagUser
	}
	if cs.flagPass != nil {
		c.Password = *cs.flagPass
	}
	if c.Password == "" {
		if n, ok := cs.netrcFor(u.Hostname()); ok && (c.User == "" || c.User == n.User) {
			c = n
		}
	}
	return c
}

// endpoint returns a replication endpoint for the body of POST
// /_replicate: the URL as given when it carries credentials (or names no
// host the netrc file knows), otherwise an object with the netrc entry's
// credentials under auth.basic, as CouchDB 3.x writes them.
func (cs *credSource) endpoint(raw string) any {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Host == "" {
		return raw // the parser reports what is wrong with it
	}
	n, ok := cs.netrcFor(u.Hostname())
	if !ok || n.User == "" {
		return raw
	}
	return map[string]any{"url": raw, "auth": map[string]any{"basic": map[string]string{"username": n.User, "password": n.Password}}}
}

// secrets are the passwords the command knows, which output must never
// show.
func (cs *credSource) secrets() []string {
	var out []string
	for _, m := range cs.machines {
		out = append(out, m.Password)
	}
	if cs.flagPass != nil {
		out = append(out, *cs.flagPass)
	}
	return append(out, os.Getenv(EnvPassword))
}

// userinfoPassword matches the password of URL userinfo
// (scheme://user:password@).
var userinfoPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*):[^/?#@\s]*@`)

// redactor removes credentials from text before it is shown: passwords in
// URL userinfo become *****, and so does every password the command knows.
type redactor struct {
	secrets []string
}

func newRedactor(secrets ...string) *redactor {
	r := &redactor{}
	r.add(secrets...)
	return r
}

// add makes the non-empty secrets redacted too.
func (r *redactor) add(secrets ...string) {
	for _, s := range secrets {
		if s != "" {
			r.secrets = append(r.secrets, s)
		}
	}
}

// String returns s without credentials.
func (r *redactor) String(s string) string {
	s = userinfoPassword.ReplaceAllString(s, "${1}:*****@")
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, "*****")
	}
	return s
}

// Printf writes the redacted formatted text to w.
func (r *redactor) Printf(w io.Writer, format string, a ...any) {
	_, _ = w.Write([]byte(r.String(fmt.Sprintf(format, a...))))
}

// redactedURL shows a URL with its password replaced by *****.
func redactedURL(raw string) string { return newRedactor().String(raw) }
