package procstat

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestOwnProcess(t *testing.T) {
	// Touch 32 MiB so the peak is at least that.
	buf := make([]byte, 32<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	peak, err := PeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if peak < 32<<20 {
		t.Errorf("peak RSS %d bytes after touching 32 MiB", peak)
	}
	// Spin until the kernel has charged at least one tick (10 ms).
	var cpu float64
	for deadline := time.Now().Add(10 * time.Second); cpu == 0 && time.Now().Before(deadline); {
		for i := range buf {
			buf[i]++
		}
		if cpu, err = CPUSeconds(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if cpu <= 0 {
		t.Errorf("CPU seconds %v after spinning", cpu)
	}
	// Each sleep of this goroutine's thread is a voluntary switch.
	before, err := Sleeps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		time.Sleep(time.Millisecond)
	}
	after, err := Sleeps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 10 {
		t.Errorf("%d voluntary context switches over 20 sleeps", after-before)
	}
}

func TestNoSuchProcess(t *testing.T) {
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{
		1 << 30,                   // above pid_max
		exited.ProcessState.Pid(), // gone (unless the id was handed out again meanwhile)
	} {
		for name, f := range map[string]func() error{
			"PeakRSS":    func() error { _, err := PeakRSS(pid); return err },
			"CPUSeconds": func() error { _, err := CPUSeconds(pid); return err },
			"Sleeps":     func() error { _, err := Sleeps(pid); return err },
		} {
			if err := f(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("process %d", pid)) {
				t.Errorf("%s of missing process %d: %v", name, pid, err)
			}
		}
	}
}
