package slot

import (
	"strconv"

	"github.com/outboxd/outboxd/lib/field"
)

// The settings this package's messages tell a user to give, by
// ProvisionConfig's field names ("Create", "BackfillWhere", "Failover";
// "Slot", "Table", "Publication" and "DatabaseURL" are named as they
// are): a caller whose Config calls them otherwise renames them
// (field.Names.Renamed), and the command renders them as its flags or
// its pipelines file's keys.

// createSetting is the slot's creation turned on (run's) or off (migrate's).
func createSetting(on bool) field.Setting {
	return field.Setting{Path: "Create", Value: strconv.FormatBool(on)}
}

func backfillSetting(where string) field.Setting {
	return field.Setting{Path: "BackfillWhere", Value: where}
}

func failoverSetting(m FailoverMode) field.Setting {
	return field.Setting{Path: "Failover", Value: string(m)}
}
