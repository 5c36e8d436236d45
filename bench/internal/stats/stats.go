// Package stats sums up a benchmark figure over its repetitions: the
// median, and the spread from the least to the largest; and writes them
// for a report. It is shared by
// bench/cmd/outboxd-bench and bench/cmd/fleet-bench.
package stats

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
)

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

// Text writes s for a report: the median, then the spread in
// parentheses, each in format ("%.1f": "4.5 (4.1-5.3)").
func (s Spread) Text(format string) string {
	return fmt.Sprintf(format+" ("+format+"-"+format+")", s.Median, s.Min, s.Max)
}

// Ratio is a/b, 0 when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// WriteJSON writes v, indented, to path: a bench's results.json.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
