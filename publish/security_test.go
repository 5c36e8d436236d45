package publish_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/publish"
	"github.com/twmb/franz-go/pkg/kfake"
)

// selfSigned writes a CA-signed-by-itself certificate for 127.0.0.1 and
// returns the PEM file paths and the server's tls.Certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, cert tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// The TLS settings reach a TLS broker when its CA is given, and fail to
// when it is not (its certificate is self-signed, so the system CAs
// reject it); every client of the producer dials the same way.
func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, cert := selfSigned(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)       // not defer: the parallel subtests run after this function returns
	addrs := c.ListenAddrs() // once: the parallel subtests must not call into the cluster's admin loop
	tests := []struct {
		name string
		tls  publish.TLS
		ok   bool
	}{
		{"trusted CA", publish.TLS{CAFile: certFile}, true},
		{"mutual TLS", publish.TLS{CAFile: certFile, CertFile: certFile, KeyFile: keyFile}, true},
		{"system CAs only", publish.TLS{Enabled: true}, false},
		{"plaintext against TLS", publish.TLS{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := publish.New(publish.Config{Brokers: addrs, TLS: tt.tls}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			if err := p.Ping(ctx); (err == nil) != tt.ok {
				t.Fatalf("Ping = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// Settings that cannot secure a connection are refused before anything
// connects, naming the field (Validate) or the file (New).
func TestSecurityErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  publish.Config
		want string
	}{
		{"CA file without PEM", publish.Config{TLS: publish.TLS{CAFile: notPEM}}, "no PEM certificate"},
		{"missing CA file", publish.Config{TLS: publish.TLS{CAFile: filepath.Join(dir, "nope.pem")}}, "no such file"},
		{"bad key pair", publish.Config{TLS: publish.TLS{CertFile: notPEM, KeyFile: notPEM}}, "client certificate"},
		{"a certificate without its key", publish.Config{TLS: publish.TLS{CertFile: notPEM}}, "TLS.KeyFile: required with a client certificate (TLS.CertFile)"},
		{"unknown SASL mechanism", publish.Config{SASL: publish.SASL{Mechanism: "GSSAPI"}}, `SASL.Mechanism: "GSSAPI" is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{"SASL without a password", publish.Config{SASL: publish.SASL{Mechanism: "scram-sha-512", Username: "u"}}, "SASL.Password: required with SASL mechanism SCRAM-SHA-512"},
	}
	for _, tt := range tests {
		tt.cfg.Brokers = []string{"127.0.0.1:1"}
		p, err := publish.New(tt.cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			p.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New error = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}
