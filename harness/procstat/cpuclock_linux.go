package procstat

import (
	"errors"
	"syscall"
	"unsafe"
)

// pidMaxLimit is the largest process id Linux hands out (PID_MAX_LIMIT on
// 64-bit systems); a larger one does not fit the clock id.
const pidMaxLimit = 4 << 20

var errNoProcess = errors.New("no such process")

// cpuClock reads the CPU-time clock of process pid, in nanoseconds: the
// clock id clock_getcpuclockid(3) makes for a process (the pid, negated,
// shifted past the clock type, CPUCLOCK_SCHED: the scheduler's runtime of
// the whole thread group). Linux lets any process read it.
func cpuClock(pid int) (int64, error) {
	if pid <= 0 || pid > pidMaxLimit {
		return 0, errNoProcess // the id would name another clock
	}
	const cpuClockSched = 2
	id := uintptr((^pid)<<3 | cpuClockSched)
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		if errno == syscall.EINVAL {
			return 0, errNoProcess // the clock of a process that is not there
		}
		return 0, errno
	}
	return ts.Nano(), nil
}
