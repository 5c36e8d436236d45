package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/outboxd/outboxd/fleet"
	"github.com/outboxd/outboxd/harness/netfault"
)

// replicaSet is the replicas of a fleet run: `outboxd run --config FILE
// --replica i --replicas n`, each with its metrics address kept across
// restarts.
type replicaSet struct {
	binary, file string
	rankDelay    time.Duration
	logOut       io.Writer
	addrs        []string
	procs        []*publisher // nil while the replica is down
	starts       int
	http         *http.Client
	// overlaps are the polls that found a pipeline streaming on two
	// replicas at once: the slot is a lease, held by one walsender.
	overlaps []string
}

func newReplicaSet(binary, file string, n int, rankDelay time.Duration, logOut io.Writer) (*replicaSet, error) {
	s := &replicaSet{binary: binary, file: file, rankDelay: rankDelay, logOut: logOut, procs: make([]*publisher, n), http: &http.Client{Timeout: 2 * time.Second}}
	for range n {
		addr, err := netfault.FreeAddr()
		if err != nil {
			return nil, err
		}
		s.addrs = append(s.addrs, addr)
	}
	return s, nil
}

// start starts replica i.
func (s *replicaSet) start(i int) error {
	s.starts++
	p := &publisher{done: make(chan struct{}), logOut: s.logOut, name: fmt.Sprintf("replica-%d#%d", i, s.starts)}
	p.cmd = exec.Command(s.binary, "run", "--config", s.file, "--replica", strconv.Itoa(i), "--replicas", strconv.Itoa(len(s.procs)),
		"--rank-delay", s.rankDelay.String(), "--metrics-addr", s.addrs[i])
	p.cmd.Env = append(os.Environ(), replicaEnv+"="+fmt.Sprintf("replica-%d", i))
	if err := p.launch(); err != nil {
		return err
	}
	s.procs[i] = p
	return nil
}

// kill kills replica i with SIGKILL.
func (s *replicaSet) kill(i int) {
	s.procs[i].kill()
	s.procs[i] = nil
}

// terminate stops replica i with SIGTERM and returns its exit code.
func (s *replicaSet) terminate(i int, timeout time.Duration) (int, error) {
	code, err := s.procs[i].terminate(timeout)
	s.procs[i] = nil
	return code, err
}

// exitedOnTheirOwn describes each replica that should run and exited.
func (s *replicaSet) exitedOnTheirOwn() []string {
	var out []string
	for _, p := range s.procs {
		if p == nil {
			continue
		}
		if done, code := p.exited(); done {
			out = append(out, fmt.Sprintf("%s exited on its own with code %d; log tail:\n%s", p.name, code, p.tail()))
		}
	}
	return out
}

// stopAll kills every replica still running (a run that failed).
func (s *replicaSet) stopAll() {
	for i, p := range s.procs {
		if p != nil {
			s.kill(i)
		}
	}
}

// placement is what the replicas' GET /pipelines said at one moment.
type placement struct {
	at       time.Time
	replicas int
	up       []bool                       // the replica answered
	states   map[string][]string          // pipeline -> its state on each replica ("" where the replica did not answer)
	details  map[string]map[string]string // pipeline -> state -> a detail given with it
}

// poll asks every running replica for its pipelines' states at once.
func (s *replicaSet) poll(ctx context.Context) placement {
	pl := placement{replicas: len(s.procs), up: make([]bool, len(s.procs)), states: map[string][]string{}, details: map[string]map[string]string{}}
	type answer struct {
		Pipelines []struct {
			Name   string `json:"name"`
			State  string `json:"state"`
			Detail string `json:"detail"`
		} `json:"pipelines"`
	}
	answers := make([]*answer, len(s.procs))
	var wg sync.WaitGroup
	for i, p := range s.procs {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addrs[i]+"/pipelines", nil)
			if err != nil {
				return
			}
			resp, err := s.http.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			var a answer
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&a) == nil {
				answers[i] = &a
			}
		}()
	}
	wg.Wait()
	pl.at = time.Now()
	for i, a := range answers {
		if a == nil {
			continue
		}
		pl.up[i] = true
		for _, st := range a.Pipelines {
			if pl.states[st.Name] == nil {
				pl.states[st.Name] = make([]string, len(s.procs))
				pl.details[st.Name] = map[string]string{}
			}
			pl.states[st.Name][i] = st.State
			if st.Detail != "" {
				pl.details[st.Name][st.State] = st.Detail
			}
		}
	}
	for name := range pl.states {
		if on := pl.streaming(name); len(on) > 1 {
			s.overlaps = append(s.overlaps, fmt.Sprintf("%s streamed on replicas %v at once (%s)", name, on, pl.at.UTC().Format(time.RFC3339Nano)))
		}
	}
	return pl
}

// streaming lists the replicas on which the pipeline streams.
func (pl placement) streaming(name string) []int {
	var out []int
	for i, st := range pl.states[name] {
		if st == "streaming" {
			out = append(out, i)
		}
	}
	return out
}

// in reports whether some replica says the pipeline is in state.
func (pl placement) in(name, state string) bool { return slices.Contains(pl.states[name], state) }

// preferred is the replica ranked first for the pipeline among n.
func preferred(name string, n int) int {
	for r := range n {
		if fleet.Rank(name, r, n) == 0 {
			return r
		}
	}
	return 0
}

// settled reports whether each of names streams on exactly one replica,
// and, with onPreferred, on the replica ranked first for it.
func (pl placement) settled(names []string, onPreferred bool) bool {
	for _, name := range names {
		on := pl.streaming(name)
		if len(on) != 1 || (onPreferred && on[0] != preferred(name, pl.replicas)) {
			return false
		}
	}
	return true
}

// standingBy reports whether every answering replica that does not stream
// each of names stands by for it: none is still waiting its rank's delay
// before a first try (which, finding the slot free, would take it at once,
// ahead of replicas ranked before it).
func (pl placement) standingBy(names []string) bool {
	for _, name := range names {
		for i, st := range pl.states[name] {
			if pl.up[i] && st != "streaming" && st != "standby" {
				return false
			}
		}
	}
	return true
}

// spread counts the pipelines streaming on each replica (-1: down).
func (pl placement) spread(after string, since time.Time) FleetSpread {
	sp := FleetSpread{After: after, Seconds: pl.at.Sub(since).Seconds(), Streaming: make([]int, pl.replicas)}
	for i, up := range pl.up {
		if !up {
			sp.Streaming[i] = -1
		}
	}
	for name := range pl.states {
		on := pl.streaming(name)
		for _, i := range on {
			sp.Streaming[i]++
		}
		if len(on) == 1 && on[0] == preferred(name, pl.replicas) {
			sp.OnPreferred++
		}
	}
	return sp
}

// waitFor polls every 100 ms (up to d) until cond holds of a placement,
// and returns that one.
func (s *replicaSet) waitFor(ctx context.Context, d time.Duration, what string, cond func(placement) bool) (placement, error) {
	deadline := time.Now().Add(d)
	for {
		pl := s.poll(ctx)
		if cond(pl) {
			return pl, nil
		}
		if exited := s.exitedOnTheirOwn(); len(exited) > 0 {
			return pl, fmt.Errorf("waiting for %s: %s", what, exited[0])
		}
		if time.Now().After(deadline) {
			return pl, fmt.Errorf("waiting for %s: not within %s; last states: %v", what, d, pl.states)
		}
		select {
		case <-ctx.Done():
			return pl, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
