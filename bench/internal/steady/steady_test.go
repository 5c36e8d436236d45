package steady

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A load whose events could not be told apart, or that writes nothing, is
// refused before anything is started.
func TestRunRefusesALoadItCannotMeasure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		targets []Target
		want    string
	}{
		{"one topic for two databases", []Target{{URL: "postgres://a", Topic: "t", Writers: 1}, {URL: "postgres://b", Topic: "t", Writers: 1}}, "two targets publish to topic t"},
		{"no writers", []Target{{URL: "postgres://a", Topic: "t"}}, "without writers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), Load{Brokers: "127.0.0.1:1", Targets: tc.targets, Rate: 10, TxSize: 1, Duration: time.Second})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
