package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"time"

	"github.com/outboxd/outboxd/harness/netfault"
	"github.com/outboxd/outboxd/harness/testbed"
)

// injector injects faults and keeps track of the active publisher.
type injector struct {
	publishers *publishers
	pg         *testbed.Postgres
	// standby is the physical standby outboxd decodes on (nil: it
	// decodes on pg). writeURL reaches the primary (over both hosts with
	// a standby), slotURL the slot's server.
	standby           *testbed.Postgres
	writeURL, slotURL string
	exactlyOnce       bool
	kafka             *testbed.Kafka        // single-broker runs
	cluster           *testbed.KafkaCluster // three-broker runs
	kafkaProxy        *netfault.Proxy       // between every client and the single broker
	pgProxy           *netfault.Proxy       // between outboxd and PostgreSQL
	topic             string
	brokers           []string
	events            int64               // what the writers write in all
	detect            map[Fault][]float64 // ms
	recover           map[Fault][]float64 // ms
	live              *liveConsumer
	ledger            *ledger
	log               *slog.Logger
	rng               *rand.Rand
	active            *publisher
	takeovers         []float64 // ms
	failovers         []float64 // ms
	backfilled        []int64   // rows each failover's recovery backfilled
	problems          []string
}

// checkActive fails when the active publisher exited on its own: outboxd
// must survive every fault here by retrying.
func (in *injector) checkActive() error {
	if done, code := in.active.exited(); done {
		return fmt.Errorf("%s exited on its own with code %d; log tail:\n%s", in.active.name, code, in.active.tail())
	}
	return nil
}

func (in *injector) restart() error {
	p, err := in.publishers.start()
	if err != nil {
		return err
	}
	in.active = p
	return nil
}

func (in *injector) inject(ctx context.Context, f Fault) error {
	switch f {
	case FaultKill9:
		in.active.kill()
		return in.restart()
	case FaultSIGTERM:
		// A graceful stop of a streaming publisher (a SIGTERM before the
		// process installed its handler is the default action, not a test).
		if err := in.waitStreaming(ctx, in.active); err != nil {
			return err
		}
		code, err := in.active.terminate(time.Minute)
		if err != nil {
			return err
		}
		if code != 0 {
			in.problems = append(in.problems, fmt.Sprintf("SIGTERM: %s exited with code %d; log tail:\n%s", in.active.name, code, in.active.tail()))
		}
		return in.restart()
	case FaultBroker:
		if err := in.kafka.Stop(ctx); err != nil {
			return err
		}
		in.sleep(ctx, 500*time.Millisecond, 2*time.Second)
		return in.kafka.Start(ctx)
	case FaultPostgres:
		if err := in.pg.Stop(ctx, "fast"); err != nil {
			return err
		}
		in.sleep(ctx, 100*time.Millisecond, time.Second)
		return in.pg.Start(ctx)
	case FaultWalsender:
		return in.terminateWalsender(ctx)
	case FaultTakeover:
		return in.takeover(ctx)
	case FaultFailover:
		return in.failover(ctx)
	case FaultStandbyCrash:
		start := time.Now()
		if err := in.standby.Stop(ctx, "immediate"); err != nil {
			return err
		}
		in.sleep(ctx, 100*time.Millisecond, time.Second)
		if err := in.standby.Start(ctx); err != nil {
			return err
		}
		return in.timeRecovery(ctx, f, start, "")
	case FaultStandbyPromote:
		return in.promote(ctx)
	}
	return in.injectNetworkOrCluster(ctx, f)
}

func (in *injector) sleep(ctx context.Context, lo, hi time.Duration) {
	d := lo + time.Duration(in.rng.Int64N(int64(hi-lo)))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// terminateWalsender ends the active walsender with pg_terminate_backend,
// waiting (up to 30 s) for one to exist: the publisher may be reconnecting.
func (in *injector) terminateWalsender(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := queryRow(ctx, in.slotURL, `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, []any{slotName}, &n)
		if err == nil && n == 1 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no active walsender on slot %s to terminate within 30 s", slotName)
}

// takeover starts a standby, waits until it stands by on the busy slot,
// kills the active with SIGKILL and times how long until a record written
// after the kill reaches a consumer.
func (in *injector) takeover(ctx context.Context) error {
	// The active may be reconnecting after an earlier fault; a standby
	// started now could win the slot. Wait until the active streams.
	if err := in.waitStreaming(ctx, in.active); err != nil {
		return err
	}
	standby, err := in.publishers.start()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = standby.waitLog(wctx, "standing by")
	cancel()
	if err != nil {
		standby.kill()
		return err
	}
	// Writers must keep writing through the takeover: its end is the first
	// record written after the kill.
	in.ledger.keepWriting(2000)
	in.live.watch(in.ledger.maxID.Load())
	killed := time.Now()
	in.active.kill()
	in.active = standby
	select {
	case seen := <-in.live.seen:
		ms := float64(seen.Sub(killed).Microseconds()) / 1000
		in.takeovers = append(in.takeovers, ms)
		in.log.Info("standby took over", "ms", ms)
		return nil
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("no record from the standby within 2 minutes of the kill; standby log tail:\n%s", standby.tail())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitStreaming waits (up to a minute) until p has a walsender.
func (in *injector) waitStreaming(ctx context.Context, p *publisher) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var n int
		err := queryRow(ctx, in.slotURL, `SELECT count(*) FROM pg_stat_replication WHERE application_name = $1`, []any{p.appName()}, &n)
		if err == nil && n > 0 {
			return nil
		}
		if done, code := p.exited(); done {
			return fmt.Errorf("%s exited with code %d; log tail:\n%s", p.name, code, p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not stream within a minute; log tail:\n%s", p.name, p.tail())
}

func queryRow(ctx context.Context, url, sql string, args []any, dest ...any) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

// runCmd runs a command and returns its combined output.
func runCmd(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// promote kills the primary (pg_ctl stop -m immediate) and promotes the
// standby outboxd decodes on. The writers and --primary-url name both
// hosts and follow the new primary; the stream goes on on the promoted
// server. With exactly-once delivery outboxd stops at a change of
// timeline when it reconnects (its progress is per timeline), and is
// started again, as a supervisor would.
func (in *injector) promote(ctx context.Context) error {
	start := time.Now()
	if err := in.pg.Stop(ctx, "immediate"); err != nil {
		return err
	}
	if err := in.standby.Promote(ctx); err != nil {
		return err
	}
	if in.exactlyOnce {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if done, code := in.active.exited(); done {
				in.log.Info("outboxd stopped at the promotion (exactly-once: a new timeline); starting it again", "code", code)
				if err := in.restart(); err != nil {
					return err
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return in.timeRecovery(ctx, FaultStandbyPromote, start, "")
}
