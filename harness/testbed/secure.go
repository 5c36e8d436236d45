package testbed

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SecureKafka is a broker with TLS and SASL listeners and an authorizer,
// its certificates made at start (nothing is kept between runs):
//   - Plain: PLAINTEXT, as the super user (User:ANONYMOUS), for set-up;
//   - SASLSSL: SASL_SSL with SCRAM-SHA-512, a server certificate signed
//     by CA;
//   - MTLS: TLS that requires a client certificate signed by CA (the
//     principal is User:CN=<the certificate's common name>);
//   - Expired: TLS whose server certificate expired yesterday.
//
// Nobody but the super user may do anything without an ACL
// (allow.everyone.if.no.acl.found=false).
type SecureKafka struct {
	*Kafka
	Plain, SASLSSL, MTLS, Expired string
	// PEM files: the CA certificate, and a client certificate and key for
	// MTLS with common name "outboxd"; and one that expired yesterday.
	CA, ClientCert, ClientKey           string
	ExpiredClientCert, ExpiredClientKey string
}

// StartKafkaSecure writes the configuration and certificates into dir and
// starts the broker there.
func StartKafkaSecure(ctx context.Context, script, dir string) (*SecureKafka, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	k := &SecureKafka{CA: filepath.Join(dir, "ca.pem"), ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		ExpiredClientCert: filepath.Join(dir, "client-expired.pem"), ExpiredClientKey: filepath.Join(dir, "client-expired-key.pem")}
	ports := make([]string, 5)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().String()
		l.Close()
	}
	k.Plain, k.SASLSSL, k.MTLS, k.Expired = ports[0], ports[1], ports[2], ports[3]
	if err := writeCerts(dir); err != nil {
		return nil, err
	}
	props := fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.voters=1@%[5]s
listeners=PLAINTEXT://%[1]s,SASL_SSL://%[2]s,MTLS://%[3]s,EXPIRED://%[4]s,CONTROLLER://%[5]s
advertised.listeners=PLAINTEXT://%[1]s,SASL_SSL://%[2]s,MTLS://%[3]s,EXPIRED://%[4]s
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL,EXPIRED:SSL,CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=%[6]s/server.pem
ssl.truststore.type=PEM
ssl.truststore.location=%[6]s/ca.pem
listener.name.mtls.ssl.client.auth=required
listener.name.expired.ssl.keystore.type=PEM
listener.name.expired.ssl.keystore.location=%[6]s/expired.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=false
log.dirs=%[6]s/data
num.partitions=3
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
`, ports[0], ports[1], ports[2], ports[3], ports[4], dir)
	if err := os.WriteFile(filepath.Join(dir, "server.properties"), []byte(props), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "kafka.addr"), []byte(k.Plain+"\n"), 0o644); err != nil {
		return nil, err
	}
	addr, err := run(ctx, script, "kafka-start", dir)
	if err != nil {
		_, _ = run(context.WithoutCancel(ctx), script, "kafka-stop", dir) // it may have started and not answered
		return nil, err
	}
	k.Kafka = &Kafka{Script: script, Dir: dir, Addr: strings.TrimSpace(addr)}
	return k, nil
}

// writeCerts writes ca.pem, server.pem (key and chain, for 127.0.0.1),
// expired.pem (the same, expired), client.pem and client-key.pem, and
// client-expired.pem and client-expired-key.pem.
func writeCerts(dir string) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outboxd test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, from, to time.Time, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, NotBefore: from, NotAfter: to,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		pk, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), nil
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	server, serverKey, err := leaf(2, "127.0.0.1", now.Add(-time.Hour), now.Add(24*time.Hour), x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	expired, expiredKey, err := leaf(3, "127.0.0.1", now.Add(-48*time.Hour), now.Add(-24*time.Hour), x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	client, clientKey, err := leaf(4, "outboxd", now.Add(-time.Hour), now.Add(24*time.Hour), x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	clientExpired, clientExpiredKey, err := leaf(5, "outboxd", now.Add(-48*time.Hour), now.Add(-24*time.Hour), x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.pem":                 caPEM,
		"server.pem":             append(append(serverKey, server...), caPEM...),
		"expired.pem":            append(append(expiredKey, expired...), caPEM...),
		"client.pem":             client,
		"client-key.pem":         clientKey,
		"client-expired.pem":     clientExpired,
		"client-expired-key.pem": clientExpiredKey,
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
