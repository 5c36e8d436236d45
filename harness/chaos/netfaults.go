package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/harness/netfault"
	"github.com/outboxd/outboxd/harness/testbed"
)

// serverTimeout is the publishers' --server-timeout: a partition from
// PostgreSQL is noticed about this long after its last message.
const serverTimeout = 2 * time.Second

// reconnecting is what outboxd logs when it takes a session for lost.
const reconnecting = "replication interrupted; reconnecting"

// checkFaults refuses faults the run's Kafka cannot have.
func checkFaults(o Options) error {
	for f, n := range o.Faults {
		switch {
		case n == 0:
		case o.DecodeOnStandby && !slices.Contains(onStandbyFaults, f):
			return fmt.Errorf("fault %s is not for a run decoding on a standby (those are %v)", f, onStandbyFaults)
		case !o.DecodeOnStandby && slices.Contains(standbyFaults, f):
			return fmt.Errorf("fault %s needs a run decoding on a standby (DecodeOnStandby)", f)
		case f == FaultStandbyPromote && n > 1:
			return fmt.Errorf("fault %s: at most one (there is no standby after it)", f)
		case !slices.Contains(AllFaults, f):
			return fmt.Errorf("fault %s is a fleet run's (RunFleet)", f)
		case o.KafkaNodes < 3 && slices.Contains(clusterFaults, f):
			return fmt.Errorf("fault %s needs a three-broker cluster (KafkaNodes 3)", f)
		case o.KafkaNodes > 1 && slices.Contains(singleFaults, f):
			return fmt.Errorf("fault %s is for a single broker (KafkaNodes 1)", f)
		case o.SampleEvery > 0 && f == FaultTakeover:
			return fmt.Errorf("fault %s runs two publishers at once, which cannot share the sampled metrics address", f)
		}
	}
	return nil
}

// kafkaServers is the run's Kafka: one broker that every client reaches
// through a fault-injecting proxy, or a three-broker cluster.
type kafkaServers struct {
	single  *testbed.Kafka
	proxy   *netfault.Proxy
	cluster *testbed.KafkaCluster
}

func startKafka(ctx context.Context, o Options) (*kafkaServers, error) {
	dir, err := os.MkdirTemp("", "outboxd-chaos-kafka-")
	if err != nil {
		return nil, err
	}
	if o.KafkaNodes >= 3 {
		c, err := testbed.StartKafkaCluster(ctx, o.Script, dir, 3)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		return &kafkaServers{cluster: c}, nil
	}
	brokerAddr, err := netfault.FreeAddr()
	if err != nil {
		return nil, err
	}
	proxyAddr, err := netfault.FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := netfault.StartOn(proxyAddr, brokerAddr)
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(brokerAddr)
	n, _ := strconv.Atoi(port)
	k, err := testbed.StartKafkaAdvertised(ctx, o.Script, dir, n, p.Addr)
	if err != nil {
		p.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &kafkaServers{single: k, proxy: p}, nil
}

func (s *kafkaServers) brokers() []string {
	if s.cluster != nil {
		return s.cluster.Addrs()
	}
	return []string{s.single.Addr}
}

func (s *kafkaServers) remove(ctx context.Context) error {
	if s.cluster != nil {
		return s.cluster.Remove(ctx)
	}
	err := s.single.Remove(ctx)
	s.proxy.Close()
	return err
}

// proxyFor starts a proxy in front of the server of a database URL and
// returns it with the URL through it.
func proxyFor(dbURL string) (*netfault.Proxy, string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, "", err
	}
	p, err := netfault.Start(u.Host)
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr
	return p, u.String(), nil
}

