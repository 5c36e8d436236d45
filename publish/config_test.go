package publish

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/lib/field"
)

// Regression (issue 38): broker addresses, the record size and the
// transaction timeout were checked by the command's flags only, or one
// problem at a time.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		fields []string
	}{
		{"defaults", Config{Brokers: []string{"k:9092"}}.Validate(), nil},
		{"no brokers", Config{}.Validate(), []string{"Brokers"}},
		{"every problem at once", Config{Brokers: []string{"k"}, Compression: "brotli", MaxRecordBytes: 10, Linger: -1}.Validate(),
			[]string{"Brokers", "Compression", "MaxRecordBytes", "Linger"}},
		{"txn defaults", TxnConfig{}.Validate(), nil},
		{"timeout not above the interval", TxnConfig{Interval: time.Minute}.Validate(), []string{"Timeout"}},
		{"illegal progress topic and negatives", TxnConfig{ProgressTopic: "a/b", MaxRecords: -1, MaxBytes: -1}.Validate(),
			[]string{"ProgressTopic", "MaxRecords", "MaxBytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			if tt.err != nil {
				for _, e := range tt.err.(interface{ Unwrap() []error }).Unwrap() {
					var fe *field.Error
					if !errors.As(e, &fe) {
						t.Fatalf("problem %v is not a *field.Error", e)
					}
					got = append(got, fe.Field)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.fields, ",") {
				t.Fatalf("Validate() = %v; want problems with %v", tt.err, tt.fields)
			}
		})
	}
	if _, err := New(Config{Brokers: []string{"k"}}, nil); err == nil {
		t.Error("New accepted a broker without a port")
	}
	if _, err := NewTxn(TxnConfig{Interval: time.Minute}, Config{Brokers: []string{"k:1"}}, "s", nil, nil); err == nil {
		t.Error("NewTxn accepted a timeout below the interval")
	}
}
