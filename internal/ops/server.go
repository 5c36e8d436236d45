package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server serves /metrics, /healthz, /readyz and /pipelines.
type Server struct {
	Addr string
	// Registry is what /metrics serves: the process's (NewRegistry),
	// with every pipeline's metrics.
	Registry prometheus.Gatherer
	// Pipelines lists the pipelines /readyz and /pipelines report, as they
	// are at the call: pipelines come and go. Their names are distinct.
	Pipelines func() []Named
	Log       *slog.Logger
	// Stopping, when set, is closed once the process stops: /readyz
	// answers 503 from then on, while Run still serves the pipelines'
	// drain (run Run on a context that outlives them).
	Stopping <-chan struct{}
	// Pprof also serves net/http/pprof under /debug/pprof/.
	Pprof bool

	ln net.Listener
}

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
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 5 * time.Second}
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

// routes is what Run serves.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.ready)
	mux.HandleFunc("GET /pipelines", s.status)
	if s.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// pipelines is the list Pipelines returns, sorted by name.
func (s *Server) pipelines() []Named {
	var list []Named
	if s.Pipelines != nil {
		list = slices.Clone(s.Pipelines())
	}
	slices.SortFunc(list, func(a, b Named) int { return strings.Compare(a.Name, b.Name) })
	return list
}
