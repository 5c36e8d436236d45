package cmdline

import "testing"

func TestJoin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"none", nil, ""},
		{"plain", []string{"-systems", "outboxd", "-rates", "1000", "-steady-profile=false"}, "-systems outboxd -rates 1000 -steady-profile=false"},
		{"empty", []string{"-debezium", ""}, "-debezium ''"},
		{"spaced", []string{"-out", "a b"}, "-out 'a b'"},
		{"expansion", []string{"--debezium-route-topic-replacement", "events.${routedByValue}"}, "--debezium-route-topic-replacement 'events.${routedByValue}'"},
		{"list", []string{"-systems", "outboxd,relay"}, "-systems outboxd,relay"},
		{"glob", []string{"*.pprof"}, "'*.pprof'"},
		{"single quote inside", []string{"it's"}, `'it'\''s'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Join(tt.args); got != tt.want {
				t.Errorf("Join(%q) = %s, want %s", tt.args, got, tt.want)
			}
		})
	}
}
