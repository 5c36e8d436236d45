package config

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/lib/tlsfiles"
)

// KafkaOpts returns the franz-go options for TLS and SASL.
func (c *Config) KafkaOpts(log *slog.Logger) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.KafkaTLS || c.KafkaTLSCAFile != "" || c.KafkaTLSCertFile != "" || c.KafkaTLSInsecureSkipVerify {
		// The files are read again for each connection: a certificate
		// renewed in place is used by the next one.
		src, err := tlsfiles.New(tlsfiles.Files{CA: c.KafkaTLSCAFile, Cert: c.KafkaTLSCertFile, Key: c.KafkaTLSKeyFile,
			InsecureSkipVerify: c.KafkaTLSInsecureSkipVerify, What: "the Kafka client certificate"}, log)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.Dialer(rawio.DialerTLS(10*time.Second, src.Config)))
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
// flags name, read again for each connection; nil (Go's defaults, for an
// https URL) without any.
func (c *Config) registryTLS(log *slog.Logger) (func() (*tls.Config, error), error) {
	if c.RegistryTLSCAFile == "" && c.RegistryTLSCertFile == "" {
		return nil, nil
	}
	src, err := tlsfiles.New(tlsfiles.Files{CA: c.RegistryTLSCAFile, Cert: c.RegistryTLSCertFile, Key: c.RegistryTLSKeyFile,
		What: "the schema registry client certificate"}, log)
	if err != nil {
		return nil, err
	}
	return src.Config, nil
}
