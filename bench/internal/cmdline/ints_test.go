package cmdline

import (
	"slices"
	"strings"
	"testing"
)

func TestPositiveInts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{in: "1000", want: []int{1000}},
		{in: "1000, 5000,10000", want: []int{1000, 5000, 10000}},
		{in: "1000,0", err: `-rates: "0" is not a positive number`},
		{in: "1000,x", err: `-rates: "x" is not a positive number`},
		{in: "", err: `-rates: "" is not a positive number`},
	} {
		got, err := PositiveInts("rates", tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("PositiveInts(%q) = %v, %v; want error %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("PositiveInts(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
