package config

import (
	"crypto/tls"
	"log/slog"

	"github.com/outboxd/outboxd/lib/tlsfiles"
)

// registryTLS is the schema registry's TLS settings from the files the
// flags name, read again for each connection; nil (Go's defaults, for an
// https URL) without any.
func (c *Config) registryTLS(log *slog.Logger) (func() (*tls.Config, error), error) {
	if c.Files.RegistryTLSCAFile == "" && c.Files.RegistryTLSCertFile == "" {
		return nil, nil
	}
	src, err := tlsfiles.New(tlsfiles.Files{CA: c.Files.RegistryTLSCAFile, Cert: c.Files.RegistryTLSCertFile, Key: c.Files.RegistryTLSKeyFile,
		What: "the schema registry client certificate"}, log)
	if err != nil {
		return nil, err
	}
	return src.Config, nil
}
