package cdc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/layout"
	"github.com/outboxd/outboxd/lib/field"
)

// Regression (issue 38): the read linger's maximum, the server timeout
// above the status interval and a backfill without creating the slot were
// checked by the command's flags only; a program using cdc as a library
// streamed with them unchecked. Config.Validate owns them, and New refuses.
func TestConfigValidate(t *testing.T) {
	ok := Config{DatabaseURL: "postgres://localhost/app"}
	tests := []struct {
		name   string
		change func(*Config)
		fields []string // every problem reported, in this order
	}{
		{"defaults", func(*Config) {}, nil},
		{"no database", func(c *Config) { c.DatabaseURL = "" }, []string{"DatabaseURL"}},
		{"read linger above its maximum", func(c *Config) { c.ReadLinger = MaxReadLinger + time.Millisecond }, []string{"ReadLinger"}},
		{"negative read linger", func(c *Config) { c.ReadLinger = -1 }, []string{"ReadLinger"}},
		{"server timeout not above the status interval", func(c *Config) { c.StatusInterval, c.ServerTimeout = time.Minute, time.Minute }, []string{"ServerTimeout"}},
		{"server timeout below the default status interval", func(c *Config) { c.ServerTimeout = time.Second }, []string{"ServerTimeout"}},
		{"backfill without creating the slot", func(c *Config) { c.BackfillWhere = "id > 1" }, []string{"BackfillWhere"}},
		{"blank backfill predicate", func(c *Config) { c.CreateSlot, c.BackfillWhere = true, "  " }, []string{"BackfillWhere"}},
		{"slot name", func(c *Config) { c.Slot = "Outboxd" }, []string{"Slot"}},
		{"failover mode", func(c *Config) { c.FailoverSlot = "sometimes" }, []string{"FailoverSlot"}},
		{"negative durations", func(c *Config) { c.IdleWait, c.ShutdownTimeout = -1, -1 }, []string{"IdleWait", "ShutdownTimeout"}},
		{"table name", func(c *Config) { c.Table = "a.b.c" }, []string{"Table"}},
		{"blank backfill order column", func(c *Config) { c.BackfillOrderColumn = " " }, []string{"BackfillOrderColumn"}},
		{"column mapping", func(c *Config) { c.Columns = layout.Columns{TopicTemplate: "orders.{"} }, []string{"Columns"}},
		{"all at once", func(c *Config) { c.DatabaseURL, c.ReadLinger, c.Slot = "", time.Hour, "a-b" }, []string{"DatabaseURL", "Slot", "ReadLinger"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.change(&c)
			err := c.Validate()
			var got []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					var fe *field.Error
					if !errors.As(e, &fe) {
						t.Fatalf("problem %v is not a *field.Error", e)
					}
					got = append(got, fe.Field)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.fields, ",") {
				t.Fatalf("Validate() = %v; want problems with %v", err, tt.fields)
			}
			if _, nerr := New(c, nil, nil, nil); err != nil && (nerr == nil || nerr.Error() != err.Error()) {
				t.Errorf("New = %v, want Validate's error", nerr)
			}
		})
	}
}
