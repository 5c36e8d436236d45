package procstat

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// The process clock's id is built by hand (clock_getcpuclockid(3)); a
// wrong one reads another clock (a thread's, another process's) or none.
func TestCPUClockOfThisProcessIsItsCPUTime(t *testing.T) {
	const clockProcessCPUTime = 2 // CLOCK_PROCESS_CPUTIME_ID
	own := func() int64 {
		var ts syscall.Timespec
		if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockProcessCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
			t.Fatal(errno)
		}
		return ts.Nano()
	}
	before := own()
	ns, err := cpuClock(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	after := own()
	if ns < before || ns > after {
		t.Errorf("cpuClock(own pid) = %d ns, outside this process's CPU time %d..%d ns", ns, before, after)
	}
}

// Regression: CPU time came from /proc/PID/stat in 10 ms ticks, which at
// 10 events/s over a 10 s run is 100 µs per event: coarser than the CPU
// per event it was to measure. It is read to the nanosecond now, for
// another process too, and agrees with /proc.
func TestCPUSecondsOfAnotherProcessToTheNanosecond(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	var ns int64
	for deadline := time.Now().Add(30 * time.Second); ns < 50e6; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the spinning child used %d ns of CPU in 30 s", ns)
		}
		var err error
		if ns, err = cpuClock(pid); err != nil {
			t.Fatal(err)
		}
	}
	first := statTicks(t, pid)
	ns, err := cpuClock(pid)
	if err != nil {
		t.Fatal(err)
	}
	last := statTicks(t, pid)
	// /proc truncates user and system time to ticks each: up to two
	// ticks below the clock.
	if ns < first*10e6 || ns >= (last+2)*10e6 {
		t.Errorf("child's CPU clock %d ns, /proc/%d/stat %d then %d ticks of 10 ms", ns, pid, first, last)
	}
	if ns%10e6 == 0 {
		t.Errorf("child's CPU clock %d ns is a whole number of ticks: not the nanosecond clock", ns)
	}
	secs, err := CPUSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	if secs < float64(ns)/1e9 {
		t.Errorf("CPUSeconds %v after the clock read %d ns", secs, ns)
	}
}

// statTicks is user plus system time from /proc/PID/stat, in ticks.
func statTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:]) // the name may hold spaces
	var ticks int64
	for _, v := range f[11:13] { // utime, stime: fields 14 and 15 of proc(5)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ticks += n
	}
	return ticks
}
