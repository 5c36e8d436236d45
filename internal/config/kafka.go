package config

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxd/outboxd/lib/rawio"
)

// KafkaOpts returns the franz-go options for TLS and SASL.
func (c *Config) KafkaOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.KafkaTLS || c.KafkaTLSCAFile != "" || c.KafkaTLSCertFile != "" || c.KafkaTLSInsecureSkipVerify {
		tc, err := tlsFromFiles("--kafka-tls-ca-file", c.KafkaTLSCAFile, c.KafkaTLSCertFile, c.KafkaTLSKeyFile, "the Kafka client certificate")
		if err != nil {
			return nil, err
		}
		tc.InsecureSkipVerify = c.KafkaTLSInsecureSkipVerify //nolint:gosec // opt-in, documented as testing only
		opts = append(opts, kgo.Dialer(rawio.Dialer(10*time.Second, tc)))
	}
	switch strings.ToUpper(c.KafkaSASLMechanism) {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: c.KafkaSASLUsername, Pass: c.KafkaSASLPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.KafkaSASLUsername, Pass: c.KafkaSASLPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.KafkaSASLUsername, Pass: c.KafkaSASLPassword}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("--kafka-sasl-mechanism %q is not supported", c.KafkaSASLMechanism)
	}
	return opts, nil
}

// registryTLS is the schema registry's TLS settings from the files the
// flags name; nil (Go's defaults, for an https URL) without any.
func (c *Config) registryTLS() (*tls.Config, error) {
	if c.RegistryTLSCAFile == "" && c.RegistryTLSCertFile == "" {
		return nil, nil
	}
	return tlsFromFiles("--schema-registry-tls-ca-file", c.RegistryTLSCAFile, c.RegistryTLSCertFile, c.RegistryTLSKeyFile, "the schema registry client certificate")
}

// tlsFromFiles is TLS 1.2 or later with the CA file's certificates as the
// roots (the system's without one) and the client certificate, if any;
// caFlag and what name them in errors.
func tlsFromFiles(caFlag, caFile, certFile, keyFile, what string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", caFlag, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading %s %s: no PEM certificate in it", caFlag, caFile)
		}
		tc.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", what, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// KafkaClientKey stands for every setting of the Kafka client that the
// flags of fs hold (the GroupKafka flags: brokers, record size, linger,
// compression, topic creation, TLS, SASL): pipelines with one key may
// share a client (publish.Pool). It is a hash, and shows no secret.
func KafkaClientKey(fs *flag.FlagSet) string {
	h := sha256.New()
	for _, name := range GroupFlags(GroupKafka) {
		if fl := fs.Lookup(name); fl != nil {
			fmt.Fprintf(h, "%s=%q\n", name, fl.Value.String())
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
