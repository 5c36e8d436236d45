// Package testbed drives the project's own servers through testbed.sh: a
// private Kafka broker or PostgreSQL cluster that a test or the chaos tool
// may stop and start again. (testenv wraps it for tests.)
package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// ScriptEnv names the variable holding the path of testbed.sh.
const ScriptEnv = "OUTBOXD_TESTBED"

// Kafka is a single-node KRaft broker whose state lives in Dir.
type Kafka struct {
	Script string
	Dir    string
	// Addr is the broker's address, the same across Stop and Start.
	Addr string
}

// StartKafka starts (formatting on first use) a broker in dir.
func StartKafka(ctx context.Context, script, dir string) (*Kafka, error) {
	k := &Kafka{Script: script, Dir: dir}
	addr, err := run(ctx, script, "kafka-start", dir)
	if err != nil {
		return nil, err
	}
	k.Addr = addr
	return k, nil
}

// StartKafkaTemp starts a broker whose state lives in a new temporary
// directory (for tools that start servers of their own: the chaos run,
// the benchmarks); Remove stops it and deletes the directory.
func StartKafkaTemp(ctx context.Context, script string) (*Kafka, error) {
	dir, err := os.MkdirTemp("", "outboxd-kafka-")
	if err != nil {
		return nil, err
	}
	k, err := StartKafka(ctx, script, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return k, nil
}

// Remove stops the broker and deletes its directory.
func (k *Kafka) Remove(ctx context.Context) error {
	return errors.Join(k.Stop(ctx), os.RemoveAll(k.Dir))
}

// Start starts the stopped broker again.
func (k *Kafka) Start(ctx context.Context) error {
	_, err := run(ctx, k.Script, "kafka-start", k.Dir)
	return err
}

// Stop stops the broker (SIGTERM, SIGKILL after 20 s).
func (k *Kafka) Stop(ctx context.Context) error {
	_, err := run(ctx, k.Script, "kafka-stop", k.Dir)
	return err
}

// Postgres is a PostgreSQL cluster (wal_level=logical) whose state lives in Dir.
type Postgres struct {
	Script string
	Dir    string
	// URL is a superuser URL of its postgres database.
	URL string
}

// StartPostgres creates a directory the postgres OS user can reach (the
// server runs as that user under root) and starts a cluster in it.
func StartPostgres(ctx context.Context, script string) (*Postgres, error) {
	return StartPostgresOnPort(ctx, script, 0)
}

// StartPostgresOnPort is StartPostgres on a given port (0: a free one), so
// that a new cluster can take over an old one's address.
func StartPostgresOnPort(ctx context.Context, script string, port int) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "outboxd-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	p := &Postgres{Script: script, Dir: dir}
	args := []string{"pg-start", dir}
	if port > 0 {
		args = append(args, strconv.Itoa(port))
	}
	if p.URL, err = run(ctx, script, args...); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// StartStandby makes a streaming physical standby of p (a base backup
// without replication slots, as pg_basebackup takes it) in a directory of
// its own and starts it.
func (p *Postgres) StartStandby(ctx context.Context) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "outboxd-pg-standby-")
	if err != nil {
		return nil, err
	}
	s := &Postgres{Script: p.Script, Dir: dir}
	if s.URL, err = run(ctx, p.Script, "pg-standby", p.Dir, dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Promote promotes a standby to a primary (a new timeline).
func (p *Postgres) Promote(ctx context.Context) error {
	_, err := run(ctx, p.Script, "pg-promote", p.Dir)
	return err
}

// MoveTo restarts the cluster on port (a promoted standby taking over the
// address of the primary it replaced); URL follows.
func (p *Postgres) MoveTo(ctx context.Context, port string) error {
	url, err := run(ctx, p.Script, "pg-move", p.Dir, port)
	if err != nil {
		return err
	}
	p.URL = url
	return nil
}

// Start starts the stopped cluster again on the same port.
func (p *Postgres) Start(ctx context.Context) error {
	_, err := run(ctx, p.Script, "pg-start", p.Dir)
	return err
}

// Stop shuts the cluster down with a pg_ctl mode: smart, fast or immediate.
func (p *Postgres) Stop(ctx context.Context, mode string) error {
	_, err := run(ctx, p.Script, "pg-stop", p.Dir, mode)
	return err
}

// Remove stops the cluster at once and deletes its directory.
func (p *Postgres) Remove(ctx context.Context) error {
	return errors.Join(p.Stop(ctx, "immediate"), os.RemoveAll(p.Dir))
}

func run(ctx context.Context, script string, args ...string) (string, error) {
	if script == "" {
		return "", fmt.Errorf("no test bed script: set %s to harness/testbed/testbed.sh", ScriptEnv)
	}
	out, err := exec.CommandContext(ctx, script, args...).Output()
	if err != nil {
		stderr := ""
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("%s %s: %w: %s", script, strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}

// Registry is an Apicurio Registry (in-memory storage) whose state lives
// in Dir; URL is the base URL of its Confluent-compatible API.
type Registry struct {
	Script, Dir, URL string
}

// StartRegistry starts a schema registry in dir.
func StartRegistry(ctx context.Context, script, dir string) (*Registry, error) {
	url, err := run(ctx, script, "registry-start", dir)
	if err != nil {
		return nil, err
	}
	return &Registry{Script: script, Dir: dir, URL: url}, nil
}

// Stop stops the registry; its schemas are gone with it.
func (r *Registry) Stop(ctx context.Context) error {
	_, err := run(ctx, r.Script, "registry-stop", r.Dir)
	return err
}

// SchemaCheck returns the python of the virtual environment holding the
// independent decoders harness/schemacheck/decode.py uses.
func SchemaCheck(ctx context.Context, script string) (string, error) {
	return run(ctx, script, "schemacheck")
}
