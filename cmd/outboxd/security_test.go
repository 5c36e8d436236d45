package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
)

const scramPassword = "right-password"

// secureKafka starts the TLS and SASL broker of the test bed with a
// SCRAM-SHA-512 user "outboxd", allowed (WRITE and DESCRIBE, for that user
// and for the mutual-TLS principal CN=outboxd) every topic whose name
// starts with the prefix returned, and a topic denied (no ACL).
func secureKafka(t *testing.T) (k *testbed.SecureKafka, allowed, denied string) {
	t.Helper()
	k, err := testbed.StartKafkaSecure(context.Background(), testenv.Script(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })
	allowed = "allowed."
	denied = testenv.CreateTopic(t, []string{k.Plain}, testenv.Name(t, "denied"), 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Plain))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	res, err := adm.AlterUserSCRAMs(t.Context(), nil, []kadm.UpsertSCRAM{{User: "outboxd", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: scramPassword}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	acls := kadm.NewACLs().Allow("User:outboxd", "User:CN=outboxd").Topics(allowed).ResourcePatternType(kadm.ACLPatternPrefixed).
		Operations(kadm.OpWrite, kadm.OpDescribe)
	created, err := adm.CreateACLs(t.Context(), acls)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range created {
		if c.Err != nil {
			t.Fatal(c.Err)
		}
	}
	return k, allowed, denied
}

// TestKafkaTLSAndSASL: against a real broker with TLS listeners, SCRAM and
// ACLs. SASL_SSL with SCRAM-SHA-512 and mutual TLS publish. A wrong
// password, a broker certificate outboxd cannot verify (no CA given, or
// expired) and a missing client certificate are retried with backoff
// while the log says why, nothing confirmed; a topic the ACLs deny stops
// the run naming the outbox id, the topic and the cause.
func TestKafkaTLSAndSASL(t *testing.T) {
	t.Parallel()
	k, allowed, denied := secureKafka(t)
	sasl := func(password string) []string {
		return []string{"--brokers", k.SASLSSL, "--kafka-tls-ca-file", k.CA, "--kafka-sasl-mechanism", "SCRAM-SHA-512",
			"--kafka-sasl-username", "outboxd", "--kafka-sasl-password", password}
	}
	tests := []struct {
		name  string
		args  []string
		topic string
		// published: the row arrives; otherwise the log says retry (and
		// the process runs on) or, with exit, the run stops.
		published bool
		retry     string
		exit      string
	}{
		{name: "SASL_SSL with SCRAM-SHA-512", args: sasl(scramPassword), topic: allowed, published: true},
		{name: "mutual TLS", args: []string{"--brokers", k.MTLS, "--kafka-tls-ca-file", k.CA, "--kafka-tls-cert-file", k.ClientCert, "--kafka-tls-key-file", k.ClientKey},
			topic: allowed, published: true},
		{name: "wrong password", args: sasl("wrong-password"), topic: allowed, retry: "Authentication failed"},
		{name: "untrusted certificate", args: []string{"--brokers", k.SASLSSL, "--kafka-tls", "--kafka-sasl-mechanism", "SCRAM-SHA-512",
			"--kafka-sasl-username", "outboxd", "--kafka-sasl-password", scramPassword}, topic: allowed, retry: "certificate signed by unknown authority"},
		{name: "expired certificate", args: []string{"--brokers", k.Expired, "--kafka-tls-ca-file", k.CA, "--kafka-tls-cert-file", k.ClientCert, "--kafka-tls-key-file", k.ClientKey},
			topic: allowed, retry: "certificate has expired"},
		{name: "no client certificate", args: []string{"--brokers", k.MTLS, "--kafka-tls-ca-file", k.CA}, topic: allowed, retry: "tls: bad certificate"},
		{name: "a topic the ACLs deny", args: sasl(scramPassword), topic: denied, exit: "TOPIC_AUTHORIZATION_FAILED"},
	}
	// Issue 53: doctor asks the broker what this client may do on the
	// topics it knows ahead, with the client run would use.
	t.Run("doctor", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		mine := testenv.CreateTopic(t, []string{k.Plain}, allowed+testenv.Name(t, "dlq"), 3)
		_, findings, out := doctor(t, append([]string{"--database-url", w.url, "--slot", w.slot, "--dead-letter-topic", mine}, sasl(scramPassword)...)...)
		if f := findingOf(findings, "topic "+mine); f == nil || f.Severity == sevFail || !strings.Contains(f.Found, "may write") && !strings.Contains(f.Found, "replication factor 1") {
			t.Errorf("doctor on a topic the ACLs let outboxd write: %+v, want no failure:\n%s", f, out)
		}
		code, findings, out := doctor(t, append([]string{"--database-url", w.url, "--slot", w.slot, "--dead-letter-topic", denied}, sasl(scramPassword)...)...)
		if f := findingOf(findings, "topic "+denied); code != 1 || f == nil || f.Severity != sevFail || !strings.Contains(f.Fix, "--allow-principal User:outboxd --operation Write") {
			t.Errorf("doctor on a topic the ACLs deny: exit %d, %+v; want 1, a failure with the kafka-acls.sh fix:\n%s", code, f, out)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.topic = tt.topic
			if tt.topic == allowed {
				w.topic = testenv.CreateTopic(t, []string{k.Plain}, allowed+testenv.Name(t, "t"), 3)
			}
			p := w.start(t, tt.args...)
			ids := w.write(t, 1, 0)
			switch {
			case tt.published:
				w.brokers = k.Plain // read back as the super user
				w.consumeAll(t, ids, time.Minute)
			case tt.exit != "":
				if code := p.wait(t, time.Minute); code != exitError {
					t.Fatalf("exit code %d, want %d; log:\n%s", code, exitError, p.log())
				}
				if log := p.log(); !strings.Contains(log, tt.exit) || !strings.Contains(log, "outbox id "+strconv.FormatInt(ids[0], 10)) || !strings.Contains(log, tt.topic) {
					t.Errorf("the log does not name the cause %s, outbox id %d and topic %s:\n%s", tt.exit, ids[0], tt.topic, log)
				}
			default:
				waitLogged(t, p, tt.retry, time.Minute)
				time.Sleep(3 * time.Second)
				for _, line := range strings.Split(p.log(), "\n") {
					if strings.Contains(line, tt.retry) {
						t.Logf("%s: %s", tt.name, line)
						if !strings.Contains(line, "level=WARN") {
							t.Errorf("a failure outboxd retries is logged at %s, want Warn", line)
						}
						break
					}
				}
				select {
				case <-p.done:
					t.Fatalf("outboxd gave up instead of retrying:\n%s", p.log())
				default:
				}
				if got := topicRecords(t, &world{brokers: k.Plain, topic: w.topic}); got != 0 {
					t.Errorf("%d records in %s, want none", got, w.topic)
				}
				if strings.Contains(p.log(), scramPassword) || strings.Contains(p.log(), "wrong-password") {
					t.Errorf("the log shows a password:\n%s", p.log())
				}
			}
		})
	}
}

