package host

import "github.com/outboxd/outboxd/harness/procstat"

// Reading is, at one moment, the CPU seconds used so far by the processes
// of a system under test (its publishers: one outboxd, or many) and by the
// server processes working for it (walsenders, a relay's backends), with
// the machine's CPU time.
type Reading struct {
	Publisher float64
	Sleeps    int64           // the publishers' voluntary context switches (procstat.Sleeps)
	Server    map[int]float64 // pid -> CPU seconds
	Machine   CPUSample
}

// Read reads the publishers' and the server processes' CPU time now. A
// process that cannot be read (gone) counts nothing.
func Read(publishers, server []int) Reading {
	r := Reading{Server: map[int]float64{}}
	for _, pid := range publishers {
		cpu, _ := procstat.CPUSeconds(pid)
		sleeps, _ := procstat.Sleeps(pid)
		r.Publisher += cpu
		r.Sleeps += sleeps
	}
	for _, pid := range server {
		if cpu, err := procstat.CPUSeconds(pid); err == nil {
			r.Server[pid] = cpu
		}
	}
	r.Machine, _ = ReadCPU()
	return r
}

// Used is what the system used between two readings: its publishers, the
// server processes working for it (one that appeared meanwhile counts
// whole), and how busy the machine was (share of all cores).
func Used(a, b Reading) (publisher, server, machineBusy float64) {
	publisher = b.Publisher - a.Publisher
	for pid, cpu := range b.Server {
		server += cpu - a.Server[pid]
	}
	return publisher, server, BusyBetween(a.Machine, b.Machine)
}
