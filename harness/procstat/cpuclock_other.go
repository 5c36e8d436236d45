//go:build !linux

package procstat

import "errors"

func cpuClock(int) (int64, error) {
	return 0, errors.New("per-process CPU clocks are read on Linux only")
}
