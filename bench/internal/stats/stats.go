// Package stats sums up a benchmark figure over its repetitions: the
// median, and the spread from the least to the largest. It is shared by
// bench/cmd/outboxd-bench and bench/cmd/fleet-bench.
package stats

import "slices"

// Median of sorted values (the mean of the middle two for an even count;
// 0 for none).
func Median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// Spread is a figure over its repetitions.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"` // repetitions
}

// SpreadOf is the spread of values, in any order (the zero Spread for none).
func SpreadOf(values []float64) Spread {
	if len(values) == 0 {
		return Spread{}
	}
	s := slices.Sorted(slices.Values(values))
	return Spread{Median: Median(s), Min: s[0], Max: s[len(s)-1], N: len(s)}
}
