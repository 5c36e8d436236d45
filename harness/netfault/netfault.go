// Package netfault puts a fault-injecting TCP proxy (toxiproxy, in the
// test's own process) between outboxd and a server, for the network fault
// tests and the chaos run: latency and jitter, a bandwidth limit, a black
// hole (bytes dropped, no reset: the half-open case), a reset, a slow
// close.
//
// Invariant: a Proxy with no fault forwards every byte unchanged; Heal
// removes every fault (toxiproxy then closes the connections a black hole
// held, as a network that comes back would not: tests measure detection
// while the fault is still in place).
package netfault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy forwards connections to Addr on to an upstream address.
type Proxy struct {
	Addr string // host:port to connect to instead of the upstream

	mu     sync.Mutex
	proxy  *toxiproxy.Proxy
	faults []string
}

// Start starts a proxy on a free loopback port in front of upstream.
func Start(upstream string) (*Proxy, error) {
	return StartOn("127.0.0.1:0", upstream)
}

// StartOn starts a proxy listening on listen (host:port) in front of
// upstream: a Kafka broker must advertise the proxy's address, known
// before the broker starts.
func StartOn(listen, upstream string) (*Proxy, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "p", listen, upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("starting a proxy in front of %s: %w", upstream, err)
	}
	return &Proxy{Addr: p.Listen, proxy: p}, nil
}

// FreeAddr returns a loopback address with a free port, for StartOn.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() { p.proxy.Stop() }

// Both directions of a connection.
const (
	Upstream   = "upstream"   // from the client to the server
	Downstream = "downstream" // from the server to the client
)

// add adds a toxic of type typ to one direction.
func (p *Proxy) add(typ, direction string, attrs map[string]any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := fmt.Sprintf("%s_%s_%d", typ, direction, len(p.faults))
	body, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": direction, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		return err
	}
	if _, err := p.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("adding %s %s: %w", typ, direction, err)
	}
	p.faults = append(p.faults, name)
	return nil
}

// Latency delays every chunk by ms, give or take jitter ms, both ways.
func (p *Proxy) Latency(ms, jitter int) error {
	for _, d := range []string{Upstream, Downstream} {
		if err := p.add("latency", d, map[string]any{"latency": ms, "jitter": jitter}); err != nil {
			return err
		}
	}
	return nil
}

// Bandwidth limits both directions to kbps kilobytes a second.
func (p *Proxy) Bandwidth(kbps int) error {
	for _, d := range []string{Upstream, Downstream} {
		if err := p.add("bandwidth", d, map[string]any{"rate": kbps}); err != nil {
			return err
		}
	}
	return nil
}

// BlackHole drops every byte both ways and keeps the connections open: no
// reset, no close, as a network partition or a host gone away looks to a
// TCP peer. New connections are accepted and black-holed too.
func (p *Proxy) BlackHole() error {
	for _, d := range []string{Upstream, Downstream} {
		if err := p.add("timeout", d, map[string]any{"timeout": 0}); err != nil {
			return err
		}
	}
	return nil
}

// Reset resets (RST) each connection as soon as the server sends data
// (mid-transaction on a stream) after ms milliseconds.
func (p *Proxy) Reset(ms int) error {
	return p.add("reset_peer", Downstream, map[string]any{"timeout": ms})
}

// CloseBeforeAnswer closes each connection when the server first sends
// on it: a client's first request gets no answer, only the close, as a
// server that is starting up (or a proxy in front of a server that is
// down) may do.
func (p *Proxy) CloseBeforeAnswer() error {
	return p.add("limit_data", Downstream, map[string]any{"bytes": 0})
}

// SlowClose delays the close of each connection by ms, both ways.
func (p *Proxy) SlowClose(ms int) error {
	for _, d := range []string{Upstream, Downstream} {
		if err := p.add("slow_close", d, map[string]any{"delay": ms}); err != nil {
			return err
		}
	}
	return nil
}

// Heal removes every fault.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Toxics.ResetToxics(context.Background())
	p.faults = nil
}
