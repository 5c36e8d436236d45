package main

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/netfault"
	"github.com/outboxd/outboxd/harness/testbed"
	"github.com/outboxd/outboxd/harness/testenv"
)

// proxied starts a fault-injecting proxy in front of w's PostgreSQL and
// returns it with w's database URL through it.
func proxied(t *testing.T, w *world) (*netfault.Proxy, string) {
	t.Helper()
	u, err := url.Parse(w.url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := netfault.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr
	return p, u.String()
}

// waitLogged waits until the log holds s, and returns how long that took.
func waitLogged(t *testing.T, p *proc, s string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		if strings.Contains(p.log(), s) {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the log does not say %q within %s:\n%s", s, d, p.log())
	return 0
}

// TestNetworkFaultsToPostgres: network faults between outboxd and
// PostgreSQL, each through a proxy while the application keeps writing
// (directly): nothing is lost, a reconnect re-sends at most the open
// transaction, and a black hole (no reset: the half-open case) is
// detected by --server-timeout while it lasts. Detection and recovery
// times are logged (docs/guarantees.md has the recorded ones), not
// asserted.
func TestNetworkFaultsToPostgres(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		inject func(*netfault.Proxy) error
		// detect is what the log says when outboxd notices the fault (""
		// for a fault it rides out); bigTxn writes one transaction of
		// that many rows while the fault is in place.
		detect string
		bigTxn int
		hold   time.Duration
	}{
		{name: "latency and jitter", inject: func(p *netfault.Proxy) error { return p.Latency(200, 100) }, hold: 4 * time.Second},
		{name: "bandwidth limit", inject: func(p *netfault.Proxy) error { return p.Bandwidth(16) }, hold: 4 * time.Second, bigTxn: 2000},
		{name: "black hole", inject: func(p *netfault.Proxy) error { return p.BlackHole() }, detect: "the server sent nothing on the replication connection", hold: 8 * time.Second},
		{name: "reset mid-transaction", inject: func(p *netfault.Proxy) error { return p.Reset(0) }, detect: "replication interrupted; reconnecting", bigTxn: 5000},
		{name: "slow close", inject: func(p *netfault.Proxy) error { return p.SlowClose(3000) }, hold: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			proxy, dbURL := proxied(t, w)
			p := w.start(t, "--database-url", dbURL, "--status-interval", "500ms", "--server-timeout", "2s", "--reconnect-max-interval", "1s")
			want := w.write(t, 4, 0)
			w.consumeAll(t, want, time.Minute)

			if err := tt.inject(proxy); err != nil {
				t.Fatal(err)
			}
			faulted := time.Now()
			if tt.bigTxn > 0 {
				rows, err := w.pool.Query(t.Context(), `INSERT INTO outbox (aggregate_id, topic, payload)
					SELECT '00000000-0000-4000-8000-000000000042', $1, jsonb_build_object('n', g, 'pad', repeat('x', 200)) FROM generate_series(1, $2) g RETURNING id`,
					w.topic, tt.bigTxn)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id int64
					if err := rows.Scan(&id); err != nil {
						t.Fatal(err)
					}
					want = append(want, id)
				}
				if rows.Err() != nil {
					t.Fatal(rows.Err())
				}
			}
			want = append(want, w.write(t, 4, 100)...)
			if tt.detect != "" {
				t.Logf("%s: detected after %s", tt.name, waitLogged(t, p, tt.detect, time.Minute).Round(time.Millisecond))
			}
			if rest := tt.hold - time.Since(faulted); rest > 0 {
				time.Sleep(rest)
			}
			proxy.Heal()
			healed := time.Now()
			after := w.write(t, 1, 200)
			want = append(want, after...)
			seen := make(chan time.Time, 1)
			counts := w.consumeEach(t, want, 2*time.Minute, func(_ *kgo.Record, id int64) {
				if id == after[0] {
					select {
					case seen <- time.Now():
					default:
					}
				}
			})
			t.Logf("%s: a row written after the heal published %s after it", tt.name, (<-seen).Sub(healed).Round(time.Millisecond))
			dups := 0
			for _, id := range want {
				dups += counts[id] - 1
			}
			// A reconnect re-sends at most the open transaction: the big
			// one, or one of write's 5 rows.
			if bound := max(tt.bigTxn, 5); dups > bound {
				t.Errorf("%d duplicates, want at most %d (the open transaction)", dups, bound)
			}
			select {
			case <-p.done:
				t.Fatalf("outboxd exited:\n%s", p.log())
			default:
			}
		})
	}
}

