// Package load is the benchmarks' load loop: workers running an op, interleaved rounds.
package load

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Op is one operation, by worker w; seq numbers a Run's operations from 0.
type Op func(ctx context.Context, w, seq int) error

// Batch is the outcome of one or more Runs.
type Batch struct {
	Lat     []time.Duration // latency of each completed op, failed ones included
	Errors  int
	First   error         // the first error, for the report
	Elapsed time.Duration // wall time, summed over the Runs added
	CPU     time.Duration // this process's user and system time, summed over the Runs added
	Heap    HeapAllocs    // what this process allocated, summed over the Runs added
	Machine MachineCPU    // the whole machine's CPU time (the server's too), summed over the Runs added
	Rates   []float64     // ops per second of each Run added
}

// Run runs op from workers goroutines until count ops started (<= 0: no limit), d passed,
// stop closed (nil: never) or ctx is done; ops under way finish, counted unless ctx cut them.
func Run(ctx context.Context, workers, count int, d time.Duration, stop <-chan struct{}, op Op) Batch {
	start, cpu, heap, machine := time.Now(), CPUTime(), ReadHeapAllocs(), ReadMachineCPU()
	var started atomic.Int64
	parts := make([]Batch, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			p := &parts[w]
			for ctx.Err() == nil && time.Since(start) < d {
				select {
				case <-stop:
					return
				default:
				}
				seq := int(started.Add(1)) - 1
				if count > 0 && seq >= count {
					return
				}
				t := time.Now()
				err := op(ctx, w, seq)
				lat := time.Since(t)
				if ctx.Err() != nil {
					return
				}
				p.Lat = append(p.Lat, lat)
				if err != nil {
					p.Errors, p.First = p.Errors+1, cmp.Or(p.First, err)
				}
			}
		})
	}
	wg.Wait()
	var all Batch
	for _, p := range parts {
		all.Add(p)
	}
	all.Elapsed, all.CPU, all.Rates = time.Since(start), CPUTime()-cpu, nil
	all.Heap, all.Machine = ReadHeapAllocs().Less(heap), ReadMachineCPU().Less(machine)
	return all
}

// HeapAllocs counts the heap allocations of this process, all goroutines'.
type HeapAllocs struct{ Bytes, Objects uint64 }

// ReadHeapAllocs reads the process's heap allocations so far (runtime/metrics:
// no stop of the world; counts are flushed per P, so exact to a few KB).
func ReadHeapAllocs() HeapAllocs {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return HeapAllocs{Bytes: s[0].Value.Uint64(), Objects: s[1].Value.Uint64()}
}

// Less returns the allocations made since before.
func (h HeapAllocs) Less(before HeapAllocs) HeapAllocs {
	return HeapAllocs{Bytes: h.Bytes - before.Bytes, Objects: h.Objects - before.Objects}
}

// CPUTime is the process's user and system time so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // cannot fail with RUSAGE_SELF
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Add adds the ops of o to b, and o's rate as one round's.
func (b *Batch) Add(o Batch) {
	b.Lat, b.First = append(b.Lat, o.Lat...), cmp.Or(b.First, o.First)
	b.Errors += o.Errors
	b.Elapsed += o.Elapsed
	b.CPU += o.CPU
	b.Heap.Bytes, b.Heap.Objects = b.Heap.Bytes+o.Heap.Bytes, b.Heap.Objects+o.Heap.Objects
	b.Machine.Busy, b.Machine.Total = b.Machine.Busy+o.Machine.Busy, b.Machine.Total+o.Machine.Total
	b.Rates = append(b.Rates, o.Rate())
}

// N is the number of ops.
func (b Batch) N() int { return len(b.Lat) }

// Rate is the ops per second.
func (b Batch) Rate() float64 {
	if b.Elapsed <= 0 {
		return 0
	}
	return float64(len(b.Lat)) / b.Elapsed.Seconds()
}

// CPUPerOp is the process's CPU time per op, in µs.
func (b Batch) CPUPerOp() float64 {
	if len(b.Lat) == 0 {
		return 0
	}
	return float64(b.CPU) / float64(time.Microsecond) / float64(len(b.Lat))
}

