package slot_test

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/slot"
)

func TestAppNameRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   slot.AppName
		want string
	}{
		{name: "run without a file", in: slot.AppName{Replica: -1, Settings: "3a9c1e2b"}, want: "outboxd #3a9c1e2b"},
		{name: "a pipeline of a file", in: slot.AppName{Pipeline: "orders", Replica: -1, Settings: "3a9c1e2b"}, want: "outboxd/orders #3a9c1e2b"},
		{name: "a replica's pipeline", in: slot.AppName{Pipeline: "orders", Replica: 1, Settings: "3a9c1e2b"}, want: "outboxd/orders/1 #3a9c1e2b"},
		{name: "no fingerprint", in: slot.AppName{Pipeline: "orders", Replica: 0}, want: "outboxd/orders/0"},
		{name: "nothing but outboxd", in: slot.AppName{Replica: -1}, want: "outboxd"},
		// PostgreSQL cuts application_name at 63 bytes: the pipeline's
		// name is shortened so that the replica and fingerprint stay.
		{name: "a long pipeline name", in: slot.AppName{Pipeline: strings.Repeat("p", 63), Replica: 12, Settings: "3a9c1e2b"},
			want: "outboxd/" + strings.Repeat("p", 63-len("outboxd/")-len("/12 #3a9c1e2b")) + "/12 #3a9c1e2b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.in.String()
			if got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			if len(got) > 63 {
				t.Fatalf("String() is %d bytes, longer than PostgreSQL keeps", len(got))
			}
			back, ok := slot.ParseAppName(got)
			if !ok {
				t.Fatalf("ParseAppName(%q) refused it", got)
			}
			if back.Replica != tt.in.Replica || back.Settings != tt.in.Settings || !strings.HasPrefix(tt.in.Pipeline, back.Pipeline) {
				t.Fatalf("ParseAppName(%q) = %+v, want %+v", got, back, tt.in)
			}
		})
	}
}

func TestSameSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{name: "same fingerprint, other replica", a: "outboxd/orders/0 #aa", b: "outboxd/orders/1 #aa", want: true},
		{name: "other fingerprints", a: "outboxd #aa", b: "outboxd #bb", want: false},
		{name: "a pipeline of a file against run's", a: "outboxd/orders/0 #aa", b: "outboxd #bb", want: false},
		{name: "a URL's own name", a: "outboxd #aa", b: "billing-relay", want: true},
		{name: "an outboxd without a fingerprint", a: "outboxd #aa", b: "outboxd", want: true},
		{name: "not outboxd's shape", a: "outboxd #aa", b: "outboxdx/a/b/c #bb", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := slot.SameSettings(tt.a, tt.b); got != tt.want {
				t.Fatalf("SameSettings(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}
