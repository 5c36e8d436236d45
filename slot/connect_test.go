package slot_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/harness/testenv"
	"github.com/outboxd/outboxd/slot"
)

// Regression (issue 38): the one catalog query for a publication's tables
// has estimates above jit_above_cost, and PostgreSQL spent longer
// compiling it than running it, twice at every start (run's start-up went
// from a few to a few tens of milliseconds times four). outboxd's catalog
// connections run without JIT, unless the URL asks for it.
func TestCatalogConnectionsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	url := testenv.Database(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, tt := range []struct{ url, want string }{{url, "off"}, {url + sep + "jit=on", "on"}} {
		conn, err := slot.Connect(t.Context(), tt.url, "")
		if err != nil {
			t.Fatal(err)
		}
		var jit string
		if err := conn.QueryRow(t.Context(), "SHOW jit").Scan(&jit); err != nil {
			t.Fatal(err)
		}
		conn.Close(context.Background())
		if jit != tt.want {
			t.Errorf("jit = %s on a catalog connection (URL sets jit: %v), want %s", jit, tt.want == "on", tt.want)
		}
	}
}
