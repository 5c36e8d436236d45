package decode

import "fmt"

// truncatedError describes a message that ended before a field was complete.
func truncatedError(field string, off int, want uint64, have int) error {
	return fmt.Errorf("truncated at offset %d: %s needs %d bytes, %d left", off, field, want, have)
}
