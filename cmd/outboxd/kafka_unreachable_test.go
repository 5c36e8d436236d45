package main

import (
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/harness/testenv"
)

// TestWrongBrokerDoesNotLookHealthy is issue 37, item 19: with --brokers
// wrong from the start (nothing listening), outboxd said nothing about
// Kafka, kept reporting plain "streaming", counted 0 connection errors and
// read a replication lag of 0 while a record waited for minutes. Now it
// warns at start naming the brokers, counts the failed dials, reports the
// age of the waiting record as the lag, says since when Kafka is
// unreachable on /pipelines, and publishes the record once the broker
// answers. /readyz stays 200 throughout (issue 49, item 1: readiness is the
// process's; a Kafka out of reach made every replica not ready).
//
// The broker is a private one, stopped before outboxd starts: its address
// is the wrong one until the test starts it again.
func TestWrongBrokerDoesNotLookHealthy(t *testing.T) {
	t.Parallel()
	kafka := testenv.StartKafka(t)
	w := &world{url: testenv.Database(t), brokers: kafka.Addr, slot: testenv.Name(t, "slot")}
	w.topic = testenv.CreateTopic(t, []string{kafka.Addr}, testenv.Name(t, "topic"), 1)
	if out, err := exec.Command(builtBinary, "migrate", "--database-url", w.url, "--slot", w.slot).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	var err error
	if w.pool, err = pgxpool.New(t.Context(), w.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	kafka.Stop(t)

	p := w.start(t, "--metrics-addr", anyPort)
	addr := servedAt(t, p.log)
	waitFor(t, 30*time.Second, "metrics served", func() bool { code, _ := get(addr, "/metrics"); return code == 200 })
	waitFor(t, 30*time.Second, "streaming", func() bool {
		_, body := get(addr, "/metrics")
		return metric(body, w.slot, `outboxd_state{state="streaming"}`) == 1
	})
	ids := w.write(t, 1, 0)
	var first string
	waitFor(t, 30*time.Second, "the rows in flight", func() bool {
		_, first = get(addr, "/metrics")
		return metric(first, w.slot, "outboxd_in_flight_records") == float64(len(ids))
	})

	// Two scrapes while the records wait: the lag is their age and grows,
	// the failed dials keep counting.
	lag1 := metric(first, w.slot, "outboxd_replication_lag_seconds")
	errs1 := metric(first, w.slot, `outboxd_errors_total{kind="connection"}`)
	if lag1 <= 0 {
		t.Errorf("outboxd_replication_lag_seconds = %v while %d records wait for Kafka, want > 0", lag1, len(ids))
	}
	if errs1 <= 0 {
		t.Errorf(`outboxd_errors_total{kind="connection"} = %v with nothing listening at --brokers %s, want > 0`, errs1, kafka.Addr)
	}
	var lag2, errs2 float64
	var second string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		_, second = get(addr, "/metrics")
		lag2, errs2 = metric(second, w.slot, "outboxd_replication_lag_seconds"), metric(second, w.slot, `outboxd_errors_total{kind="connection"}`)
		if lag2 > lag1 && errs2 > errs1 {
			break
		}
	}
	if lag2 <= lag1 {
		t.Errorf("outboxd_replication_lag_seconds went from %v to %v while the records wait, want it growing", lag1, lag2)
	}
	if errs2 <= errs1 {
		t.Errorf(`outboxd_errors_total{kind="connection"} went from %v to %v while Kafka is unreachable, want it rising`, errs1, errs2)
	}
	if v := metric(second, w.slot, "outboxd_kafka_unreachable_seconds"); v <= 0 {
		t.Errorf("outboxd_kafka_unreachable_seconds = %v, want > 0", v)
	}
	if code, body := get(addr, "/pipelines"); code != 200 || !strings.Contains(body, `"kafka_unreachable_since"`) {
		t.Errorf("/pipelines = %d %q, want 200 saying kafka_unreachable_since", code, body)
	}
	if code, body := get(addr, "/readyz"); code != 200 || body != "ready: 1 pipeline (streaming)\n" {
		t.Errorf("readyz = %d %q while Kafka is unreachable, want 200 ready: 1 pipeline (streaming)", code, body)
	}
	warn := regexp.MustCompile(`level=WARN msg="Kafka unreachable at start[^"]*" brokers=` + regexp.QuoteMeta(kafka.Addr) + ` err=`)
	if !warn.MatchString(p.log()) {
		t.Errorf("no Warn about Kafka at start naming the brokers and the error; log:\n%s", p.log())
	}
	if t.Failed() {
		return
	}

	// The broker answers at its address: the records go out, and
	// everything reads healthy again.
	kafka.Start(t)
	w.consumeAll(t, ids, 2*time.Minute)
	waitFor(t, 2*time.Minute, "Kafka reachable logged", func() bool {
		return strings.Contains(p.log(), `level=INFO msg="Kafka reachable`)
	})
	waitFor(t, 30*time.Second, "lag 0, nothing in flight, Kafka reachable", func() bool {
		_, body := get(addr, "/metrics")
		return metric(body, w.slot, "outboxd_in_flight_records") == 0 && metric(body, w.slot, "outboxd_replication_lag_seconds") == 0 &&
			metric(body, w.slot, "outboxd_kafka_unreachable_seconds") == 0
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM; log:\n%s", code, p.log())
	}
}
