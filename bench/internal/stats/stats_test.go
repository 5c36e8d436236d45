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

func TestSpreadText(t *testing.T) {
	if got := SpreadOf([]float64{5.3, 4.1, 4.5}).Text("%.1f"); got != "4.5 (4.1-5.3)" {
		t.Errorf("Text = %q", got)
	}
	if Ratio(1, 0) != 0 || Ratio(3, 2) != 1.5 {
		t.Error("Ratio")
	}
}
