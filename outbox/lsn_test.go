package outbox_test

import (
	"testing"

	"github.com/outboxd/outboxd/outbox"
)

func TestLSN(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		text string
		lsn  outbox.LSN
	}{
		{"0/0", 0},
		{"16/B374D848", 0x16_B374D848},
		{"FFFFFFFF/FFFFFFFF", ^outbox.LSN(0)},
	} {
		if got := tt.lsn.String(); got != tt.text {
			t.Errorf("%d.String() = %s, want %s", uint64(tt.lsn), got, tt.text)
		}
		if got, err := outbox.ParseLSN(tt.text); err != nil || got != tt.lsn {
			t.Errorf("ParseLSN(%s) = %d, %v; want %d", tt.text, got, err, uint64(tt.lsn))
		}
	}
	for _, bad := range []string{"", "1", "x/1", "1/x", "100000000/0", "1/2/3"} {
		if _, err := outbox.ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q): no error", bad)
		}
	}
}

func TestPositionOrder(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p, q outbox.Position
		want bool
	}{
		{outbox.Position{}, outbox.Position{CommitLSN: 1}, true},
		{outbox.Position{CommitLSN: 5, Index: 3}, outbox.Position{CommitLSN: 5, Index: 4}, true},
		{outbox.Position{CommitLSN: 5, Index: 4}, outbox.Position{CommitLSN: 5, Index: 4}, false},
		{outbox.Position{CommitLSN: 5, Index: 9}, outbox.Position{CommitLSN: 6, Index: 0}, true},
		{outbox.Position{CommitLSN: 6, Index: 0}, outbox.Position{CommitLSN: 5, Index: 9}, false},
	} {
		if got := tt.p.Before(tt.q); got != tt.want {
			t.Errorf("%v.Before(%v) = %v, want %v", tt.p, tt.q, got, tt.want)
		}
	}
}
