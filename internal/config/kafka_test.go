package config

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

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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

// TestKafkaTLS: the options KafkaOpts builds reach a TLS broker when the CA
// is given, and fail to when it is not (the broker's certificate is
// self-signed, so the system CAs reject it).
func TestKafkaTLS(t *testing.T) {
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
		cfg  Config
		ok   bool
	}{
		{"trusted CA", Config{KafkaTLSCAFile: certFile}, true},
		{"mutual TLS", Config{KafkaTLSCAFile: certFile, KafkaTLSCertFile: certFile, KafkaTLSKeyFile: keyFile}, true},
		{"system CAs only", Config{KafkaTLS: true}, false},
		{"plaintext against TLS", Config{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts, err := tt.cfg.KafkaOpts(slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(addrs...))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			if err := cl.Ping(ctx); (err == nil) != tt.ok {
				t.Fatalf("Ping = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestKafkaOptsErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"CA file without PEM", Config{KafkaTLSCAFile: notPEM}, "no PEM certificate"},
		{"missing CA file", Config{KafkaTLSCAFile: filepath.Join(dir, "nope.pem")}, "no such file"},
		{"bad key pair", Config{KafkaTLSCertFile: notPEM, KafkaTLSKeyFile: notPEM}, "client certificate"},
		{"unknown SASL mechanism", Config{KafkaSASLMechanism: "GSSAPI"}, "not supported"},
	}
	for _, tt := range tests {
		if _, err := tt.cfg.KafkaOpts(slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: KafkaOpts error = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}
