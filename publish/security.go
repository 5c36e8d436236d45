package publish

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/lib/rawio"
	"github.com/outboxd/outboxd/lib/tlsfiles"
)

// TLS is how the Kafka clients encrypt their connections. The files are
// read again for each new connection (package tlsfiles), so a
// certificate renewed in place serves the next one without a restart.
type TLS struct {
	// Enabled connects with TLS, trusting the system's CAs unless CAFile
	// is given. Any other field turns it on too.
	Enabled bool
	// CAFile is a PEM file of the CA(s) that signed the brokers'
	// certificates.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// mutual TLS: both or neither.
	CertFile, KeyFile string
	// InsecureSkipVerify does not verify the brokers' certificates
	// (testing only).
	InsecureSkipVerify bool
}

// On reports whether the clients connect with TLS.
func (t TLS) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.InsecureSkipVerify
}

// SASL is how the Kafka clients authenticate.
type SASL struct {
	// Mechanism is one of SASLMechanisms, in any case; "" for none. Use
	// it with TLS: PLAIN sends the password as it is.
	Mechanism string
	// Username and Password are required with a Mechanism.
	Username, Password string
}

// SASLMechanisms are the mechanisms SASL.Mechanism names.
func SASLMechanisms() []string { return []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} }

// mechanism is s's franz-go mechanism; nil for none, or for one that is
// not supported (problems reports it).
func (s SASL) mechanism() sasl.Mechanism {
	switch strings.ToUpper(s.Mechanism) {
	case "PLAIN":
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil
}

// securityProblems adds the TLS and SASL settings' problems to p.
func (cfg Config) securityProblems(p *field.Problems) {
	switch {
	case cfg.TLS.CertFile != "" && cfg.TLS.KeyFile == "":
		p.Addf("TLS.KeyFile", "required with a client certificate (%s)", cfg.Names.Of("TLS.CertFile"))
	case cfg.TLS.CertFile == "" && cfg.TLS.KeyFile != "":
		p.Addf("TLS.CertFile", "required with a client key (%s)", cfg.Names.Of("TLS.KeyFile"))
	}
	switch m := strings.ToUpper(cfg.SASL.Mechanism); {
	case m == "":
	case cfg.SASL.mechanism() == nil:
		p.Addf("SASL.Mechanism", "%q is not %s", cfg.SASL.Mechanism, strings.Join(SASLMechanisms(), ", "))
	default:
		if cfg.SASL.Username == "" {
			p.Addf("SASL.Username", "required with SASL mechanism %s", m)
		}
		if cfg.SASL.Password == "" {
			p.Addf("SASL.Password", "required with SASL mechanism %s", m)
		}
	}
}

// secured returns cfg with the TLS dialer its settings ask for, built
// once for every client of one producer (clientOpts dials without TLS
// when there is none). log takes what reading the TLS files at each
// connection has to say.
func (cfg Config) secured(log *slog.Logger) (Config, error) {
	if cfg.TLS.On() {
		src, err := tlsfiles.New(tlsfiles.Files{CA: cfg.TLS.CAFile, Cert: cfg.TLS.CertFile, Key: cfg.TLS.KeyFile,
			InsecureSkipVerify: cfg.TLS.InsecureSkipVerify, What: "the Kafka client certificate"}, log)
		if err != nil {
			return cfg, fmt.Errorf("reading the Kafka TLS files: %w", err)
		}
		cfg.dialer = kgo.Dialer(rawio.DialerTLS(dialTimeout, src.Config))
	}
	return cfg, nil
}

// dialTimeout bounds a connection's dial and TLS handshake.
const dialTimeout = 10 * time.Second
