package host

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// CPUSample is the machine's CPU time so far, all cores together.
type CPUSample struct {
	At          time.Time
	Busy, Total uint64 // jiffies over all CPUs, from /proc/stat
}

// ReadCPU reads the aggregate "cpu" line of /proc/stat.
func ReadCPU() (CPUSample, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUSample{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return CPUSample{}, false
	}
	s := CPUSample{At: time.Now()}
	for i, v := range f[1:] {
		if i >= 8 { // guest time is already counted in user
			break
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return CPUSample{}, false
		}
		s.Total += n
		if i != 3 && i != 4 { // idle, iowait
			s.Busy += n
		}
	}
	return s, true
}

// BusyBetween is the share of all cores' time that was busy from a to b
// (0 when b is not later).
func BusyBetween(a, b CPUSample) float64 {
	if b.Total <= a.Total {
		return 0
	}
	return float64(b.Busy-a.Busy) / float64(b.Total-a.Total)
}
