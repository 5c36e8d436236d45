package layout

import "strconv"

// quoteShort quotes b for an error message, cutting it after 64 bytes.
func quoteShort(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}

// constError is an error that can be a constant.
type constError string

func (e constError) Error() string { return string(e) }
