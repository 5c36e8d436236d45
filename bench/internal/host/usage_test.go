package host

import (
	"os"
	"testing"
)

// A server process that appeared between two readings counts whole; one
// that is gone by the second counts nothing more.
func TestUsedCountsServerProcessesThatAppeared(t *testing.T) {
	a := Reading{Publisher: 1.5, Server: map[int]float64{10: 2, 11: 4}, Machine: CPUSample{Busy: 10, Total: 100}}
	b := Reading{Publisher: 2, Server: map[int]float64{10: 2.5, 12: 0.25}, Machine: CPUSample{Busy: 60, Total: 200}}
	pub, srv, busy := Used(a, b)
	if pub != 0.5 || srv != 0.75 || busy != 0.5 {
		t.Fatalf("Used = %v, %v, %v; want 0.5, 0.75, 0.5", pub, srv, busy)
	}
}

// Read sums its publishers: this process counted twice is twice its time.
func TestReadSumsThePublishers(t *testing.T) {
	self := os.Getpid()
	one, two := Read([]int{self}, nil), Read([]int{self, self}, nil)
	if one.Publisher <= 0 || two.Publisher < 2*one.Publisher {
		t.Fatalf("Read: one %v, two %v: want two at least twice one", one.Publisher, two.Publisher)
	}
	if _, ok := ReadCPU(); !ok {
		t.Fatal("ReadCPU: /proc/stat unreadable")
	}
}
