package fleet

import (
	"hash/fnv"
	"slices"
)

// Rank is replica's place among replicas (0 to replicas-1) for the
// pipeline named name, by rendezvous (highest random weight) hashing: 0 is
// the replica that should hold it, 1 the one that takes it over when 0
// is gone, and so on. Every replica computes the same order with no
// communication; removing a replica moves only its own pipelines, each to
// the replica ranked next for it, which spreads them over the survivors.
//
// A replica numbered replicas or above ranks replica: after all of them.
func Rank(name string, replica, replicas int) int {
	if replica >= replicas {
		return replica
	}
	if replicas <= 1 {
		return 0
	}
	order := make([]int, replicas)
	for i := range order {
		order[i] = i
	}
	weights := make([]uint64, replicas)
	for i := range weights {
		weights[i] = weight(name, i)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case weights[a] > weights[b]:
			return -1
		case weights[a] < weights[b]:
			return 1
		}
		return a - b
	})
	return slices.Index(order, replica)
}

// weight is the rendezvous weight of replica for the pipeline named name.
// FNV-1a alone mixes the last bytes poorly (replica numbers differ only
// there), so its result goes through a 64-bit finalizer.
func weight(name string, replica int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	_, _ = h.Write([]byte{0, byte(replica), byte(replica >> 8), byte(replica >> 16), byte(replica >> 24)})
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