// kafkaBehindProxy starts a private broker that clients reach through a
// fault-injecting proxy (the broker advertises the proxy's address), with
// w's topic on it, and points w at it.
func kafkaBehindProxy(t *testing.T, w *world) (*netfault.Proxy, *testbed.Kafka) {
	t.Helper()
	brokerAddr, err := netfault.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, err := netfault.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.StartOn(proxyAddr, brokerAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	_, port, _ := net.SplitHostPort(brokerAddr)
	p, _ := strconv.Atoi(port)
	k, err := testbed.StartKafkaAdvertised(context.Background(), testenv.Script(t), t.TempDir(), p, proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })
	w.brokers = k.Addr
	w.topic = testenv.CreateTopic(t, []string{k.Addr}, testenv.Name(t, "t"), 3)
	return proxy, k
}

// confirmedLSN reads the slot's confirmed position.
func (w *world) confirmedLSN(t *testing.T) string {
	t.Helper()
	var lsn string
	if err := w.pool.QueryRow(t.Context(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// TestNetworkFaultsToKafka: network faults between outboxd and its
// broker, and a broker that stalls (SIGSTOP: connections open, nothing
// answered), while the application writes: while Kafka cannot
// acknowledge, the slot is not confirmed past what was written during the
// fault; once healed everything arrives, and nothing is sent twice (the
// producer is idempotent and outboxd never gave up on a record). Recovery
// times are logged, not asserted.
func TestNetworkFaultsToKafka(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		inject func(*netfault.Proxy, *testbed.Kafka) error
		heal   func(*netfault.Proxy, *testbed.Kafka) error
		hold   time.Duration
		// blocks says Kafka cannot acknowledge while the fault lasts;
		// detect is what the log says once the client noticed by itself.
		blocks bool
		detect string
	}{
		{name: "latency and jitter", inject: func(p *netfault.Proxy, _ *testbed.Kafka) error { return p.Latency(200, 100) }, hold: 4 * time.Second},
		{name: "bandwidth limit", inject: func(p *netfault.Proxy, _ *testbed.Kafka) error { return p.Bandwidth(16) }, hold: 4 * time.Second},
		{name: "black hole", inject: func(p *netfault.Proxy, _ *testbed.Kafka) error { return p.BlackHole() }, hold: 15 * time.Second, blocks: true},
		// Held past franz-go's request timeout (10 s plus the request's
		// own): the client ends the silent connection by itself, before
		// the heal would close it.
		{name: "black hole past the client's timeouts", inject: func(p *netfault.Proxy, _ *testbed.Kafka) error { return p.BlackHole() },
			hold: 45 * time.Second, blocks: true, detect: "i/o timeout"},
		{name: "reset", inject: func(p *netfault.Proxy, _ *testbed.Kafka) error { return p.Reset(0) }, hold: 3 * time.Second},
		{name: "slow close", inject: func(p *netfault.Proxy, _ *testbed.Kafka) error { return p.SlowClose(3000) }, hold: 3 * time.Second},
		{name: "broker restart behind a proxy", inject: func(_ *netfault.Proxy, k *testbed.Kafka) error { return k.Stop(context.Background()) },
			heal: func(_ *netfault.Proxy, k *testbed.Kafka) error { return k.Start(context.Background()) }, hold: 5 * time.Second, blocks: true},
		// Connections closed before their first answer (a broker starting
		// up, a proxy in front of one that is down): franz-go takes them
		// for a TLS or SASL misconfiguration ("is TLS missing?") and may
		// fail the records; outboxd has it retry (kgo.AlwaysRetryEOF).
		{name: "connections closed before their first answer", inject: func(p *netfault.Proxy, _ *testbed.Kafka) error { return p.CloseBeforeAnswer() },
			hold: 5 * time.Second, blocks: true},
		{name: "broker stall", inject: func(_ *netfault.Proxy, k *testbed.Kafka) error { return k.Signal(syscall.SIGSTOP) },
			heal: func(_ *netfault.Proxy, k *testbed.Kafka) error { return k.Signal(syscall.SIGCONT) }, hold: 15 * time.Second, blocks: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			proxy, broker := kafkaBehindProxy(t, w)
			p := w.start(t, "--status-interval", "500ms")
			want := w.write(t, 4, 0)
			w.consumeAll(t, want, time.Minute)

			if err := tt.inject(proxy, broker); err != nil {
				t.Fatal(err)
			}
			// The slot may be confirmed up to the first row written during
			// the fault (a keepalive's WAL end), never past its commit.
			want = append(want, w.write(t, 1, 100)...)
			var before string
			if err := w.pool.QueryRow(t.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&before); err != nil {
				t.Fatal(err)
			}
			want = append(want, w.write(t, 3, 105)...)
			time.Sleep(tt.hold)
			if tt.detect != "" {
				for _, line := range strings.Split(p.log(), "\n") {
					if strings.Contains(line, tt.detect) {
						t.Logf("detected: %s", line)
						break
					}
				}
				if !strings.Contains(p.log(), tt.detect) {
					t.Errorf("after %s of a black hole the log does not say %q: the client did not notice by itself", tt.hold, tt.detect)
				}
			}
			if tt.blocks {
				var passed bool
				if err := w.pool.QueryRow(t.Context(), `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, w.slot, before).Scan(&passed); err != nil {
					t.Fatal(err)
				}
				if passed {
					t.Fatalf("with Kafka unreachable the slot was confirmed to %s, at or past %s, after the commit of a row Kafka never acknowledged", w.confirmedLSN(t), before)
				}
			}
			heal := tt.heal
			if heal == nil {
				heal = func(p *netfault.Proxy, _ *testbed.Kafka) error { p.Heal(); return nil }
			}
			if err := heal(proxy, broker); err != nil {
				t.Fatal(err)
			}
			healed := time.Now()
			after := w.write(t, 1, 200)
			want = append(want, after...)
			seen := make(chan time.Time, 1)
			counts := w.consumeEach(t, want, 3*time.Minute, func(_ *kgo.Record, id int64) {
				if id == after[0] {
					select {
					case seen <- time.Now():
					default:
					}
				}
			})
			t.Logf("%s: a row written after the heal published %s after it", tt.name, (<-seen).Sub(healed).Round(time.Millisecond))
			for _, id := range want {
				if counts[id] != 1 {
					t.Errorf("id %d published %d times, want once", id, counts[id])
				}
			}
			select {
			case <-p.done:
				t.Fatalf("outboxd exited:\n%s", p.log())
			default:
			}
		})
	}
}

// TestStartWhileTheBrokerIsDown: outboxd started while the broker behind
// a proxy is down (the proxy accepts, then closes at once, which franz-go
// takes for a misconfiguration and may fail records on: the chaos run saw
// a publisher stop so, "broker closed the connection immediately during
// api versions negotiation ... is TLS missing?", with its broker left
// down) keeps retrying, and publishes everything once it is back.
func TestStartWhileTheBrokerIsDown(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	_, broker := kafkaBehindProxy(t, w)
	if err := broker.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := w.start(t, "--status-interval", "500ms")
	want := w.write(t, 2, 0)
	for range 3 {
		time.Sleep(2 * time.Second)
		want = append(want, w.write(t, 1, 10)...)
	}
	select {
	case <-p.done:
		t.Fatalf("outboxd gave up on the broker:\n%s", p.log())
	default:
	}
	if err := broker.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.consumeAll(t, want, time.Minute)
}
