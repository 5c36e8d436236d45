package fleet

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/lib/field"
	"github.com/outboxd/outboxd/pipeline"
)

// Config is one replica's part in a deployment, and how its pipelines are
// restarted.
type Config struct {
	// Replica is this replica's number, 0 to Replicas-1; Replicas is how
	// many run the same pipelines (default 1: this one alone). A replica
	// numbered Replicas or above (a StatefulSet scaled past its replicas
	// with kubectl scale or an autoscaler) runs too, as a standby of last
	// resort: ranked after every other for every pipeline.
	Replica, Replicas int
	// RankDelay is how long a replica waits per rank before it first tries
	// a pipeline, and before it takes a slot another replica released
	// (Rank). Keep it above the pipelines' slot retry interval: a standby
	// notices a released slot only at its next retry, and two ranks less
	// than a retry interval apart can overtake each other. Default
	// DefaultRankDelay.
	RankDelay time.Duration
	// RetryInitial and RetryMax bound the exponential backoff before a
	// failed pipeline starts again. Defaults DefaultRetryInitial and
	// DefaultRetryMax.
	RetryInitial, RetryMax time.Duration
	// UnrunCheckInterval is how often the fleet looks for slots of its
	// databases that outboxd's catalog records and no pipeline runs (see
	// Fleet.Unrun). Default DefaultUnrunCheckInterval.
	UnrunCheckInterval time.Duration
	// Single makes the fleet one pipeline run on its own (`run` without a
	// pipelines file): a failure ends Run with the pipeline's error instead
	// of a restart after a backoff (whatever supervises the process,
	// systemd or Kubernetes, restarts it, and a refused configuration is
	// said once), and the fleet does not look for slots no pipeline of it
	// runs, since such a process usually runs one slot of several.
	Single bool
	// Names renders the settings the fleet's messages name (by this
	// Config's field names) as its user set them.
	Names field.Names
}

// Defaults.
const (
	DefaultRankDelay    = 3 * time.Second
	DefaultRetryInitial = 5 * time.Second
	DefaultRetryMax     = 5 * time.Minute

	DefaultUnrunCheckInterval = time.Minute
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.RankDelay == 0 {
		c.RankDelay = DefaultRankDelay
	}
	if c.RetryInitial == 0 {
		c.RetryInitial = DefaultRetryInitial
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.UnrunCheckInterval == 0 {
		c.UnrunCheckInterval = DefaultUnrunCheckInterval
	}
	return c
}

// Validate reports every problem of c at once; zero fields mean their
// defaults.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, problem string) { errs = append(errs, &field.Error{Field: name, Problem: problem}) }
	d := c.WithDefaults()
	if d.Replicas < 1 {
		bad("Replicas", "must be at least 1")
	}
	if d.Replica < 0 {
		bad("Replica", fmt.Sprintf("%d: must not be negative", c.Replica))
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"RankDelay", c.RankDelay}, {"RetryInitial", c.RetryInitial}, {"RetryMax", c.RetryMax}, {"UnrunCheckInterval", c.UnrunCheckInterval}} {
		if f.v < 0 {
			bad(f.name, "must not be negative")
		}
	}
	if d.RetryMax < d.RetryInitial {
		bad("RetryMax", "must not be below RetryInitial ("+d.RetryInitial.String()+")")
	}
	return errors.Join(errs...)
}

// Spec is one pipeline of a fleet.
type Spec struct {
	// Name names the pipeline in logs, metrics and status, and ranks the
	// replicas for it; unique in a fleet.
	Name   string
	Config pipeline.Config
	// Fingerprint stands for the settings the Config came from: a Reload
	// restarts a pipeline whose Fingerprint changed and leaves the others
	// running. (A Config holds functions, which do not compare.)
	Fingerprint string
	// Settings is the fingerprint of the pipeline's settings, secrets
	// left out: it goes in the name of the pipeline's connections
	// (slot.AppName), so that a replica standing by can tell the one
	// holding the slot runs other settings. "": none.
	Settings string
}

// checkSpecs refuses specs without a name or with a name twice.
func checkSpecs(specs []Spec) error {
	var errs []error
	seen := map[string]bool{}
	for i, s := range specs {
		switch {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("pipeline %d has no name", i+1))
		case seen[s.Name]:
			errs = append(errs, fmt.Errorf("pipeline %q is named twice", s.Name))
		}
		seen[s.Name] = true
	}
	return errors.Join(errs...)
}
