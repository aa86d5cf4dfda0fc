package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// bench table reads the output of the Go benchmarks (make bench) and
// prints, for each benchmark that has a store variant and a driver one,
// what the store costs beyond the bare driver sending the same commands:
// allocations (exact) and CPU (this process's user and system time, the
// cpu-ns/op metric) per operation.

// benchLine matches a benchmark's result: its name, variant and metrics.
var benchLine = regexp.MustCompile(`^Benchmark(\w+)/(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// benchResult is one variant's metrics, by unit.
type benchResult map[string]float64

// readBenchmarks returns the results of r's benchmark lines, by benchmark
// and variant, and the benchmarks in the order met. A variant run more than
// once (-count) gets the median of each metric.
func readBenchmarks(r io.Reader) (map[string]map[string]benchResult, []string, error) {
	runs, order := map[string]map[string][]benchResult{}, []string(nil)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name, variant, fields := m[1], m[2], strings.Fields(m[3])
		if prefix, v, ok := strings.Cut(variant, "/"); ok { // BenchmarkMiddleware/ro/store
			name, variant = name+"/"+prefix, v
		}
		res := benchResult{}
		for i := 0; i+1 < len(fields); i += 2 {
			if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
				res[fields[i+1]] = v
			}
		}
		if runs[name] == nil {
			runs[name] = map[string][]benchResult{}
			order = append(order, name)
		}
		runs[name][variant] = append(runs[name][variant], res)
	}
	results := map[string]map[string]benchResult{}
	for name, variants := range runs {
		results[name] = map[string]benchResult{}
		for v, rs := range variants {
			results[name][v] = median(rs)
		}
	}
	return results, order, sc.Err()
}

// median returns each metric's median over rs (of an even count, the
// mean of the middle two).
func median(rs []benchResult) benchResult {
	m := benchResult{}
	for unit := range rs[0] {
		xs := make([]float64, 0, len(rs))
		for _, r := range rs {
			xs = append(xs, r[unit])
		}
		slices.Sort(xs)
		m[unit] = (xs[(len(xs)-1)/2] + xs[len(xs)/2]) / 2
	}
	return m
}

// table prints the store-against-driver table of the benchmarks in r.
func table(r io.Reader, out io.Writer) error {
	results, order, err := readBenchmarks(r)
	if err != nil {
		return err
	}
	if sum := sumOf(results["Load"], results["Save"]); sum != nil { // the "load + save" (a rw request without the middleware)
		results["Load+Save"], order = sum, append(order, "Load+Save")
	}
	fmt.Fprintln(out, "| benchmark | variant | allocs/op | driver's | store's own | CPU µs/op | driver's | store's own |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|")
	rows := 0
	for _, name := range order {
		driver, ok := results[name]["driver"]
		if !ok {
			continue
		}
		variants := make([]string, 0, len(results[name]))
		for v := range results[name] {
			if v != "driver" {
				variants = append(variants, v)
			}
		}
		slices.Sort(variants)
		for _, v := range variants {
			s := results[name][v]
			cpu, dcpu := s["cpu-ns/op"]/1000, driver["cpu-ns/op"]/1000
			fmt.Fprintf(out, "| %s | %s | %.0f | %.0f | %+.0f | %.0f | %.0f | %+.0f |\n", name, v,
				s["allocs/op"], driver["allocs/op"], s["allocs/op"]-driver["allocs/op"], cpu, dcpu, cpu-dcpu)
			rows++
		}
	}
	if rows == 0 {
		return fmt.Errorf("%w: no benchmark with a driver variant in the input (run with -benchmem)", errUsage)
	}
	return nil
}

// sumOf returns the variants both a and b have, each with their metrics
// added, or nil if they share none.
func sumOf(a, b map[string]benchResult) map[string]benchResult {
	var sum map[string]benchResult
	for v, ra := range a {
		if rb, ok := b[v]; ok {
			if sum == nil {
				sum = map[string]benchResult{}
			}
			sum[v] = benchResult{}
			for unit, x := range ra {
				sum[v][unit] = x + rb[unit]
			}
		}
	}
	return sum
}
