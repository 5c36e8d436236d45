package config

import (
	"crypto/tls"
	"crypto/x509"
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
