package load

import (
	"testing"
	"time"
)

// TestParseStat: busy is all but idle and iowait, in /proc/stat's ticks.
func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		stat string
		want MachineCPU
	}{
		{"cpu  100 2 30 400 5 6 7 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\n", MachineCPU{Busy: 1450 * time.Millisecond, Total: 5500 * time.Millisecond}},
		{"cpu  1 2 3 4 5 6 7 8\n", MachineCPU{Busy: 270 * time.Millisecond, Total: 360 * time.Millisecond}},
		{"cpu  1 2 3\n", MachineCPU{}},
		{"cpu0 1 2 3 4 5 6 7 8\n", MachineCPU{}},
		{"cpu  1 2 x 4 5 6 7 8\n", MachineCPU{}},
		{"", MachineCPU{}},
	} {
		if got := parseStat([]byte(c.stat)); got != c.want {
			t.Errorf("parseStat(%q) = %+v, want %+v", c.stat, got, c.want)
		}
	}
	if m := ReadMachineCPU(); m.Total > 0 && (m.Busy <= 0 || m.Busy > m.Total) {
		t.Errorf("ReadMachineCPU() = %+v: busy not within total", m)
	}
}
