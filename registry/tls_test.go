package registry_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http/httptest"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/outboxd/outboxd/format"
	"github.com/outboxd/outboxd/registry"
)

// An https registry is reached with the CA Config.TLS trusts, and refused
// without it.
func TestHTTPSRegistryWithItsCA(t *testing.T) {
	reg := srfake.NewRegistry()
	reg.RegisterSchema("orders-value", sr.Schema{Schema: v1})
	srv := httptest.NewTLSServer(reg.Handler())
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	for _, tc := range []struct {
		name string
		tls  func() (*tls.Config, error)
		ok   bool
	}{
		{"trusted", func() (*tls.Config, error) { return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil }, true},
		{"system CAs only", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, next := start(t, nil, registry.Config{URLs: []string{srv.URL}, TLS: tc.tls, Value: registry.Side{Format: format.Avro}})
			ctx, cancel := contextWithTimeout(t, 2)
			defer cancel()
			err := st.Apply(ctx, event(0, `{"id":1}`, ""))
			if tc.ok && (err != nil || len(next.applied) != 1) {
				t.Fatalf("Apply = %v, handed on %d", err, len(next.applied))
			}
			if !tc.ok && (err == nil || len(next.applied) != 0) {
				t.Fatalf("Apply = %v with an untrusted certificate, handed on %d", err, len(next.applied))
			}
		})
	}
}
