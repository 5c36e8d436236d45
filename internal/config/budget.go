package config

import (
	"math"

	"github.com/outboxd/outboxd/pump"
)

// DefaultInFlightBudgetBytes is the process's in-flight budget without a
// memory limit to take it from.
const DefaultInFlightBudgetBytes = 256 << 20

// InFlightBudget is the process's in-flight budget that
// --in-flight-budget-bytes and --in-flight-budget-records ask for, those
// left at 0 taken from memLimit, the Go runtime's memory limit
// (math.MaxInt64: none): a quarter of it in bytes, which leaves the rest
// for what a record in flight costs besides its bytes (franz-go's copy in
// a batch, the garbage collector's headroom) and for the process itself;
// one record per KiB of that.
func (c *Config) InFlightBudget(memLimit int64) *pump.Budget {
	bytes := c.Process.InFlightBudgetBytes
	if bytes == 0 {
		bytes = DefaultInFlightBudgetBytes
		if memLimit > 0 && memLimit < math.MaxInt64 {
			bytes = int(min(memLimit/4, math.MaxInt32))
		}
	}
	records := c.Process.InFlightBudgetRecords
	if records == 0 {
		records = max(bytes>>10, 1)
	}
	return pump.NewBudget(records, bytes)
}
