package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongostore/mongostore"
)

// op is one timed operation: it returns its own latency, so that it can
// prepare its inputs outside the timed part.
type op func(ctx context.Context, rng *rand.Rand) (time.Duration, error)

// latencies collects the outcome of many ops.
type latencies struct {
	d      []time.Duration
	errors int
	first  error // the first error, for the report
}

func (l *latencies) merge(o latencies) {
	l.d = append(l.d, o.d...)
	l.errors += o.errors
	if l.first == nil {
		l.first = o.first
	}
}

// stats summarises latencies.
type stats struct {
	n, errors int
	p50, p99  time.Duration
}

func (l latencies) stats() stats {
	s := stats{n: len(l.d), errors: l.errors}
	if len(l.d) == 0 {
		return s
	}
	d := slices.Clone(l.d)
	slices.Sort(d)
	s.p50, s.p99 = percentile(d, 0.50), percentile(d, 0.99)
	return s
}

// percentile returns the nearest-rank percentile p of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func (s stats) String() string {
	if s.n == 0 {
		return "no samples"
	}
	out := fmt.Sprintf("p50 %s p99 %s (%d ops", ms(s.p50), ms(s.p99), s.n)
	if s.errors > 0 {
		out += fmt.Sprintf(", %d errors", s.errors)
	}
	return out + ")"
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// runOps runs op from workers goroutines until count ops are done (count
// <= 0: no limit), until stop is closed or limit has elapsed (then no new op
// starts; those under way finish), or until ctx is done. Ops cut short by
// ctx are not counted.
func runOps(ctx context.Context, workers, count int, limit time.Duration, stop <-chan struct{}, o op) latencies {
	deadline := time.Now().Add(limit)
	var started atomic.Int64
	results := make([]latencies, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			res := &results[w]
			for {
				select {
				case <-stop:
					return
				default:
				}
				if count > 0 && started.Add(1) > int64(count) || time.Now().After(deadline) {
					return
				}
				d, err := o(ctx, rng)
				if ctx.Err() != nil {
					return
				}
				res.d = append(res.d, d)
				if err != nil {
					res.errors++
					if res.first == nil {
						res.first = err
					}
				}
			}
		})
	}
	wg.Wait()
	var all latencies
	for _, r := range results {
		all.merge(r)
	}
	return all
}

// errNotLoaded is a load that did not give back the real session.
var errNotLoaded = errors.New("real session did not load")

// storeLoad returns an op that loads a random real session with Store.New
// (not Get, whose registry caches the session per request).
func storeLoad(store *mongostore.Store, real []realSession) op {
	return func(ctx context.Context, rng *rand.Rand) (time.Duration, error) {
		s := real[rng.IntN(len(real))]
		return loadOnce(ctx, store, s)
	}
}

// loadOnce loads s and checks that it came back.
func loadOnce(ctx context.Context, store *mongostore.Store, s realSession) (time.Duration, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, requestURL, nil)
	if err != nil {
		return 0, err
	}
	r.AddCookie(s.cookie)
	start := time.Now()
	session, err := store.New(r, cookieName)
	d := time.Since(start)
	switch {
	case err != nil:
		return d, err
	case session.IsNew || session.Values["uid"] != s.uid:
		return d, errNotLoaded
	}
	return d, nil
}

// bareLoad returns an op that reads a random document of ids by _id with the
// bare driver: the floor under the store's load.
func bareLoad(coll *mongo.Collection, ids []any) op {
	return func(ctx context.Context, rng *rand.Rand) (time.Duration, error) {
		id := ids[rng.IntN(len(ids))]
		start := time.Now()
		_, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		return time.Since(start), err
	}
}

// measureIdle measures store loads and bare loads in interleaved rounds,
// alternating which goes first, because the machine is noisy. It takes at
// most s.phaseTimeout.
func measureIdle(ctx context.Context, s settings, store, bare op) (storeLat, bareLat latencies) {
	deadline := time.Now().Add(s.phaseTimeout)
	// Warm up the connection pool and the server's caches.
	warm := min(s.loads, 20*s.workers)
	runOps(ctx, s.workers, warm, s.phaseTimeout/10, nil, store)
	runOps(ctx, s.workers, warm, s.phaseTimeout/10, nil, bare)

	phases := 2 * s.rounds
	for p := range phases {
		if ctx.Err() != nil {
			break
		}
		// This phase's share of the time left.
		limit := max(time.Until(deadline)/time.Duration(phases-p), time.Millisecond)
		count := (s.loads + s.rounds - 1) / s.rounds
		storeFirst := (p/2)%2 == 0
		if (p%2 == 0) == storeFirst {
			storeLat.merge(runOps(ctx, s.workers, count, limit, nil, store))
		} else {
			bareLat.merge(runOps(ctx, s.workers, count, limit, nil, bare))
		}
	}
	return storeLat, bareLat
}
