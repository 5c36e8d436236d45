package fleet

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/outbox"
)

// Regression (issue 49, item 11): a pipeline's Detail, served on the
// unauthenticated /pipelines, carried its error's text whole, and a row's
// error can quote the row's values. A row's error is summed up without its
// text, anything else is cut.
func TestSummary(t *testing.T) {
	t.Parallel()
	row := &outbox.RowError{Table: "public.outbox", Column: "payload", ID: "42", Err: errors.New(`path $.card: "4111111111111111" is not a number`)}
	tests := []struct {
		name     string
		err      error
		want     string
		withheld string
	}{
		{"a row's error, wrapped", fmt.Errorf("%w (commit LSN 0/16B3748)", row),
			`a row of public.outbox (outbox id 42), column "payload" cannot be published; the Error log says why`, "4111111111111111"},
		{"a short error", errors.New("slot outboxd_orders is gone"), "slot outboxd_orders is gone", ""},
		{"a long error", errors.New(strings.Repeat("é", 400)), strings.Repeat("é", maxDetail/2) + "… (the Error log has it whole)", ""},
	}
	for _, tt := range tests {
		got := summary(tt.err)
		if got != tt.want {
			t.Errorf("%s: summary = %q, want %q", tt.name, got, tt.want)
		}
		if tt.withheld != "" && strings.Contains(got, tt.withheld) {
			t.Errorf("%s: summary %q shows the row's value", tt.name, got)
		}
	}
}
