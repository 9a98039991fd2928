package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/fdbrep/fdbrep/pkg/couch"
	"github.com/fdbrep/fdbrep/replicator/engine"
)

// tlsBench measures what HTTPS to the endpoints costs the engine: docs
// documents replicated between two databases of a real CouchDB 3.5 through
// a Go reverse proxy in front of it, once over plain HTTP and once over
// HTTPS (a TLS 1.3 terminator with a throwaway CA the engine trusts), in
// alternating rounds; the same proxy code on both sides, so that the
// difference is TLS alone (CouchDB's own TLS, Erlang's, would measure
// CouchDB).
func tlsBench(docs, docBytes, workers, batch, runs int) error {
	c, err := launchBenchCouch()
	if c == nil || err != nil {
		return err
	}
	defer c.stop()
	fmt.Printf("\nTLS to the endpoints: CouchDB 3.5 -> CouchDB 3.5 through a Go reverse proxy, plain HTTP versus HTTPS (TLS 1.3, ECDSA P-256); %d docs of ~%d bytes\n",
		docs, docBytes)
	if err := loadSource(c.base, "src", docs, docBytes); err != nil {
		return err
	}
	serverTLS, clientTLS, err := throwawayTLS()
	if err != nil {
		return err
	}
	backend, err := url.Parse(c.srv.URL())
	if err != nil {
		return err
	}
	proxy := httputil.NewSingleHostReverseProxy(backend)
	proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 4 * engine.HTTPConnectionsMax}
	plainURL, stopPlain, err := serveProxy(proxy, nil)
	if err != nil {
		return err
	}
	defer stopPlain()
	tlsURL, stopTLS, err := serveProxy(proxy, serverTLS)
	if err != nil {
		return err
	}
	defer stopTLS()

	run := func(base, db string, cfg *tls.Config) (rate float64, cpu time.Duration, err error) {
		u := func(name string) (couch.Endpoint, error) {
			raw := base + "/" + name
			return couch.ParseEndpoint(json.RawMessage(strconv.Quote(raw)))
		}
		rep := engine.Replication{WorkerProcesses: workers, WorkerBatchSize: batch, CreateTarget: true}
		if rep.Source, err = u("src"); err != nil {
			return 0, 0, err
		}
		if rep.Target, err = u(db); err != nil {
			return 0, 0, err
		}
		e0, start := cpuTime(), time.Now()
		res, err := engine.Start(context.Background(), rep, engine.Options{ServerUUID: "fdbrep-bench",
			Client: engine.ClientSettings{TLS: cfg}}).Wait()
		if err != nil {
			return 0, 0, fmt.Errorf("engine: %w", err)
		}
		d := time.Since(start)
		if res.Stats.DocsWritten != int64(docs) {
			return 0, 0, fmt.Errorf("engine wrote %d docs, want %d", res.Stats.DocsWritten, docs)
		}
		return float64(docs) / d.Seconds(), cpuTime() - e0, deleteDB(c.base, db)
	}
	creds := url.UserPassword(c.srv.Admin())
	withCreds := func(raw string) string {
		u, _ := url.Parse(raw)
		u.User = creds
		return u.String()
	}
	var plainRates, tlsRates, ratios []float64
	for r := 1; r <= runs; r++ {
		var rates [2]float64
		for i := range 2 {
			side := (r + i) % 2 // alternate which goes first
			name, base, cfg := "HTTP ", withCreds(plainURL), (*tls.Config)(nil)
			if side == 1 {
				name, base, cfg = "HTTPS", withCreds(tlsURL), clientTLS
			}
			rate, cpu, err := run(base, fmt.Sprintf("tls%d-%d", r, side), cfg)
			if err != nil {
				return fmt.Errorf("over %s: %w", name, err)
			}
			rates[side] = rate
			fmt.Printf("  run %d: engine over %s: %6.0f docs/s (engine and proxies CPU %v)\n", r, name, rate, cpu.Round(time.Millisecond))
		}
		plainRates, tlsRates = append(plainRates, rates[0]), append(tlsRates, rates[1])
		ratios = append(ratios, rates[1]/rates[0])
	}
	fmt.Printf("  best: HTTP %.0f docs/s, HTTPS %.0f docs/s; HTTPS/HTTP, median of rounds: %.2fx\n",
		best(plainRates), best(tlsRates), median(ratios))
	return nil
}

// serveProxy serves h on a free loopback port, over TLS with cfg when not
// nil; it returns the server's root URL and a function that stops it.
func serveProxy(h http.Handler, cfg *tls.Config) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	scheme := "http"
	if cfg != nil {
		ln, scheme = tls.NewListener(ln, cfg), "https"
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	return scheme + "://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// throwawayTLS makes a CA and a certificate for 127.0.0.1 it signs: the
// proxy's server configuration and a client configuration that trusts
// that CA alone.
func throwawayTLS() (server, client *tls.Config, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fdbrep-bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13}
	client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	return server, client, nil
}