// injectNetworkOrCluster injects the network, crash and cluster faults.
func (in *injector) injectNetworkOrCluster(ctx context.Context, f Fault) error {
	switch f {
	case FaultPostgresCrash:
		start := time.Now()
		if err := in.pg.Stop(ctx, "immediate"); err != nil {
			return err
		}
		in.sleep(ctx, 100*time.Millisecond, time.Second)
		if err := in.pg.Start(ctx); err != nil {
			return err
		}
		return in.timeRecovery(ctx, f, start, "")
	case FaultPostgresPartition:
		// Noticed by the silence of the stream (--server-timeout), or by
		// a session set-up that timed out when it came mid-reconnect.
		mark := in.active.count(reconnecting)
		start := time.Now()
		if err := in.pgProxy.BlackHole(); err != nil {
			return err
		}
		in.sleep(ctx, serverTimeout+time.Second, serverTimeout+3*time.Second)
		// Kept until noticed (outboxd may first read what its socket
		// still held): healing closes the connection, which would hide a
		// partition that went unnoticed.
		detected, err := in.active.waitSince(ctx, mark, reconnecting, serverTimeout+30*time.Second)
		in.pgProxy.Heal()
		if err != nil {
			in.problems = append(in.problems, fmt.Sprintf("%s: a partition from PostgreSQL lasting %s was not detected: %v", f, time.Since(start).Round(time.Millisecond), err))
		} else {
			in.detect[f] = append(in.detect[f], ms(detected.Sub(start)))
		}
		return in.timeRecovery(ctx, f, time.Now(), "")
	case FaultPostgresReset:
		mark := in.active.count(reconnecting)
		start := time.Now()
		if err := in.pgProxy.Reset(0); err != nil {
			return err
		}
		detected, err := in.active.waitSince(ctx, mark, reconnecting, 30*time.Second)
		in.pgProxy.Heal()
		if err != nil {
			return err
		}
		in.detect[f] = append(in.detect[f], ms(detected.Sub(start)))
		return in.timeRecovery(ctx, f, time.Now(), "")
	case FaultBrokerStall:
		if err := in.kafka.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		in.sleep(ctx, 5*time.Second, 10*time.Second)
		if err := in.kafka.Signal(syscall.SIGCONT); err != nil {
			return err
		}
		return in.timeRecovery(ctx, f, time.Now(), "")
	case FaultKafkaPartition:
		if err := in.kafkaProxy.BlackHole(); err != nil {
			return err
		}
		in.sleep(ctx, 5*time.Second, 15*time.Second)
		in.kafkaProxy.Heal()
		return in.timeRecovery(ctx, f, time.Now(), "")
	case FaultLeaderKill, FaultControllerKill:
		id, err := in.leader(ctx, f == FaultControllerKill)
		if err != nil {
			return err
		}
		node := in.cluster.Node(id)
		killed := time.Now()
		if err := node.Signal(syscall.SIGKILL); err != nil {
			return err
		}
		// The records go on to the new leader while this one is down.
		if err := in.timeRecovery(ctx, f, killed, fmt.Sprintf("node %d killed", id)); err != nil {
			return err
		}
		in.sleep(ctx, time.Second, 3*time.Second)
		return node.Start(ctx)
	case FaultMajorityLoss:
		return in.majorityLoss(ctx)
	case FaultRollingRestart:
		for _, n := range in.cluster.Nodes {
			if err := n.Stop(ctx); err != nil {
				return err
			}
			if err := n.Start(ctx); err != nil {
				return err
			}
		}
		return in.timeRecovery(ctx, f, time.Now(), "")
	}
	return fmt.Errorf("unknown fault %q", f)
}

