package field

import (
	"errors"
	"reflect"
	"testing"
)

// A component's problems keep their fields when a Config holding it puts
// them under its own field; what is not a field's problem stays as it is.
func TestUnder(t *testing.T) {
	t.Parallel()
	other := errors.New("not a field's")
	var p Problems
	p.Add("ReadLinger", "must not be negative")
	p.Addf("Slot", "%q is too long", "x")
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"none", nil, nil},
		{"one", &Error{Field: "Linger", Problem: "bad"}, []string{"Kafka.Linger: bad"}},
		{"joined, with another error", errors.Join(p.Err(), other), []string{"Kafka.ReadLinger: must not be negative", `Kafka.Slot: "x" is too long`, "not a field's"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range Under("Kafka", tt.err) {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Under = %q, want %q", got, tt.want)
			}
		})
	}
	if (Problems{}).Err() != nil {
		t.Error("no problems: Err must be nil")
	}
}
