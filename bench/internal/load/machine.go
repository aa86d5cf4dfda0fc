package load

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// MachineCPU is CPU time of all the machine's CPUs: busy (all but idle and
// I/O wait) and in all.
type MachineCPU struct{ Busy, Total time.Duration }

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on Linux).
const userHZ = 100

// ReadMachineCPU reads the machine's CPU times so far from /proc/stat's
// first line; zeros where it cannot.
func ReadMachineCPU() MachineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}
	}
	return parseStat(b)
}

// parseStat reads the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal (guest time is within user's).
func parseStat(b []byte) MachineCPU {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := bytes.Fields(line)
	if len(fields) < 9 || string(fields[0]) != "cpu" {
		return MachineCPU{}
	}
	var m MachineCPU
	for i, f := range fields[1:9] {
		ticks, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil {
			return MachineCPU{}
		}
		d := time.Duration(ticks) * time.Second / userHZ
		m.Total += d
		if i != 3 && i != 4 { // idle, iowait
			m.Busy += d
		}
	}
	return m
}

// Less returns the CPU time since before.
func (m MachineCPU) Less(before MachineCPU) MachineCPU {
	return MachineCPU{Busy: m.Busy - before.Busy, Total: m.Total - before.Total}
}