// majorityLoss kills two of the three brokers: with min.insync.replicas 2
// nothing can be acknowledged, so the producer must hold every record and
// the slot must not be confirmed any further, until they are back.
func (in *injector) majorityLoss(ctx context.Context) error {
	down := in.cluster.Nodes[:2]
	if in.rng.IntN(2) == 0 {
		down = in.cluster.Nodes[1:]
	}
	// The writers go on through the outage: records are in flight, so no
	// keepalive can be confirmed either.
	in.ledger.keepWriting(2000)
	for _, n := range down {
		if err := n.Signal(syscall.SIGKILL); err != nil {
			return err
		}
	}
	// A row committed after the kills cannot be acknowledged: the slot
	// may not be confirmed up to the WAL position after its commit
	// (before it, a keepalive may still move it).
	committed := in.ledger.events.Load()
	for in.ledger.events.Load() == committed && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	var limit string
	if err := queryRow(ctx, in.pg.URL, `SELECT pg_current_wal_lsn()::text`, nil, &limit); err != nil {
		return err
	}
	in.sleep(ctx, 5*time.Second, 10*time.Second)
	var passed bool
	if err := queryRow(ctx, in.pg.URL, `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, []any{slotName, limit}, &passed); err != nil {
		return err
	}
	if passed {
		after, _ := in.confirmed(ctx)
		in.problems = append(in.problems, fmt.Sprintf("%s: with two of three brokers down the slot was confirmed to %s, at or past %s, after a commit Kafka cannot have acknowledged", FaultMajorityLoss, after, limit))
	}
	back := time.Now()
	for _, n := range down {
		if err := n.Start(ctx); err != nil {
			return err
		}
	}
	return in.timeRecovery(ctx, FaultMajorityLoss, back, "")
}

func (in *injector) confirmed(ctx context.Context) (string, error) {
	var lsn string
	err := queryRow(ctx, in.pg.URL, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, []any{slotName}, &lsn)
	return lsn, err
}

// leader returns the broker that leads a random partition of the topic,
// or, with controller, the active KRaft controller (DescribeQuorum on the
// metadata log).
func (in *injector) leader(ctx context.Context, controller bool) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(in.brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	if controller {
		req := kmsg.NewPtrDescribeQuorumRequest()
		t := kmsg.NewDescribeQuorumRequestTopic()
		t.Topic = "__cluster_metadata"
		t.Partitions = append(t.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
		req.Topics = append(req.Topics, t)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return 0, fmt.Errorf("describing the KRaft quorum: %w", err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].LeaderID <= 0 {
			return 0, errors.New("describing the KRaft quorum: no leader")
		}
		return resp.Topics[0].Partitions[0].LeaderID, nil
	}
	md, err := kadm.NewClient(cl).Metadata(ctx, in.topic)
	if err != nil {
		return 0, err
	}
	parts := md.Topics[in.topic].Partitions.Sorted()
	if len(parts) == 0 {
		return 0, fmt.Errorf("topic %s has no partitions", in.topic)
	}
	return parts[in.rng.IntN(len(parts))].Leader, nil
}

// timeRecovery waits until a record written after from reaches a
// consumer, or, when the writers have written everything, until the slot
// confirmed it all, and records how long that took (what notes the fault
// in the log; "" for nothing).
func (in *injector) timeRecovery(ctx context.Context, f Fault, from time.Time, what string) error {
	in.ledger.keepWriting(2000)
	in.live.watch(in.ledger.maxID.Load())
	done := func(at time.Time) error {
		d := ms(at.Sub(from))
		in.recover[f] = append(in.recover[f], d)
		in.log.Info("recovered", "fault", f, "ms", d, "note", what)
		return nil
	}
	deadline := time.After(3 * time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case seen := <-in.live.seen:
			return done(seen)
		case <-tick.C:
			if in.ledger.events.Load() >= in.events && waitConfirmed(ctx, in.writeURL, in.slotURL, 0) == nil {
				return done(time.Now())
			}
		case <-deadline:
			return fmt.Errorf("%s: no record written after it reached a consumer within 3 minutes; publisher log tail:\n%s", f, in.active.tail())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// count returns how many log lines hold s so far.
func (p *publisher) count(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// since reports whether a line holding s came after the first mark such
// lines, and when (the time the line logged).
func (p *publisher) since(mark int, s string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if !strings.Contains(l, s) {
			continue
		}
		if n++; n > mark {
			return logTime(l), true
		}
	}
	return time.Time{}, false
}

// waitSince waits (up to d) for a line holding s after the first mark.
func (p *publisher) waitSince(ctx context.Context, mark int, s string, d time.Duration) (time.Time, error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if t, ok := p.since(mark, s); ok {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return time.Time{}, fmt.Errorf("%s did not log %q within %s; log tail:\n%s", p.name, s, d, p.tail())
}

// logTime is the time= field of a text log line (now when it has none).
func logTime(line string) time.Time {
	if i := strings.Index(line, "time="); i >= 0 {
		f := strings.Fields(line[i+len("time="):])
		if len(f) > 0 {
			if t, err := time.Parse(time.RFC3339Nano, f[0]); err == nil {
				return t
			}
		}
	}
	return time.Now()
}