// AllocsPerOp is the process's heap allocations per op: objects and bytes.
func (b Batch) AllocsPerOp() (objects, bytes float64) {
	if len(b.Lat) == 0 {
		return 0, 0
	}
	n := float64(len(b.Lat))
	return float64(b.Heap.Objects) / n, float64(b.Heap.Bytes) / n
}

// MachinePerOp is the whole machine's busy CPU time per op, in µs, and the
// share of its CPU time that was busy; zeros where /proc/stat is not read.
func (b Batch) MachinePerOp() (busy, share float64) {
	if len(b.Lat) == 0 || b.Machine.Total == 0 {
		return 0, 0
	}
	return float64(b.Machine.Busy) / float64(time.Microsecond) / float64(len(b.Lat)), float64(b.Machine.Busy) / float64(b.Machine.Total)
}

// Percentile returns the nearest-rank percentile p of the latencies, or 0.
func (b Batch) Percentile(p float64) time.Duration {
	if len(b.Lat) == 0 {
		return 0
	}
	d := slices.Sorted(slices.Values(b.Lat))
	return d[max(0, min(int(p*float64(len(d))+0.999999)-1, len(d)-1))]
}

// P50P99 formats the median and 99th percentile in milliseconds: "1.20 / 3.40".
func (b Batch) P50P99() string {
	if b.N() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f", Ms(b.Percentile(0.5)), Ms(b.Percentile(0.99)))
}

// String summarises b: "p50/p99 1.20 / 3.40 ms (2000 ops, 1 errors; first: …)".
func (b Batch) String() string {
	s := fmt.Sprintf("p50/p99 %s ms (%d ops", b.P50P99(), b.N())
	if b.Errors > 0 {
		s += fmt.Sprintf(", %d errors; first: %v", b.Errors, b.First)
	}
	return s + ")"
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Rounds runs turn for each of names in rounds rounds, in balanced orders
// (see Order), each turn after a garbage collection, calling done (unless
// nil) after each round; it adds up each name's batches of whole rounds,
// and returns ctx's cause if it ended early.
func Rounds(ctx context.Context, rounds int, names []string, turn func(name string) Batch,
	done func(round int, order []string, got map[string]Batch)) (map[string]*Batch, error) {
	total := map[string]*Batch{}
	for _, n := range names {
		total[n] = &Batch{}
	}
	for r := range rounds {
		var order []string
		for _, i := range Order(r, len(names)) {
			order = append(order, names[i])
		}
		got := map[string]Batch{}
		for _, n := range order {
			runtime.GC() // the garbage of the turn before is not this turn's to collect
			if got[n] = turn(n); ctx.Err() != nil {
				return total, fmt.Errorf("round %d cut short: %w", r+1, context.Cause(ctx))
			}
		}
		for _, n := range names {
			total[n].Add(got[n])
		}
		if done != nil {
			done(r, order, got)
		}
	}
	return total, nil
}

// Order is round r's order of n turns: a Williams design, in which over n
// rounds (2n if n is odd) each turn comes right after each other one as
// often, so that what one leaves behind (a warm cache, the server's
// backlog) falls on every other alike: 0 1 3 2, 1 2 0 3, 2 3 1 0, 3 0 2 1.
// Only whole periods balance: run a multiple of n (2n) rounds.
func Order(r, n int) []int {
	row := make([]int, n)
	for i := range row { // 0, 1, n-1, 2, n-2, …
		v := (i + 1) / 2
		if i%2 == 0 && i > 0 {
			v = n - i/2
		}
		row[i] = (v + r) % n
	}
	if n%2 == 1 && (r/n)%2 == 1 {
		slices.Reverse(row)
	}
	return row
}

// PerRound is the median and range of the ratios of a's rate to base's,
// round by round: "0.950 (0.900–1.010)", or "-".
func PerRound(a, base *Batch) string {
	if len(a.Rates) == 0 || len(a.Rates) != len(base.Rates) || slices.Contains(base.Rates, 0) {
		return "-"
	}
	x := make([]float64, len(a.Rates))
	for i, r := range a.Rates {
		x[i] = r / base.Rates[i]
	}
	slices.Sort(x)
	n := len(x)
	return fmt.Sprintf("%.3f (%.3f–%.3f)", (x[(n-1)/2]+x[n/2])/2, x[0], x[n-1])
}
