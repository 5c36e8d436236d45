// Package tlsfiles is a TLS client's configuration from PEM files that are
// read again, by content, for every new connection: a certificate, key or
// CA renewed in place (cert-manager, Vault agent, a mounted secret) is
// used by the next connection, without a restart or a signal.
//
// Invariants:
//   - A file that does not parse (caught in the middle of a rewrite) never
//     replaces the last good content: connections go on with it, and the
//     problem is logged once per content.
//   - Verification is crypto/tls's own, against the CA file's content at
//     the time of the connection.
package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// Files names a TLS client's PEM files; each may be empty.
type Files struct {
	// CA holds the certificates that signed the server's (empty: the
	// system's roots).
	CA string
	// Cert and Key are the client certificate and its key (mutual TLS):
	// both or neither.
	Cert, Key string
	// InsecureSkipVerify does not verify the server's certificate
	// (testing only).
	InsecureSkipVerify bool
	// What names the client certificate in errors and logs ("the Kafka
	// client certificate").
	What string
}

// Source builds a TLS client configuration from its Files' current
// content. Safe for concurrent use.
type Source struct {
	files Files
	log   *slog.Logger

	mu         sync.Mutex
	caPEM      []byte
	pool       *x509.CertPool
	certPEM    []byte
	keyPEM     []byte
	cert       *tls.Certificate
	badCA      []byte // content already logged as bad
	badCertKey []byte
}

// New returns the Source of f. It reads the files once, so that a missing
// or broken file is an error at start.
func New(f Files, log *slog.Logger) (*Source, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%s: a certificate needs its key, and a key its certificate", f.What)
	}
	s := &Source{files: f, log: log}
	if _, err := s.Config(); err != nil {
		return nil, err
	}
	return s, nil
}

// Config returns a TLS 1.2+ client configuration from the files' content
// now, parsed anew only when it changed (the last good content when it
// cannot be read or parsed now). Call it for each new connection.
func (s *Source) Config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.files.InsecureSkipVerify} //nolint:gosec // opt-in, testing only
	if s.files.CA != "" {
		pool, err := s.roots()
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if s.files.Cert != "" {
		cert, err := s.certificate()
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{*cert}
	}
	return tc, nil
}

// roots returns the CA file's certificates.
func (s *Source) roots() (*x509.CertPool, error) {
	b, err := os.ReadFile(s.files.CA)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.pool != nil && bytes.Equal(b, s.caPEM) {
		return s.pool, nil
	}
	if err == nil {
		pool := x509.NewCertPool()
		if pool.AppendCertsFromPEM(b) {
			s.caPEM, s.pool = b, pool
			return pool, nil
		}
		err = errors.New("no PEM certificate in it")
	}
	err = fmt.Errorf("reading the CA file %s: %w", s.files.CA, err)
	if s.pool == nil {
		return nil, err
	}
	if !bytes.Equal(b, s.badCA) {
		s.badCA = b
		s.log.Warn("the CA file cannot be read or parsed now; its last good content serves until it can", "file", s.files.CA, "err", err)
	}
	return s.pool, nil
}

// certificate returns the client certificate.
func (s *Source) certificate() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(s.files.Cert)
	var keyPEM []byte
	if err == nil {
		keyPEM, err = os.ReadFile(s.files.Key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.cert != nil && bytes.Equal(certPEM, s.certPEM) && bytes.Equal(keyPEM, s.keyPEM) {
		return s.cert, nil
	}
	if err == nil {
		var cert tls.Certificate
		if cert, err = tls.X509KeyPair(certPEM, keyPEM); err == nil {
			s.certPEM, s.keyPEM, s.cert = certPEM, keyPEM, &cert
			return s.cert, nil
		}
	}
	err = fmt.Errorf("loading %s (%s, %s): %w", s.files.What, s.files.Cert, s.files.Key, err)
	if s.cert == nil {
		return nil, err
	}
	if both := append(append([]byte(nil), certPEM...), keyPEM...); !bytes.Equal(both, s.badCertKey) {
		s.badCertKey = both
		s.log.Warn("the client certificate or key cannot be read or parsed now (being rewritten?); the last good pair serves until they can",
			"cert_file", s.files.Cert, "key_file", s.files.Key, "err", err)
	}
	return s.cert, nil
}
