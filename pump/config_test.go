package pump

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/lib/field"
)

// Regression (issue 38): a dead-letter topic Kafka cannot have, or an
// internal one, was refused by the command's flags only.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		fields []string
	}{
		{"defaults", Config{}, nil},
		{"dead-letter topic", Config{DeadLetterTopic: "orders.dlq"}, nil},
		{"illegal dead-letter topic", Config{DeadLetterTopic: "orders dlq"}, []string{"DeadLetterTopic"}},
		{"internal dead-letter topic", Config{DeadLetterTopic: "__consumer_offsets"}, []string{"DeadLetterTopic"}},
		{"negative window", Config{MaxInFlightRecords: -1, MaxInFlightBytes: -1}, []string{"MaxInFlightRecords", "MaxInFlightBytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if got := fields(t, err); got != strings.Join(tt.fields, ",") {
				t.Fatalf("Validate() = %v; want problems with %v", err, tt.fields)
			}
			if _, nerr := New(tt.cfg, &fakeSink{}, nil); (nerr != nil) != (err != nil) {
				t.Errorf("New = %v, want Validate's answer %v", nerr, err)
			}
		})
	}
}

func fields(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *field.Error
		if !errors.As(e, &fe) {
			t.Fatalf("problem %v is not a *field.Error", e)
		}
		got = append(got, fe.Field)
	}
	return strings.Join(got, ",")
}
