package slot

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/lib/field"
)

// flagNames renders the provisioner's settings as run's and migrate's
// flags do.
var flagNames = field.Flags(func(path string) string {
	return map[string]string{"Create": "create-slot", "BackfillWhere": "backfill-where", "Failover": "failover-slot",
		"Slot": "slot", "Table": "table", "Publication": "publication", "DatabaseURL": "database-url", "PrimaryURL": "primary-url"}[path]
})

// Issue 50, item 4: the slot's messages named command-line flags, wrong
// for a pipelines file and for a library user. They name settings by
// field, rendered as whoever configured the provisioner set them.
func TestMessagesNameSettingsAsTheirUserSetThem(t *testing.T) {
	t.Parallel()
	rec := Record{Slot: "s", SystemID: "1", Timeline: 1, CreatedBy: CreatedByMigrate, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	fileKeys := field.Names{Key: flagNames.Key}
	library := field.Names{}.Renamed(func(p string) string {
		return map[string]string{"Create": "Stream.CreateSlot", "BackfillWhere": "Stream.BackfillWhere"}[p]
	})
	tests := []struct {
		name        string
		names       field.Names
		want, never []string
	}{
		// On a line of its own, ready to copy.
		{"flags", flagNames, []string{"\n  outboxd run --create-slot --backfill-where \"created_at >= '2026-01-02T02:59:05Z'\"\n"}, nil},
		{"a pipelines file", fileKeys, []string{"create-slot: true and backfill-where: created_at >= '2026-01-02T02:59:05Z'"}, []string{"--"}},
		{"a library user", library, []string{"Stream.CreateSlot = true", "Stream.BackfillWhere = \"created_at >= '2026-01-02T02:59:05Z'\""}, []string{"--"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := LostError("s", rec, true, "1", 1, tt.names).Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the lost slot's recovery does not say %q:\n%s", w, msg)
				}
			}
			for _, w := range tt.never {
				if strings.Contains(msg, w) {
					t.Errorf("the lost slot's recovery says %q:\n%s", w, msg)
				}
			}
		})
	}
}
