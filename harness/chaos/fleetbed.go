package chaos

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/harness/testbed"
)

// replicaEnv names the variable each replica's name is in: the pipelines
// file puts it in application_name, so pg_stat_replication tells the
// replicas apart.
const replicaEnv = "OUTBOXD_CHAOS_REPLICA"

// fleetBed is a fleet run's servers, and a database, slot and topic per
// pipeline, described in one pipelines file.
type fleetBed struct {
	adminURL  string
	brokers   []string
	pg        *testbed.Postgres // nil: the caller's
	kafka     *kafkaServers     // nil: the caller's
	prefix    string            // of every database, slot, topic and transactional id of the run
	pipelines []*fleetPipeline
	file      string // the pipelines file
	dir       string // holding it
}

// fleetPipeline is one pipeline of a fleet run and what was done to it.
type fleetPipeline struct {
	name, db, topic, slot string
	url                   string // its database, for the writers and the faults
	exactlyOnce           bool
	txnID                 string
	maxRecordBytes        int // 0: the default
	ledger                *ledger
	// hold is read-locked by the writers around each transaction, and
	// locked around the poison row: every commit is before it or after.
	hold sync.RWMutex
	// Written by the fault injector alone, read once the writers stopped.
	marks    []Mark
	poisonID int64 // the poison row's id; 0: not poisoned
	boundary int   // committed rows before the poison row
}

// setUpBed starts the servers not given, and makes each pipeline's
// database (migrated: outbox table, publication, slot) and topic.
func setUpBed(ctx context.Context, o FleetOptions, rng *rand.Rand) (b *fleetBed, err error) {
	b = &fleetBed{adminURL: o.AdminURL, brokers: o.Brokers}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.remove(context.WithoutCancel(ctx)))
		}
	}()
	if b.adminURL == "" {
		if b.pg, err = testbed.StartPostgres(ctx, o.Script); err != nil {
			return b, err
		}
		b.adminURL = b.pg.URL
		if b.kafka, err = startKafka(ctx, Options{Script: o.Script, KafkaNodes: o.KafkaNodes}); err != nil {
			return b, err
		}
		b.brokers = b.kafka.brokers()
	}
	var suffix [4]byte
	if _, err := crand.Read(suffix[:]); err != nil {
		return b, err
	}
	b.prefix = "chaosfleet_" + hex.EncodeToString(suffix[:])
	if b.dir, err = os.MkdirTemp("", "outboxd-chaos-fleet-"); err != nil {
		return b, err
	}
	// The poisoned pipeline is an at-least-once one (a dead-letter topic
	// is refused with exactly-once, and a poison row is what it is for).
	poisoned := -1
	if o.Faults[FaultPoisonRow] > 0 {
		poisoned = 2 * rng.IntN(o.Pipelines/2+o.Pipelines%2)
	}
	for i := range o.Pipelines {
		name := fmt.Sprintf("p%02d", i)
		p := &fleetPipeline{name: name, db: b.prefix + "_" + name, topic: b.prefix + "." + name, exactlyOnce: i%2 == 1, ledger: &ledger{}}
		p.slot, p.txnID = p.db, p.db
		if i == poisoned {
			p.maxRecordBytes = poisonMaxRecordBytes
		}
		p.ledger.gate.Store(1 << 60)
		if p.url, err = databaseURL(b.adminURL, p.db); err != nil {
			return b, err
		}
		b.pipelines = append(b.pipelines, p)
		if err := execSQL(ctx, b.adminURL, "CREATE DATABASE "+pgx.Identifier{p.db}.Sanitize()); err != nil {
			return b, fmt.Errorf("creating database %s: %w", p.db, err)
		}
		// Append times tell which fault each duplicate followed.
		if err := createTopic(ctx, b.brokers, p.topic, 3, int16(min(len(b.brokers), 3)), map[string]*string{"message.timestamp.type": ptr("LogAppendTime")}); err != nil {
			return b, err
		}
	}
	if err := b.writeFile(o); err != nil {
		return b, err
	}
	migrate := exec.CommandContext(ctx, o.Outboxd, "migrate", "--config", b.file)
	migrate.Env = append(os.Environ(), replicaEnv+"=migrate")
	if out, err := migrate.CombinedOutput(); err != nil {
		return b, fmt.Errorf("outboxd migrate --config %s: %w\n%s", b.file, err, out)
	}
	for _, p := range b.pipelines {
		if err := execSQL(ctx, p.url, `CREATE TABLE chaos_other (id bigserial PRIMARY KEY, note text)`); err != nil {
			return b, fmt.Errorf("creating chaos_other in %s: %w", p.db, err)
		}
	}
	return b, nil
}

