package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxd/outboxd/cdc"
)

// Pinger checks that Kafka answers.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	Addr string
	// Registry is what /metrics serves: the process's (NewRegistry),
	// with the pipeline's metrics.
	Registry prometheus.Gatherer
	Stats    StatsSource
	Kafka    Pinger
	// Reach, when set, says since when Kafka has been unreachable, for
	// /readyz's answer.
	Reach KafkaReach
	Log   *slog.Logger
	// Pprof also serves net/http/pprof under /debug/pprof/.
	Pprof bool

	mu       sync.Mutex
	checked  time.Time
	kafkaErr error
	ln       net.Listener
}

// kafkaCheckEvery rate-limits the Kafka reachability check of /readyz.
const kafkaCheckEvery = 2 * time.Second

// Listen binds Addr and returns the bound address (useful with port 0).
// Run calls it when it was not called before.
func (s *Server) Listen() (string, error) {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return "", fmt.Errorf("listening for metrics on %s: %w", s.Addr, err)
	}
	s.ln = ln
	return ln.Addr().String(), nil
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if s.ln == nil {
		if _, err := s.Listen(); err != nil {
			return err
		}
	}
	ln := s.ln
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.ready)
	if s.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.Log.Info("serving metrics and health", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stopping the metrics server: %w", err)
	}
	return nil
}

// ready answers 200 while streaming with Kafka reachable, 503 otherwise
// (a standby waiting for the slot is alive but not ready). Streaming with
// Kafka unreachable answers "not ready: streaming, Kafka unreachable since
// TIME (N failed Kafka dials and requests): ERROR": the slot is read, and
// the records wait for Kafka.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	state := s.Stats.Stats().State
	if state != cdc.StateStreaming {
		http.Error(w, "not ready: "+state.String(), http.StatusServiceUnavailable)
		return
	}
	if err := s.kafka(r.Context()); err != nil {
		http.Error(w, "not ready: "+state.String()+", "+kafkaDown(s.Reach)+": "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// kafkaDown says since when Kafka has been unreachable, as far as reach
// knows.
func kafkaDown(reach KafkaReach) string {
	if reach == nil {
		return "Kafka unreachable"
	}
	msg := "Kafka unreachable"
	if since := reach.UnreachableSince(); !since.IsZero() {
		msg += " since " + since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s (%d failed Kafka dials and requests)", msg, reach.ConnectionErrors())
}

func (s *Server) kafka(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) < kafkaCheckEvery {
		return s.kafkaErr
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s.kafkaErr = s.Kafka.Ping(pctx)
	s.checked = time.Now()
	return s.kafkaErr
}
