package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// stopReplica kills (kill -9) or stops (SIGTERM) a replica that streams
// pipelines, times their takeover by the others, starts it again after
// o.Down, and waits until it took back the pipelines it is ranked first
// for (hand-overs).
func (in *fleetInjector) stopReplica(ctx context.Context, f Fault) error {
	pl := in.reps.poll(ctx)
	held := map[int][]string{}
	for _, name := range in.active() {
		if on := pl.streaming(name); len(on) == 1 {
			held[on[0]] = append(held[on[0]], name)
		}
	}
	// A replica holding more pipelines is hit more often: more takeovers
	// to time, and a replica with none is no fault.
	var candidates []int
	for r := range held {
		for range held[r] {
			candidates = append(candidates, r)
		}
	}
	if len(candidates) == 0 {
		return errors.New("no replica streams a pipeline")
	}
	slices.Sort(candidates)
	r := candidates[in.rng.IntN(len(candidates))]
	names := held[r]
	at := time.Now()
	in.mark(f, at, names...)
	ff := FleetFault{Fault: f, Seconds: in.seconds(at), Replica: &r, Pipelines: names}
	if f == FaultKill9 {
		in.reps.kill(r)
	} else {
		code, err := in.reps.terminate(r, time.Minute)
		if err != nil || code != 0 {
			in.rep.Problems = append(in.rep.Problems, fmt.Sprintf("SIGTERM of replica %d: exit code %d, %v", r, code, err))
		}
	}
	in.log.Info("replica down", "fault", f, "replica", r, "pipelines", names)
	taken := map[string]time.Time{}
	_, err := in.reps.waitFor(ctx, recoveryTimeout, fmt.Sprintf("replica %d's pipelines streaming on another replica", r), func(pl placement) bool {
		for _, name := range names {
			if _, ok := taken[name]; !ok && len(pl.streaming(name)) == 1 {
				taken[name] = pl.at
			}
		}
		return len(taken) == len(names)
	})
	if err != nil {
		return err
	}
	if f == FaultKill9 {
		tk := FleetTakeover{Replica: r, Seconds: ff.Seconds}
		for _, name := range names {
			ms := ms(taken[name].Sub(at))
			tk.Pipelines = append(tk.Pipelines, PipelineMS{Pipeline: name, MS: ms})
			in.rep.TakeoverMS = append(in.rep.TakeoverMS, ms)
		}
		in.rep.Takeovers = append(in.rep.Takeovers, tk)
	}
	if _, err := in.settle(ctx, fmt.Sprintf("%s of replica %d: taken over", f, r), false); err != nil {
		return err
	}
	ff.RecoveredMS = ms(time.Since(at))
	in.note(ff)
	if !sleep(ctx, in.o.Down) {
		return ctx.Err()
	}
	back := time.Now()
	// The pipelines it is ranked first for come back to it by hand-overs.
	var own []string
	for _, name := range in.active() {
		if preferred(name, len(in.reps.procs)) == r {
			own = append(own, name)
		}
	}
	in.mark(FaultHandover, back, own...)
	if err := in.reps.start(r); err != nil {
		return err
	}
	_, err = in.settle(ctx, fmt.Sprintf("%s of replica %d: back", f, r), true)
	return err
}
