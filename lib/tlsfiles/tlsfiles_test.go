package tlsfiles

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a CA and what it signs, as PEM.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return pki{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf is a certificate ca signs for cn, valid until notAfter, and its key.
func (ca pki) leaf(t *testing.T, cn string, notAfter time.Time, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-2 * time.Hour),
		NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk})
}

// replace writes b to path as a renewal in place does: a new file renamed
// over the old one.
func replace(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRenewedFilesServeTheNextConnection is issue 49, item 7: the Kafka and
// schema registry TLS files were read once, at start, so a client
// certificate renewed in place (cert-manager, Vault) was never used: once
// the old one expired, every new connection failed until a restart. The
// files are read again for every connection: after a renewal in place the
// next connection presents the new certificate and trusts the new CA; a
// file caught half-written leaves the last good content in use.
func TestRenewedFilesServeTheNextConnection(t *testing.T) {
	t.Parallel()
	serverCA, clientCA, otherCA := newCA(t, "server CA"), newCA(t, "client CA"), newCA(t, "another CA")
	srvCert, srvKey := serverCA.leaf(t, "127.0.0.1", time.Now().Add(time.Hour), x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(clientCA.cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	files := Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), What: "the test's client certificate"}
	expired, expiredKey := clientCA.leaf(t, "old", time.Now().Add(-time.Hour), x509.ExtKeyUsageClientAuth)
	replace(t, files.CA, otherCA.pem) // not the server's CA yet
	replace(t, files.Cert, expired)
	replace(t, files.Key, expiredKey)
	src, err := New(files, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// A new connection for each request, as after a reconnect.
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cfg, err := src.Config()
			if err != nil {
				return nil, err
			}
			return (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
		}}}
	get := func() (string, error) {
		resp, err := cl.Get(srv.URL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	if _, err := get(); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("with another CA in the CA file: %v, want the server's certificate refused", err)
	}
	replace(t, files.CA, serverCA.pem)
	if _, err := get(); err == nil {
		t.Fatal("with an expired client certificate: the server accepted it")
	}
	renewed, renewedKey := clientCA.leaf(t, "renewed", time.Now().Add(time.Hour), x509.ExtKeyUsageClientAuth)
	replace(t, files.Key, renewedKey)
	replace(t, files.Cert, renewed)
	if cn, err := get(); err != nil || cn != "renewed" {
		t.Fatalf("after the renewal in place: %q, %v; want the server to see the renewed certificate", cn, err)
	}
	// Caught half-written: the last good pair serves.
	replace(t, files.Cert, renewed[:len(renewed)/2])
	if cn, err := get(); err != nil || cn != "renewed" {
		t.Errorf("with the certificate file half-written: %q, %v; want the last good pair", cn, err)
	}
}

func TestNewRefusesBrokenFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		files Files
		want  string
	}{
		{"a CA file without a certificate", Files{CA: junk}, "no PEM certificate"},
		{"a missing CA file", Files{CA: filepath.Join(dir, "missing.pem")}, "no such file"},
		{"a certificate without its key", Files{Cert: junk, What: "X"}, "X: a certificate needs its key"},
		{"a certificate that does not parse", Files{Cert: junk, Key: junk, What: "X"}, "loading X"},
	} {
		if _, err := New(tt.files, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}
