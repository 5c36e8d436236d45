package stats

import "testing"

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{3}, Spread{3, 3, 3, 1}},
		{[]float64{5, 1, 3}, Spread{3, 1, 5, 3}},
		{[]float64{4, 1, 2, 8}, Spread{3, 1, 8, 4}},
	} {
		if got := SpreadOf(tc.in); got != tc.want {
			t.Errorf("SpreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
