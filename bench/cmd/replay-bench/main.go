// Command replay-bench measures what an outboxd replay (issue 53) costs
// the stream that runs beside it: the stream's commit-to-consumer latency
// at steady write rates with no replay and beside a replay capped with
// --replay-rate, the two interleaved repetition by repetition, then
// beside one at full speed, on the same servers and the same outboxd run.
// Each replay re-publishes rows of the same outbox table written before
// the bench (a topic of its own per run) and is stopped with SIGTERM when
// the steady run ends; its rows acknowledged per second are reported
// with the machine's CPU. It writes results.json and README.md into -out.
//
//	make bench-replay    (not part of make test)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outboxd/outboxd/bench/internal/cmdline"
	"github.com/outboxd/outboxd/bench/internal/host"
	"github.com/outboxd/outboxd/bench/internal/servers"
	"github.com/outboxd/outboxd/bench/internal/steady"
)

type options struct {
	outboxd, testbed, out string
	rates                 []int
	reps, txSize, rows    int
	replayRate            int
	duration              time.Duration
}

func main() {
	var o options
	rates := flag.String("rates", "1000,5000", "steady write rates of the stream, events/s")
	flag.StringVar(&o.outboxd, "outboxd", "bin/outboxd", "outboxd binary")
	flag.StringVar(&o.testbed, "testbed", "harness/testbed/testbed.sh", "test bed script")
	flag.StringVar(&o.out, "out", "docs/bench/replay", "output directory")
	flag.IntVar(&o.reps, "reps", 5, "repetitions of each rate and arm (medians and spreads are reported)")
	flag.IntVar(&o.txSize, "transaction-size", 10, "events per transaction of the stream")
	flag.IntVar(&o.rows, "rows", 3_000_000, "rows in the table before the bench, which each replay re-publishes from the first (more than an uncapped replay gets through in a run)")
	flag.IntVar(&o.replayRate, "replay-rate", 2000, "the capped arm's --replay-rate")
	flag.DurationVar(&o.duration, "rate-duration", 10*time.Second, "how long each steady rate is written")
	flag.Parse()
	var err error
	if o.rates, err = cmdline.PositiveInts("rates", *rates); err != nil {
		fmt.Fprintln(os.Stderr, "replay-bench:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, "replay-bench:", err)
		os.Exit(1)
	}
}

// Arms: what runs beside the stream.
const (
	armAlone   = "no replay"
	armCapped  = "replay, capped"
	armFullOut = "replay, uncapped"
)

var arms = []string{armAlone, armCapped, armFullOut}

// result is one steady run of one arm.
type result struct {
	Arm  string `json:"arm"`
	Rate int    `json:"target_events_per_second"`
	Rep  int    `json:"rep"`
	steady.Result
	// ReplayRowsPerS is the rows the replay had Kafka acknowledge per
	// second of the steady run (0 without a replay).
	ReplayRowsPerS float64 `json:"replay_rows_per_second"`
	MachineBusy    float64 `json:"machine_cpu_busy"`
}

type report struct {
	When       time.Time         `json:"when"`
	Command    string            `json:"command"`
	Host       map[string]string `json:"host"`
	PGVersion  string            `json:"postgres_version"`
	TxSize     int               `json:"transaction_size"`
	Rows       int               `json:"rows_replayable"`
	ReplayRate int               `json:"capped_replay_rate"`
	DurationS  float64           `json:"rate_duration_seconds"`
	Runs       []result          `json:"runs"`
	Summary    []summary         `json:"summary"`
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	srv, err := servers.Start(ctx, o.testbed)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Remove(context.WithoutCancel(ctx)) }()
	if err := srv.Exec(ctx, "postgres", "CREATE DATABASE app"); err != nil {
		return err
	}
	app := srv.DatabaseURL("app")
	if out, err := exec.CommandContext(ctx, o.outboxd, "migrate", "--database-url", app).CombinedOutput(); err != nil {
		return fmt.Errorf("outboxd migrate: %w\n%s", err, out)
	}
	// The replayable rows, written before the stream starts: their
	// topic is one nothing reads.
	if err := srv.CreateTopics(ctx, "replay-bench.history"); err != nil {
		return err
	}
	if err := srv.Exec(ctx, "app", fmt.Sprintf(`INSERT INTO outbox (aggregate_id, topic, payload)
		SELECT md5((g %% 1000)::text)::uuid, 'replay-bench.history', jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, %d) g`, o.rows)); err != nil {
		return err
	}
	var lastID int64
	if err := servers.QueryRow(ctx, app, `SELECT max(id) FROM outbox`, &lastID); err != nil {
		return err
	}
	stream := exec.CommandContext(ctx, o.outboxd, "run", "--database-url", app, "--brokers", srv.Kafka.Addr)
	streamLog, err := os.CreateTemp("", "replay-bench-run-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(streamLog.Name())
	stream.Stderr = streamLog
	if err := stream.Start(); err != nil {
		return err
	}
	defer func() { _ = stream.Process.Signal(syscall.SIGTERM); _ = stream.Wait() }()
	var version string
	if err := servers.QueryRow(ctx, app, `SELECT current_setting('server_version')`, &version); err != nil {
		return err
	}
	// The stream publishes those rows first: measured only once it did.
	if err := waitPublished(ctx, srv, "replay-bench.history", int64(o.rows)); err != nil {
		return err
	}
	// The table as autovacuum leaves it: the first read of a row never
	// read since its insert sets its hint bits, which dirties its page,
	// and the first replay would leave the whole table for the next
	// checkpoints to write out, inside later runs of every arm.
	if err := srv.Exec(ctx, "app", "VACUUM (FREEZE, ANALYZE) outbox", "CHECKPOINT"); err != nil {
		return err
	}
	rep := report{When: time.Now().UTC(), Command: cmdline.Join(append([]string{"replay-bench"}, os.Args[1:]...)), Host: host.Describe(),
		PGVersion: version, TxSize: o.txSize, Rows: o.rows, ReplayRate: o.replayRate, DurationS: o.duration.Seconds()}
	// An unmeasured run first (of the capped replay: the uncapped one's
	// after-effects are what the order below keeps from the other arms).
	warm := o
	warm.duration = 3 * time.Second
	if _, err := oneRun(ctx, warm, srv, app, lastID, stream.Process.Pid, armCapped, o.rates[0], 0, log); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	settle(ctx, log)
	// No replay and the capped replay interleaved, then the uncapped
	// replays: after one, the stream's p99 stayed high for minutes in
	// every arm (an earlier interleaved run: docs/bench/replay/README.md),
	// so it runs where that lands on no other arm.
	var plan []planned
	for _, rate := range o.rates {
		for i := range o.reps {
			first, second := armAlone, armCapped
			if i%2 == 1 {
				first, second = second, first
			}
			plan = append(plan, planned{first, rate, i + 1}, planned{second, rate, i + 1})
		}
	}
	for _, rate := range o.rates {
		for i := range o.reps {
			plan = append(plan, planned{armFullOut, rate, i + 1})
		}
	}
	for _, p := range plan {
		r, err := oneRun(ctx, o, srv, app, lastID, stream.Process.Pid, p.arm, p.rate, p.rep, log)
		if err != nil {
			return fmt.Errorf("%s at %d events/s, repetition %d: %w", p.arm, p.rate, p.rep, err)
		}
		log.Info("run", "arm", p.arm, "rate", p.rate, "rep", p.rep, "p50_ms", r.P50ms, "p99_ms", r.P99ms, "replay_rows_per_s", r.ReplayRowsPerS,
			"busy", r.MachineBusy, "written", r.Written, "delivered", r.Delivered)
		rep.Runs = append(rep.Runs, r)
		settle(ctx, log)
	}
	rep.Summary = summarize(rep.Runs, o.rates)
	return write(o.out, rep)
}

// planned is one run to make.
type planned struct {
	arm       string
	rate, rep int
}

// acknowledged reads the replay's last line: "replay NAME ...: N of M rows
// acknowledged by Kafka".
var acknowledged = regexp.MustCompile(`(\d+) of \d+ rows acknowledged`)

// oneRun writes at rate for the duration, with the arm's replay beside.
func oneRun(ctx context.Context, o options, srv *servers.Servers, app string, lastID int64, streamPID int, arm string, rate, repN int, log *slog.Logger) (result, error) {
	res := result{Arm: arm, Rate: rate, Rep: repN}
	topic := fmt.Sprintf("replay-bench.stream-%d-%d-%d", rate, repN, armIndex(arm))
	replayTopic := topic + ".replayed"
	if err := srv.CreateTopics(ctx, topic, replayTopic); err != nil {
		return res, err
	}
	var replay *exec.Cmd
	var out []byte
	outFile, err := os.CreateTemp("", "replay-bench-replay-*.out")
	if err != nil {
		return res, err
	}
	defer os.Remove(outFile.Name())
	defer outFile.Close()
	var started time.Time
	var a, b host.Reading
	pids := func() []int {
		if replay != nil && replay.Process != nil {
			return []int{streamPID, replay.Process.Pid}
		}
		return []int{streamPID}
	}
	res.Result, err = steady.Run(ctx, steady.Load{
		Brokers: srv.Kafka.Addr,
		Targets: []steady.Target{{URL: app, Topic: topic, Insert: steady.OutboxInsert(o.txSize), Writers: 2}},
		Rate:    rate, TxSize: o.txSize, Duration: o.duration,
		Started: func() {
			if arm != armAlone {
				args := []string{"replay", "--database-url", app, "--brokers", srv.Kafka.Addr, "--replay-to", strconv.FormatInt(lastID, 10),
					"--replay-topic", replayTopic, "--replay-name", topic}
				if arm == armCapped {
					args = append(args, "--replay-rate", strconv.Itoa(o.replayRate))
				}
				replay = exec.CommandContext(ctx, o.outboxd, args...)
				replay.Stdout = outFile
				if err := replay.Start(); err != nil {
					log.Error("starting the replay", "err", err)
					replay = nil
				}
			}
			started = time.Now()
			a = host.Read(pids(), nil)
		},
		Ended: func() {
			b = host.Read(pids(), nil)
			if replay != nil {
				_ = replay.Process.Signal(syscall.SIGTERM)
				_ = replay.Wait()
			}
		},
	})
	if err != nil {
		return res, err
	}
	_, _, res.MachineBusy = host.Used(a, b)
	if arm != armAlone {
		if out, err = os.ReadFile(outFile.Name()); err != nil {
			return res, err
		}
		m := acknowledged.FindSubmatch(out)
		if m == nil {
			return res, fmt.Errorf("the replay said no count of rows acknowledged:\n%s", out)
		}
		n, _ := strconv.Atoi(string(m[1]))
		res.ReplayRowsPerS = float64(n) / time.Since(started).Seconds()
	}
	if res.Written == 0 {
		return res, errors.New("nothing written")
	}
	return res, nil
}

// armIndex numbers an arm, for its topic's name.
func armIndex(arm string) int {
	for i, a := range arms {
		if a == arm {
			return i
		}
	}
	return -1
}

// waitPublished waits until topic holds n records.
func waitPublished(ctx context.Context, srv *servers.Servers, topic string, n int64) error {
	adm := srv.Admin()
	defer adm.Close()
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
		ends, err := adm.ListEndOffsets(ctx, topic)
		var sum int64
		if err == nil {
			ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
			if sum >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("the stream did not publish the %d rows written before the bench to %s within 10 minutes", n, topic)
}

// settle waits, after a run, until what it left behind is done: the page
// cache's dirty pages written out (an uncapped replay leaves hundreds of
// megabytes of Kafka log) and the machine idle again (below a tenth of
// its cores over a second), or 30 s, so that a run does not pay for the
// one before it. The replays' topics are kept until the end for the same
// reason: Kafka deletes a topic's files a minute later, inside a later run.
func settle(ctx context.Context, log *slog.Logger) {
	syscall.Sync()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		a, _ := host.ReadCPU()
		time.Sleep(time.Second)
		b, _ := host.ReadCPU()
		if busy := host.BusyBetween(a, b); busy < 0.1 {
			return
		}
	}
	log.Warn("the machine did not settle within 30 s after a run")
}
