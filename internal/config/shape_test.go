package config

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/layout"
)

// The record's shape comes from --layout and --cloudevents: one shape,
// each with its options (issue 50: shapes are chosen by name). Debezium's
// records have no CloudEvents attributes, so the two together are
// refused under --layout, as the layout package refused both options set
// before the shapes had one name.
func TestShapeFromTheFlags(t *testing.T) {
	t.Parallel()
	base := []string{"--database-url", "postgres://db/app", "--brokers", "k:9092"}
	cases := []struct {
		name      string
		args      []string
		wantShape string
		wantErr   string // in Validate's error; "": valid
	}{
		{"the default", nil, layout.ShapePlain, ""},
		{"CloudEvents", []string{"--cloudevents", "--cloudevents-source", "/orders", "--cloudevents-type", "com.example.{type}"}, layout.ShapeCloudEvents, ""},
		{"Debezium", []string{"--layout", "debezium"}, layout.ShapeDebezium, ""},
		{"Debezium with CloudEvents", []string{"--layout", "debezium", "--cloudevents", "--cloudevents-source", "/orders", "--cloudevents-type", "t"}, layout.ShapeDebezium,
			"--layout (OUTBOXD_LAYOUT): CloudEvents and the Debezium layout do not go together"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			fs := runLike(&c)
			if err := Parse(fs, append(append([]string{}, base...), tc.args...), func(string) string { return "" }); err != nil {
				t.Fatal(err)
			}
			c.ApplyLayout(fs)
			if got := c.Mapping().Shape; got != tc.wantShape {
				t.Errorf("shape %q, want %q", got, tc.wantShape)
			}
			err := c.Validate(fs)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate = %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
