package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outboxd/harness/testenv"
)

// TestMemoryStaysWithinItsLimitWhileKafkaIsDown is issue 49, item 2: each
// pipeline's records in flight were bounded (16 MiB by default), the
// process's were not, so with Kafka slow or gone a pod of many busy
// pipelines grew past its memory limit and was killed, again after each
// restart. The process's pipelines now share one in-flight budget, taken
// by default from the memory limit (here the cgroup's, which outboxd also
// sets, at 90 %, as GOMEMLIMIT).
//
// 20 pipelines, each with 8 MiB of 2 KiB payloads written while Kafka is
// stopped (160 MiB, the process's limit), Kafka kept stopped a minute:
// the peak RSS stays under the limit, the process is not killed, every
// pipeline has records in flight (none starves) and all of them together
// no more than the budget; once Kafka is back, every row arrives.
func TestMemoryStaysWithinItsLimitWhileKafkaIsDown(t *testing.T) {
	t.Parallel()
	const (
		pipelines = 20
		limit     = 160 << 20
		payload   = 2048
		rowsEach  = 4096 // 8 MiB of payload each: no pipeline's own cap (16 MiB) binds
		txnRows   = 16
	)
	pg := testenv.StartPostgres(t)
	kafka := testenv.StartKafka(t)
	topic := testenv.CreateTopic(t, []string{kafka.Addr}, testenv.Name(t, "mem"), 3)
	var file strings.Builder
	fmt.Fprintf(&file, "brokers: %s\nstatus-interval: 200ms\nmetrics-addr: %s\npipelines:\n", kafka.Addr, anyPort)
	urls := make([]string, pipelines)
	for i := range urls {
		urls[i] = testenv.DatabaseOn(t, pg.URL)
		fmt.Fprintf(&file, "  - name: p%02d\n    database-url: %s\n    slot: mem_%02d\n", i, urls[i], i)
	}
	path := filepath.Join(t.TempDir(), "pipelines.yaml")
	writeFile(t, path, file.String())
	if code, stdout, stderr := runOutboxd(t, nil, "migrate", "--config", path); code != exitOK {
		t.Fatalf("migrate --config: exit %d\n%s%s", code, stdout, stderr)
	}

	var wrap func(...string) []string
	var env []string
	cg, err := testenv.NewMemoryCgroup(t, limit)
	if err != nil {
		// The limit is then the Go runtime's alone: the peak RSS is still
		// held against the container's limit this test stands for.
		t.Logf("%v: running with GOMEMLIMIT instead", err)
		env = append(env, "GOMEMLIMIT="+strconv.Itoa(limit*9/10))
	} else {
		wrap = cg.Wrap
	}
	p := startWrapped(t, wrap, []string{"run", "--config", path}, env...)
	addr := servedAt(t, p.log)
	testenv.Eventually(t, 2*time.Minute, "every pipeline streaming", func() bool {
		return strings.Count(pipelineStates(addr), "streaming") == pipelines
	})
	_, body := get(addr, "/metrics")
	budget := processMetric(body, "outboxd_in_flight_budget_bytes")
	if want := float64(limit*9/10) / 4; budget != want {
		t.Fatalf("outboxd_in_flight_budget_bytes = %v, want a quarter of 90 %% of the %d-byte limit, %v", budget, limit, want)
	}

	kafka.Stop(t)
	pad := strings.Repeat("x", payload)
	var g errgroup.Group
	for i, url := range urls {
		g.Go(func() error {
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			for n := 0; n < rowsEach; n += txnRows {
				if _, err := conn.Exec(context.Background(), `INSERT INTO outbox (aggregate_id, topic, payload)
					SELECT gen_random_uuid(), $1, jsonb_build_object('db', $2::int, 'n', n, 'pad', $3::text) FROM generate_series($4::int, $5::int) n`,
					topic, i, pad, n, n+txnRows-1); err != nil {
					return fmt.Errorf("writing to database %d: %w", i, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// The budget fills: every pipeline reads its rows until it has no room.
	var held map[string]float64
	exited := func() bool {
		select {
		case <-p.done:
			killed := 0
			if cg != nil {
				killed = cg.Killed()
			}
			t.Fatalf("outboxd exited (%v; %d processes of its cgroup killed for their memory)", p.cmd.ProcessState, killed)
		default:
		}
		return false
	}
	testenv.Eventually(t, 2*time.Minute, "the in-flight budget full", func() bool {
		_, body := get(addr, "/metrics")
		held = perPipeline(body, "outboxd_in_flight_bytes")
		return exited() || sum(held) >= 0.9*budget
	})
	hold := time.Now()
	for time.Since(hold) < time.Minute {
		_, body := get(addr, "/metrics")
		held = perPipeline(body, "outboxd_in_flight_bytes")
		records := perPipeline(body, "outboxd_in_flight_records")
		if len(records) != pipelines {
			t.Fatalf("in-flight records of %d pipelines on /metrics, want %d", len(records), pipelines)
		}
		for name, n := range records {
			if n == 0 {
				t.Errorf("pipeline %s has nothing in flight while Kafka is down and its rows wait: it starves", name)
			}
		}
		// A pipeline with nothing in flight may take one record beyond.
		if total := sum(held); total > budget+pipelines*(payload+200) {
			t.Errorf("%v bytes in flight, over the budget of %v", total, budget)
		}
		if t.Failed() {
			return
		}
		time.Sleep(time.Second)
	}
	peak := peakRSS(t, p)
	t.Logf("Kafka down a minute: %v bytes in flight (budget %v), peak RSS %.1f MiB (limit %d MiB)", sum(held), budget, float64(peak)/(1<<20), limit>>20)
	if peak >= limit {
		t.Errorf("peak RSS %d bytes, over the limit of %d", peak, limit)
	}
	if cg != nil && cg.Killed() > 0 {
		t.Errorf("the kernel killed %d processes in the cgroup for their memory", cg.Killed())
	}

	kafka.Start(t)
	got := consumeSourced(t, kafka.Addr, topic, pipelines*rowsEach)
	if got != pipelines*rowsEach {
		t.Errorf("%d distinct rows in Kafka, want %d", got, pipelines*rowsEach)
	}
	select {
	case <-p.done:
		t.Errorf("outboxd exited (%v):\n%s", p.cmd.ProcessState, tail(p.log(), 30))
	default:
	}
}

// processMetric reads a series of the process's own (no pipeline label)
// from a /metrics body, -1 when absent.
func processMetric(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// perPipeline reads an unlabelled series of every pipeline from a
// /metrics body.
func perPipeline(body, name string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name+`{pipeline="`)
		if !ok {
			continue
		}
		pipeline, v, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[pipeline] = f
		}
	}
	return out
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, p *proc) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// consumeSourced reads topic until want distinct rows (source and outbox
// id) arrived, or two minutes passed, and returns how many did.
func consumeSourced(t *testing.T, brokers, topic string, want int) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	seen := map[string]bool{}
	for len(seen) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var id, source string
			for _, h := range r.Headers {
				switch h.Key {
				case "id":
					id = string(h.Value)
				case "outboxd.source":
					source = string(h.Value)
				}
			}
			seen[source+"#"+id] = true
		})
	}
	return len(seen)
}
