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
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.KafkaTLSInsecureSkipVerify} //nolint:gosec // opt-in, documented as testing only
		if c.KafkaTLSCAFile != "" {
			pem, err := os.ReadFile(c.KafkaTLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("reading --kafka-tls-ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("reading --kafka-tls-ca-file %s: no PEM certificate in it", c.KafkaTLSCAFile)
			}
			tc.RootCAs = pool
		}
		if c.KafkaTLSCertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.KafkaTLSCertFile, c.KafkaTLSKeyFile)
			if err != nil {
				return nil, fmt.Errorf("loading the Kafka client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
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
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.RegistryTLSCAFile != "" {
		pem, err := os.ReadFile(c.RegistryTLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading --schema-registry-tls-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading --schema-registry-tls-ca-file %s: no PEM certificate in it", c.RegistryTLSCAFile)
		}
		tc.RootCAs = pool
	}
	if c.RegistryTLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.RegistryTLSCertFile, c.RegistryTLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the schema registry client certificate: %w", err)
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
