package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// StartKafkaAdvertised starts a broker in dir listening on port and
// telling clients the address advertised (a proxy in front of it, which
// must be listening already: the start waits for a metadata answer there).
func StartKafkaAdvertised(ctx context.Context, script, dir string, port int, advertised string) (*Kafka, error) {
	addr, err := run(ctx, script, "kafka-start", dir, strconv.Itoa(port), advertised)
	if err != nil {
		_, _ = run(context.WithoutCancel(ctx), script, "kafka-stop", dir) // it may have started and not answered
		return nil, err
	}
	return &Kafka{Script: script, Dir: dir, Addr: addr}, nil
}

// KafkaCluster is a KRaft cluster of brokers that are controllers too,
// topics replicated 3 times with min.insync.replicas 2.
type KafkaCluster struct {
	Script string
	Dir    string
	Nodes  []*Kafka // node i+1 is Nodes[i]
}

// StartKafkaCluster starts (formatting on first use) n nodes in dir.
func StartKafkaCluster(ctx context.Context, script, dir string, n int) (*KafkaCluster, error) {
	if _, err := run(ctx, script, "kafka-cluster-start", dir, strconv.Itoa(n)); err != nil {
		// The nodes that did start run detached: stop them.
		for i := 1; i <= n; i++ {
			_, _ = run(context.WithoutCancel(ctx), script, "kafka-stop", filepath.Join(dir, "node"+strconv.Itoa(i)))
		}
		return nil, err
	}
	c := &KafkaCluster{Script: script, Dir: dir}
	for i := 1; i <= n; i++ {
		node := filepath.Join(dir, "node"+strconv.Itoa(i))
		addr, err := os.ReadFile(filepath.Join(node, "kafka.addr"))
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, &Kafka{Script: script, Dir: node, Addr: strings.TrimSpace(string(addr))})
	}
	return c, nil
}

// Addrs is the bootstrap list.
func (c *KafkaCluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Addr)
	}
	return out
}

// Node returns the node of a broker id (1-based).
func (c *KafkaCluster) Node(id int32) *Kafka { return c.Nodes[id-1] }

// Stop stops every node.
func (c *KafkaCluster) Stop(ctx context.Context) error {
	var first error
	for _, n := range c.Nodes {
		if err := n.Stop(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Remove stops every node and deletes the cluster's directory.
func (c *KafkaCluster) Remove(ctx context.Context) error {
	err := c.Stop(ctx)
	if rerr := os.RemoveAll(c.Dir); err == nil {
		err = rerr
	}
	return err
}

// Signal sends sig to the broker's JVM: SIGKILL (kill -9), SIGSTOP (a
// stall: connections stay open, nothing is answered) or SIGCONT.
func (k *Kafka) Signal(sig syscall.Signal) error {
	b, err := os.ReadFile(filepath.Join(k.Dir, "kafka.pid"))
	if err != nil {
		return fmt.Errorf("the broker in %s is not running: %w", k.Dir, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signalling the broker in %s (pid %d): %w", k.Dir, pid, err)
	}
	if sig == syscall.SIGKILL {
		// Gone: a later Start must not take the stale pid for a live one.
		_ = os.Remove(filepath.Join(k.Dir, "kafka.pid"))
	}
	return nil
}
