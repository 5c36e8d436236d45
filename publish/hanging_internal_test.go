package publish

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

func TestHangWatchObserve(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	type look struct {
		at         time.Duration // after t0
		lso, hwm   int64
		hung       bool // reported now
		ended      bool
		hangingFor time.Duration // Since, as now minus it; 0: none
	}
	for _, tc := range []struct {
		name  string
		looks []look
	}{
		{"at the end", []look{{0, 5, 5, false, false, 0}, {time.Hour, 5, 5, false, false, 0}}},
		{"behind, moving", []look{{0, 1, 5, false, false, 0}, {40 * time.Second, 2, 6, false, false, 0}, {80 * time.Second, 3, 7, false, false, 0}}},
		{"behind, still, within the timeout", []look{{0, 1, 5, false, false, 0}, {time.Minute, 1, 9, false, false, 0}}},
		{"behind, still, past the timeout, reported once", []look{
			{0, 1, 5, false, false, 0}, {61 * time.Second, 1, 9, true, false, 61 * time.Second}, {2 * time.Minute, 1, 12, false, false, 2 * time.Minute}}},
		{"a reported hang ends when the offset moves", []look{
			{0, 1, 5, false, false, 0}, {61 * time.Second, 1, 9, true, false, 61 * time.Second}, {62 * time.Second, 9, 12, false, true, 0},
			// and the new position's clock starts afresh
			{100 * time.Second, 9, 12, false, false, 0}}},
		{"a reported hang ends when the offset reaches the high watermark", []look{
			{0, 1, 5, false, false, 0}, {61 * time.Second, 1, 9, true, false, 61 * time.Second}, {62 * time.Second, 9, 9, false, true, 0}}},
		{"a stall not reported ends silently", []look{{0, 1, 5, false, false, 0}, {30 * time.Second, 5, 5, false, false, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newHangWatch("progress", time.Minute, "b:9092", slog.New(slog.NewTextHandler(io.Discard, nil)))
			for i, l := range tc.looks {
				now := t0.Add(l.at)
				hung, ended := w.observe(0, l.lso, l.hwm, now)
				if (hung != nil) != l.hung || ended != l.ended {
					t.Fatalf("look %d (%+v): hung %v, ended %v", i, l, hung, ended)
				}
				if hung != nil && (hung.lso != l.lso || hung.hwm != l.hwm) {
					t.Errorf("look %d: reported %+v", i, *hung)
				}
				var got time.Duration
				if s := w.Since(); !s.IsZero() {
					got = now.Sub(s)
				}
				if got != l.hangingFor {
					t.Errorf("look %d: hanging for %v, want %v", i, got, l.hangingFor)
				}
			}
		})
	}
}

func TestHangWatchLooksOftenEnoughToReportSoonAfterTheTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ timeout, every time.Duration }{
		{time.Minute, 15 * time.Second}, {15 * time.Minute, 30 * time.Second}, {200 * time.Millisecond, 100 * time.Millisecond},
	} {
		if got := newHangWatch("p", tc.timeout, "b:1", nil).every(); got != tc.every {
			t.Errorf("timeout %v: looks every %v, want %v", tc.timeout, got, tc.every)
		}
	}
}
