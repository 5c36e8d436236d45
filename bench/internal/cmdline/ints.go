package cmdline

import (
	"fmt"
	"strconv"
	"strings"
)

// PositiveInts parses a flag's comma-separated list of positive numbers
// (rates, batch sizes), naming the flag in its error.
func PositiveInts(flagName, s string) ([]int, error) {
	var out []int
	for _, v := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-%s: %q is not a positive number", flagName, v)
		}
		out = append(out, n)
	}
	return out, nil
}
