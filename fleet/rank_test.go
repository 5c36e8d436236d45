package fleet

import (
	"fmt"
	"math"
	"testing"

	"github.com/outboxd/outboxd/lib/field"
)

// Every replica computes the same order: for each pipeline, the ranks of
// the replicas are 0 to replicas-1, each once.
func TestRankIsAnOrderOfTheReplicas(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{1, 2, 3, 7} {
		for i := range 200 {
			name := fmt.Sprintf("pipeline-%d", i)
			seen := make([]bool, replicas)
			for r := range replicas {
				k := Rank(name, r, replicas)
				if k < 0 || k >= replicas || seen[k] {
					t.Fatalf("Rank(%s, %d, %d) = %d: not a new rank between 0 and %d", name, r, replicas, k, replicas-1)
				}
				seen[k] = true
			}
		}
	}
}

// Spreading: 1,000 pipelines over 3 replicas give each replica a share
// near a third, and when a replica goes, each of its pipelines moves to the
// replica ranked next for it, which spreads them over the survivors; the
// other pipelines stay where they are. (FNV-1a without weight's finalizer
// gave the third replica 249.)
func TestRankSpreadsAndMovesOnlyTheLostReplicasPipelines(t *testing.T) {
	t.Parallel()
	const pipelines, replicas = 1000, 3
	holder := func(name string, alive []int) int {
		best, bestRank := -1, replicas
		for _, r := range alive {
			if k := Rank(name, r, replicas); k < bestRank {
				best, bestRank = r, k
			}
		}
		return best
	}
	all, survivors := []int{0, 1, 2}, []int{0, 2}
	count := make([]int, replicas)
	moved := make([]int, replicas)
	for i := range pipelines {
		name := fmt.Sprintf("db-%03d", i)
		before, after := holder(name, all), holder(name, survivors)
		count[before]++
		if before != 1 && after != before {
			t.Errorf("%s moved from replica %d to %d though its replica stayed", name, before, after)
		}
		if before == 1 {
			moved[after]++
		}
	}
	fair := float64(pipelines) / replicas
	sigma := math.Sqrt(fair * (1 - 1.0/replicas)) // of a binomial share
	for r, n := range count {
		// Rendezvous hashing of fixed names deviates from a fair share
		// like a binomial draw: at most 3σ either side.
		if math.Abs(float64(n)-fair) > 3*sigma {
			t.Errorf("replica %d prefers %d of %d pipelines: %v", r, n, pipelines, count)
		}
	}
	if moved[0] == 0 || moved[2] == 0 {
		t.Errorf("replica 1's %d pipelines all moved to one survivor: %v", count[1], moved)
	}
	t.Logf("preferred: %v; replica 1's pipelines after it left: to 0: %d, to 2: %d", count, moved[0], moved[2])
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"defaults", Config{}, nil},
		{"second of three", Config{Replica: 1, Replicas: 3}, nil},
		// Issue 49, item 15: a StatefulSet scaled past --replicas (kubectl
		// scale, an autoscaler) had its extra pods exit, crash-looping; they
		// run as standbys of last resort (TestRankOfAReplicaBeyondTheReplicas).
		{"a replica beyond the replicas", Config{Replica: 3, Replicas: 3}, nil},
		{"negative replica", Config{Replica: -1}, []string{"Replica"}},
		{"no replicas", Config{Replicas: -2}, []string{"Replicas"}},
		{"negative delays", Config{RankDelay: -1, RetryInitial: -1, RetryMax: -1}, []string{"RankDelay", "RetryInitial", "RetryMax"}},
		{"max below initial", Config{RetryInitial: 10e9, RetryMax: 1e9}, []string{"RetryMax"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			var got []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					got = append(got, e.(*field.Error).Field)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Validate() = %v; want problems with %v", err, tt.want)
			}
		})
	}
}

// Issue 49, item 15: a replica numbered beyond --replicas (a pod of a
// StatefulSet scaled past it) ranks after every other replica for every
// pipeline: it takes a pipeline only when none of them holds it.
func TestRankOfAReplicaBeyondTheReplicas(t *testing.T) {
	for _, name := range []string{"orders", "billing", "users"} {
		if got := Rank(name, 2, 2); got != 2 {
			t.Errorf("Rank(%s, 2, 2) = %d, want 2 (after replicas 0 and 1)", name, got)
		}
		if got := Rank(name, 5, 2); got != 5 {
			t.Errorf("Rank(%s, 5, 2) = %d, want 5", name, got)
		}
	}
}
