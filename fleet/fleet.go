package fleet

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Hooks are told when a Member joins or leaves the fleet (metrics register
// and unregister its series). Either may be nil. They are called from the
// fleet's goroutines, one at a time.
type Hooks struct {
	Added   func(*Member) // before the Member first starts its pipeline
	Removed func(*Member) // after its pipeline stopped for good
}

// Fleet runs a Member per pipeline.
type Fleet struct {
	cfg   Config
	hooks Hooks
	log   *slog.Logger

	reloads chan []Spec // the newest set not yet applied, at most one

	mu      sync.Mutex
	members map[string]*Member
	// leaving are the members removed by a reload and not yet gone: a
	// pipeline added back under the same name starts once its old member
	// left, as a changed one does.
	leaving map[string]*Member

	hookMu sync.Mutex // the hooks are called one at a time

	// urls are the database URLs of every pipeline the fleet ran since it
	// started (under mu): where slots of removed pipelines may remain.
	urls    map[string]bool
	unrunMu sync.Mutex
	unrun   Unrun
}

func (f *Fleet) hook(h func(*Member), m *Member) {
	if h == nil {
		return
	}
	f.hookMu.Lock()
	defer f.hookMu.Unlock()
	h(m)
}

// New builds a Fleet of the specs, refusing a Config that does not
// validate and specs without a name or with one twice. It does no I/O:
// each pipeline's own Config is checked when its Member starts it (a
// pipeline that does not build fails alone, like one that fails later).
func New(cfg Config, specs []Spec, hooks Hooks, log *slog.Logger) (*Fleet, error) {
	if err := errors.Join(cfg.Validate(), checkSpecs(specs)); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg.WithDefaults(), hooks: hooks, log: log, reloads: make(chan []Spec, 1), members: map[string]*Member{},
		leaving: map[string]*Member{}, urls: map[string]bool{}}
	for _, s := range specs {
		f.members[s.Name] = newMember(s, f.cfg, log)
		f.urls[s.Config.Stream.DatabaseURL] = true
	}
	return f, nil
}

// Members are the fleet's members, by name.
func (f *Fleet) Members() []*Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Member, 0, len(f.members))
	for _, m := range f.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *Member) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// Reload replaces the fleet's pipelines with specs (see the package
// invariants); a Run applies it. specs are refused, and nothing changes,
// when one has no name or a name twice. A Reload before an earlier one
// was applied replaces it.
func (f *Fleet) Reload(specs []Spec) error {
	if err := checkSpecs(specs); err != nil {
		return err
	}
	select {
	case <-f.reloads: // superseded
	default:
	}
	f.reloads <- specs
	return nil
}

// Run runs every pipeline until ctx ends, applying reloads, and returns
// once every pipeline drained and stopped. A pipeline failing never ends
// Run (see Member), which returns nil, except in a Single fleet: there
// the failure is Run's error.
func (f *Fleet) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	// start runs m once after (a changed pipeline's previous member, or
	// nil) stopped and left: the two never run at once, and the hooks see
	// the old one leave before the new one joins.
	start := func(m, after *Member) {
		g.Go(func() error {
			if after != nil {
				select {
				case <-after.gone:
				case <-gctx.Done():
					return nil
				}
			}
			f.hook(f.hooks.Added, m)
			err := m.run(gctx)
			f.hook(f.hooks.Removed, m)
			close(m.gone)
			f.mu.Lock()
			if f.leaving[m.Name()] == m {
				delete(f.leaving, m.Name())
			}
			f.mu.Unlock()
			return err
		})
	}
	if !f.cfg.Single {
		f.log.Info("starting pipelines", "pipelines", len(f.members), "replica", f.cfg.Replica, "replicas", f.cfg.Replicas)
	}
	if f.cfg.Replica >= f.cfg.Replicas {
		replicas := f.cfg.Names.Of("Replicas")
		f.log.Warn("this replica's number is beyond the replicas (scaled past "+replicas+", by kubectl scale or an autoscaler?): it stands by for every pipeline, "+
			"ranked after every other replica; change "+replicas+" (the chart's replicas) to spread the pipelines over it", "replica", f.cfg.Replica, "replicas", f.cfg.Replicas)
	}
	for _, m := range f.Members() {
		start(m, nil)
	}
	reloaded := make(chan struct{}, 1)
	g.Go(func() error {
		for {
			select {
			case <-gctx.Done():
				return nil
			case specs := <-f.reloads:
				f.apply(specs, start)
				select {
				case reloaded <- struct{}{}:
				default:
				}
			}
		}
	})
	if !f.cfg.Single {
		g.Go(func() error { f.checkUnrun(gctx, reloaded); return nil })
	}
	return g.Wait()
}

// apply replaces the members with specs: new names start, names gone
// stop, a changed Fingerprint stops the old member and starts the new
// one once the old one drained (both run under start's group).
func (f *Fleet) apply(specs []Spec, start func(m, after *Member)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := map[string]bool{}
	var added, changed, removed, unchanged []string
	var gone []*Member
	for _, s := range specs {
		keep[s.Name] = true
		f.urls[s.Config.Stream.DatabaseURL] = true
		old, ok := f.members[s.Name]
		switch {
		case !ok:
			m := newMember(s, f.cfg, f.log)
			f.members[s.Name] = m
			start(m, f.leaving[s.Name]) // nil, or a removed one still draining
			delete(f.leaving, s.Name)
			added = append(added, s.Name)
		case old.spec.Fingerprint == s.Fingerprint:
			unchanged = append(unchanged, s.Name)
		default:
			m := newMember(s, f.cfg, f.log)
			f.members[s.Name] = m
			old.stop()
			start(m, old)
			changed = append(changed, s.Name)
			gone = append(gone, old)
		}
	}
	for name, m := range f.members {
		if !keep[name] {
			m.stop()
			delete(f.members, name)
			f.leaving[name] = m
			removed = append(removed, name)
			gone = append(gone, m)
		}
	}
	f.log.Info("pipelines reloaded", "added", added, "changed", changed, "removed", removed, "unchanged", len(unchanged))
	f.logRemoved(gone, specs)
}
