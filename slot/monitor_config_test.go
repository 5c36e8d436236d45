package slot

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/lib/field"
)

func TestMonitorConfigValidate(t *testing.T) {
	err := MonitorConfig{Interval: -1, WarnBytes: -1}.Validate()
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *field.Error
		if !errors.As(e, &fe) {
			t.Fatalf("problem %v is not a *field.Error", e)
		}
		got = append(got, fe.Field)
	}
	if want := "DatabaseURL,Slot,Publication,Interval,WarnBytes"; strings.Join(got, ",") != want {
		t.Fatalf("Validate() = %v; want problems with %s", err, want)
	}
	if err := (MonitorConfig{DatabaseURL: "x", Slot: "s", Publication: "p"}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if _, err := NewMonitor(MonitorConfig{DatabaseURL: "x", Slot: "s", Publication: "p", Interval: -1}, nil); err == nil {
		t.Error("NewMonitor accepted a negative interval")
	}
}
