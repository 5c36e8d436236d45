package fleet

import (
	"testing"

	"github.com/outboxd/outboxd/pipeline"
)

// Issue 52: a standby can neither write the hand-over records nor LISTEN
// and NOTIFY, so the replicas of a pipeline decoding on one hand over on
// the primary.
func TestHandoverIsOnThePrimary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, database, primary, want string
	}{
		{"decoding on the primary", "postgres://db/app", "", "postgres://db/app"},
		{"decoding on a standby", "postgres://standby/app", "postgres://primary/app", "postgres://primary/app"},
	} {
		var cfg pipeline.Config
		cfg.Stream.DatabaseURL, cfg.Stream.PrimaryURL = tc.database, tc.primary
		if got := handoverURL(cfg); got != tc.want {
			t.Errorf("%s: handoverURL = %q, want %q", tc.name, got, tc.want)
		}
	}
}
