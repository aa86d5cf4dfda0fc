package loadbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// batch is the outcome of one variant's turn: every user's requests.
type batch struct {
	lat     []time.Duration // latency of each completed request, failed ones included
	errors  int
	first   error         // the first error, for the report
	elapsed time.Duration // from the start until the last request ended
}

func (b *batch) merge(o batch) {
	b.lat = append(b.lat, o.lat...)
	b.errors += o.errors
	if b.first == nil {
		b.first = o.first
	}
}

// rate is the batch's requests per second.
func (b batch) rate() float64 {
	if b.elapsed <= 0 {
		return 0
	}
	return float64(len(b.lat)) / b.elapsed.Seconds()
}

// runBatch sends requests to url from every client at once, each looping
// until d has elapsed (no request starts after that; those under way
// finish) or ctx is done (requests cut short are not counted).
func runBatch(ctx context.Context, clients []*http.Client, url string, d time.Duration) batch {
	start := time.Now()
	deadline := start.Add(d)
	parts := make([]batch, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			p := &parts[i]
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t := time.Now()
				err := get(ctx, c, url)
				lat := time.Since(t)
				if ctx.Err() != nil {
					return
				}
				p.lat = append(p.lat, lat)
				if err != nil {
					p.errors++
					if p.first == nil {
						p.first = err
					}
				}
			}
		})
	}
	wg.Wait()
	all := batch{elapsed: time.Since(start)}
	for _, p := range parts {
		all.merge(p)
	}
	return all
}

// result is one variant's outcome in one mode, over every round.
type result struct {
	mode, variant string
	batch                   // every round's requests; elapsed summed
	rates         []float64 // each round's req/s, for the per-round ratios
}

func (r *result) add(b batch) {
	r.merge(b)
	r.elapsed += b.elapsed
	r.rates = append(r.rates, b.rate())
}

func (r *result) requests() int { return len(r.lat) }

// percentiles returns the p50 and p99 latencies.
func (r *result) percentiles() (p50, p99 time.Duration) {
	d := slices.Clone(r.lat)
	slices.Sort(d)
	return percentile(d, 0.50), percentile(d, 0.99)
}

// percentile returns the nearest-rank percentile p of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// rotate returns list rotated left by k: round k starts with the k-th
// variant, so that each takes every place in turn.
func rotate(list []string, k int) []string {
	out := make([]string, len(list))
	for i := range list {
		out[i] = list[(i+k)%len(list)]
	}
	return out
}

// url is the path of a variant in a mode.
func (b *bench) url(mode, variant string) string {
	return b.baseURL + "/" + mode + "/" + variant
}