// databaseURL is admin's URL with database db.
func databaseURL(admin, db string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", fmt.Errorf("parsing the PostgreSQL URL: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

// writeFile writes the pipelines file every replica runs.
func (b *fleetBed) writeFile(o FleetOptions) error {
	var s strings.Builder
	fmt.Fprintf(&s, "# outboxd-chaos fleet run %s\n", b.prefix)
	fmt.Fprintf(&s, "brokers: [%s]\n", strings.Join(b.brokers, ", "))
	for _, kv := range [][2]string{
		{"status-interval", "500ms"},
		// Above wal_sender_timeout/2 plus the status interval (outboxd
		// warns otherwise); every fault here closes connections.
		{"server-timeout", "35s"},
		{"slot-retry-interval", o.SlotRetryInterval.String()},
		{"reconnect-max-interval", "2s"},
		{"max-in-flight-records", fmt.Sprint(o.MaxInFlight)},
		{"wal-check-interval", "1s"},
		{"log-level", "info"},
	} {
		fmt.Fprintf(&s, "%s: %s\n", kv[0], kv[1])
	}
	s.WriteString("pipelines:\n")
	for _, p := range b.pipelines {
		sep := "?"
		if strings.Contains(p.url, "?") {
			sep = "&"
		}
		fmt.Fprintf(&s, "  - name: %s\n    database-url: '%s%sapplication_name=${%s}'\n    slot: %s\n", p.name, p.url, sep, replicaEnv, p.slot)
		if p.exactlyOnce {
			// Committing more often than the slot is confirmed (every
			// 100 ms), a kill finds transactions in Kafka the slot does
			// not have yet: the next holder must skip them.
			fmt.Fprintf(&s, "    delivery: exactly-once\n    transactional-id: %s\n    transaction-interval: 50ms\n", p.txnID)
		}
		if p.maxRecordBytes > 0 {
			fmt.Fprintf(&s, "    max-record-bytes: %d\n", p.maxRecordBytes)
		}
	}
	b.file = filepath.Join(b.dir, "pipelines.yaml")
	return os.WriteFile(b.file, []byte(s.String()), 0o600)
}

// remove drops what setUpBed made: the private servers, or on the
// caller's, the databases (their slots first) and topics.
func (b *fleetBed) remove(ctx context.Context) error {
	var errs []error
	if b.dir != "" {
		errs = append(errs, os.RemoveAll(b.dir))
	}
	if b.pg != nil {
		errs = append(errs, b.pg.Remove(ctx))
	}
	if b.kafka != nil {
		errs = append(errs, b.kafka.remove(ctx))
	}
	if b.pg != nil || b.kafka != nil || len(b.pipelines) == 0 {
		return errors.Join(errs...)
	}
	for _, p := range b.pipelines {
		errs = append(errs, dropDatabase(ctx, b.adminURL, p.db))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer cl.Close()
	topics := make([]string, 0, len(b.pipelines))
	for _, p := range b.pipelines {
		topics = append(topics, p.topic)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(dctx, topics...); err != nil {
		errs = append(errs, fmt.Errorf("deleting the run's topics: %w", err))
	}
	return errors.Join(errs...)
}

// dropDatabase drops db and its slots (their walsenders terminated first:
// a slot keeps its database, and an active one cannot be dropped).
func dropDatabase(ctx context.Context, admin, db string) error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		err = execSQL(ctx, admin, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, db)
		if err == nil {
			err = execSQL(ctx, admin, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, db)
		}
		if err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond) // the terminated walsender is still releasing its slot
	}
	if err != nil {
		return fmt.Errorf("dropping the slots of %s: %w", db, err)
	}
	if err := execSQL(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("dropping database %s: %w", db, err)
	}
	return nil
}