// TestRenewedClientCertificateIsUsedWithoutARestart is issue 49, item 7:
// the Kafka TLS files were read once, at start, so a client certificate
// renewed in place (cert-manager, Vault) was never picked up: once the
// old one expired, every new connection failed until a restart, while
// /healthz said ok. outboxd starts here with an expired client
// certificate (the broker refuses the handshake, and outboxd retries);
// the files are then renewed in place, as cert-manager does (written
// anew, renamed over), and the row arrives, the process never restarted.
func TestRenewedClientCertificateIsUsedWithoutARestart(t *testing.T) {
	t.Parallel()
	k, allowed, _ := secureKafka(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	renew := func(certFrom, keyFrom string) {
		t.Helper()
		for _, f := range []struct{ from, to string }{{keyFrom, key}, {certFrom, cert}} {
			b, err := os.ReadFile(f.from)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, f.to+".new", string(b))
			if err := os.Rename(f.to+".new", f.to); err != nil {
				t.Fatal(err)
			}
		}
	}
	renew(k.ExpiredClientCert, k.ExpiredClientKey)
	w := newWorld(t)
	w.topic = testenv.CreateTopic(t, []string{k.Plain}, allowed+testenv.Name(t, "t"), 3)
	p := w.start(t, "--brokers", k.MTLS, "--kafka-tls-ca-file", k.CA, "--kafka-tls-cert-file", cert, "--kafka-tls-key-file", key)
	ids := w.write(t, 1, 0)
	waitLogged(t, p, "certificate", time.Minute) // the broker refuses the expired one; outboxd retries
	if got := topicRecords(t, &world{brokers: k.Plain, topic: w.topic}); got != 0 {
		t.Fatalf("%d records in %s with an expired client certificate, want none", got, w.topic)
	}
	renew(k.ClientCert, k.ClientKey)
	w.brokers = k.Plain // read back as the super user
	w.consumeAll(t, ids, time.Minute)
	select {
	case <-p.done:
		t.Fatalf("outboxd exited:\n%s", p.log())
	default:
	}
}