// measure runs, for each mode, a warm-up of every variant and then the
// interleaved rounds. It returns what was measured, and an error if the
// time budget stopped it.
func (b *bench) measure(ctx context.Context, out io.Writer) ([]*result, error) {
	var results []*result
	for _, mode := range b.s.modes {
		if ctx.Err() != nil {
			return results, fmt.Errorf("mode %s not measured: %w", mode, context.Cause(ctx))
		}
		fmt.Fprintf(out, "\n== %s: %v warm-up per variant, then %d rounds of %v per variant\n", mode, b.s.warmup, b.s.rounds, b.s.round)
		byVariant := map[string]*result{}
		for _, v := range b.s.variants {
			byVariant[v] = &result{mode: mode, variant: v}
			results = append(results, byVariant[v])
		}
		if b.s.warmup > 0 {
			for _, v := range b.s.variants {
				w := runBatch(ctx, b.clients[v], b.url(mode, v), b.s.warmup)
				if w.errors > 0 {
					fmt.Fprintf(out, "  warm-up %s: %d of %d requests failed; first: %v\n", v, w.errors, len(w.lat), w.first)
				}
			}
		}
		for round := range b.s.rounds {
			order := rotate(b.s.variants, round)
			batches := map[string]batch{}
			var parts []string
			for _, v := range order {
				bt := runBatch(ctx, b.clients[v], b.url(mode, v), b.s.round)
				if ctx.Err() != nil {
					return results, fmt.Errorf("%s round %d cut short: %w", mode, round+1, context.Cause(ctx))
				}
				batches[v] = bt
				d := slices.Clone(bt.lat)
				slices.Sort(d)
				parts = append(parts, fmt.Sprintf("%s %.0f req/s p50 %s", v, bt.rate(), ms(percentile(d, 0.5))))
			}
			// A round counts only whole, so that per-round ratios compare
			// the same round.
			for _, v := range b.s.variants {
				byVariant[v].add(batches[v])
			}
			line := fmt.Sprintf("  round %d/%d: %s", round+1, b.s.rounds, strings.Join(parts, ", "))
			if floor, ok := batches[variantFloor]; ok && floor.rate() > 0 {
				var ratios []string
				for _, v := range b.s.variants {
					if v != variantFloor {
						ratios = append(ratios, fmt.Sprintf("%s %.3f", v, batches[v].rate()/floor.rate()))
					}
				}
				if len(ratios) > 0 {
					line += "; ratio to floor: " + strings.Join(ratios, ", ")
				}
			}
			fmt.Fprintln(out, line)
			for _, v := range order {
				if bt := batches[v]; bt.errors > 0 {
					fmt.Fprintf(out, "  %s: %d of %d requests failed; first: %v\n", v, bt.errors, len(bt.lat), bt.first)
				}
			}
		}
	}
	return results, nil
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// describe is the line above the table: the server and the set-up.
func (b *bench) describe() string {
	cookies := "signed"
	if b.s.encrypt {
		cookies = "signed and encrypted"
	}
	return fmt.Sprintf("server %s; %d users per variant; %d rounds of %v per variant and mode; cookies %s",
		b.server.Short(), b.s.users, b.s.rounds, b.s.round, cookies)
}

// median returns the median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// writeTable prints the results as a markdown table. "ratio to floor" is
// the variant's req/s over the floor's in the same mode, over all rounds;
// "per round" is the median of the rounds' own ratios and their range,
// which a burst of load from elsewhere moves less.
func writeTable(out io.Writer, header string, results []*result) {
	fmt.Fprintln(out, header)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| mode | variant | requests | req/s | p50 ms | p99 ms | ratio to floor | per round: median (range) | goal | errors |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
	for _, r := range results {
		var floor *result
		for _, f := range results {
			if f.mode == r.mode && f.variant == variantFloor {
				floor = f
			}
		}
		ratio, perRound, goal := "-", "-", ""
		if floor != nil && floor.rate() > 0 && r.requests() > 0 {
			x := r.rate() / floor.rate()
			ratio = fmt.Sprintf("%.3f", x)
			if g, ok := goals[r.variant]; ok {
				verdict := "met"
				if x < g {
					verdict = "missed"
				}
				goal = fmt.Sprintf("≥ %.2f %s", g, verdict)
			}
			if r != floor {
				perRound = perRoundRatios(r, floor)
			}
		}
		reqs, rate, p50, p99 := "0", "-", "-", "-"
		if r.requests() > 0 {
			lo, hi := r.percentiles()
			reqs, rate = fmt.Sprint(r.requests()), fmt.Sprintf("%.0f", r.rate())
			p50, p99 = fmt.Sprintf("%.2f", float64(lo)/1e6), fmt.Sprintf("%.2f", float64(hi)/1e6)
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			r.mode, r.variant, reqs, rate, p50, p99, ratio, perRound, goal, r.errors)
	}
}

// perRoundRatios is the median and range of the ratios of r's req/s to
// base's, round by round, or "-".
func perRoundRatios(r, base *result) string {
	if len(r.rates) == 0 || len(r.rates) != len(base.rates) || slices.Contains(base.rates, 0) {
		return "-"
	}
	x := make([]float64, len(r.rates))
	for i, rate := range r.rates {
		x[i] = rate / base.rates[i]
	}
	slices.Sort(x)
	return fmt.Sprintf("%.3f (%.3f–%.3f)", median(x), x[0], x[len(x)-1])
}

// writePeerTable prints, for each peer measured, the ratio of the store's
// and the middleware's req/s to the peer's, in each mode, over all rounds
// and round by round, with the store's goal.
func writePeerTable(out io.Writer, results []*result, peers []Peer) {
	find := func(mode, variant string) *result {
		for _, r := range results {
			if r.mode == mode && r.variant == variant && r.requests() > 0 && r.rate() > 0 {
				return r
			}
		}
		return nil
	}
	var rows []string
	for _, p := range peers {
		for _, r := range results {
			if r.variant != variantStore && r.variant != variantMiddleware {
				continue
			}
			base := find(r.mode, p.Name)
			if base == nil || r.requests() == 0 {
				continue
			}
			x := r.rate() / base.rate()
			goal := ""
			if r.variant == variantStore && p.StoreGoal > 0 {
				verdict := "met"
				if x < p.StoreGoal {
					verdict = "missed"
				}
				goal = fmt.Sprintf("≥ %.2f %s", p.StoreGoal, verdict)
			}
			rows = append(rows, fmt.Sprintf("| %s | %s ÷ %s | %.3f | %s | %s |", r.mode, r.variant, p.Name, x, perRoundRatios(r, base), goal))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out)
	for _, p := range peers {
		fmt.Fprintf(out, "%s: %s\n", p.Name, p.About)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| mode | req/s ratio | over all rounds | per round: median (range) | goal |")
	fmt.Fprintln(out, "|---|---|---:|---:|---|")
	for _, row := range rows {
		fmt.Fprintln(out, row)
	}
}
