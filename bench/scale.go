package main

// bench scale: does the store stay fast at 10k to 1M sessions while expired ones
// go? For each size N, on a fresh collection: -sessions real sessions, 5 per owner,
// filler up to N shaped like them, 10% expired; loads beside the bare FindOne({_id});
// expiry (TTL job or sweep) under load; no live session lost?; owners' listings.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongostore/mongostore/bench/internal/db"
	"github.com/mongostore/mongostore/bench/internal/lib"
	"github.com/mongostore/mongostore/bench/internal/load"
	"github.com/mongostore/mongostore/bench/internal/plan"
)

const sessionsPerOwner, expiredPercent, fillBatch = 5, 10, 1000 // fillBatch: documents per InsertMany

// owner is the owner of user i's session.
func owner(i int) string { return fmt.Sprintf("owner-%06d", i/sessionsPerOwner) }

// scaleRun is bench scale's flags.
type scaleRun struct {
	*common
	sizes                            []int
	sessions, loads, workers, rounds int
	ttlPeriod, phaseTimeout          time.Duration
	opTimeout                        time.Duration // the store's Config.Timeout
}

func scale(fs *flag.FlagSet, c *common) (func() string, func(context.Context, io.Writer) error) {
	s := &scaleRun{common: c}
	sizes := fs.String("n", "10k,100k", "collection sizes, comma-separated (k and m suffixes allowed)")
	fs.IntVar(&s.sessions, "sessions", 1000, "real sessions created through the store")
	fs.IntVar(&s.loads, "loads", 2000, "loads per measurement (store and bare each)")
	fs.IntVar(&s.workers, "workers", 4, "concurrent loads")
	fs.IntVar(&s.rounds, "rounds", 4, "interleaved store/bare rounds of the idle measurement")
	fs.DurationVar(&s.ttlPeriod, "ttl-period", time.Second, "period of the server's TTL job (MongoDB: 60s)")
	fs.DurationVar(&s.phaseTimeout, "phase-timeout", 2*time.Minute, "longest a measurement or the expiry may take")
	fs.DurationVar(&s.opTimeout, "op-timeout", 5*time.Second, "the store's Config.Timeout: longest one operation may take")
	check := func() string {
		for f := range strings.SplitSeq(*sizes, ",") {
			n, err := strconv.ParseFloat(strings.NewReplacer("k", "e3", "m", "e6").Replace(strings.ToLower(strings.TrimSpace(f))), 64)
			if err != nil || n < 1 || n > 1e8 || n != float64(int(n)) {
				return fmt.Sprintf("-n: bad size %q", f)
			}
			s.sizes = append(s.sizes, int(n))
		}
		if s.sessions < sessionsPerOwner || s.loads < 1 || s.workers < 1 || s.rounds < 1 || s.ttlPeriod <= 0 || s.phaseTimeout <= 0 || s.opTimeout <= 0 {
			return fmt.Sprintf("-sessions must be at least %d, -loads, -workers and -rounds at least 1, durations positive", sessionsPerOwner)
		}
		return ""
	}
	return check, s.run
}

// run benchmarks each size; it fails if one failed or lost sessions.
func (s *scaleRun) run(ctx context.Context, out io.Writer) (err error) {
	client, server, disconnect, err := db.Connect(ctx, s.uri, nil)
	if err != nil {
		return err
	}
	defer disconnect(ctx)
	fmt.Fprintf(out, "server: %s\n", server)
	var results []*result
	for _, n := range s.sizes {
		fmt.Fprintf(out, "\n== N=%d\n", n)
		res := &result{n: n, plan: "-", lost: -1}
		coll := client.Database(s.db).Collection(fmt.Sprintf("sessions_%d", n))
		if res.err = coll.Drop(ctx); res.err == nil {
			res.err = s.benchSize(ctx, coll, out, res)
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute) // drop even when the budget is spent
		res.err = errors.Join(res.err, coll.Drop(dctx))
		cancel()
		results = append(results, res)
		if res.err != nil {
			err = errors.Join(err, fmt.Errorf("N=%d: %w", n, res.err))
		} else if res.lost > 0 {
			err = errors.Join(err, fmt.Errorf("N=%d: %d live sessions lost", n, res.lost))
		}
	}
	fmt.Fprintln(out, "\n| N | server | mode | fill s | load p50/p99 idle ms | bare p50/p99 ms | ratio p50 | expiry s | deleted/s | load p50/p99 during expiry ms | lost | list p50/p99 ms | end others p50/p99 ms | listing plan |")
	fmt.Fprintln(out, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range results {
		lost := fmt.Sprint(r.lost) // -1: not counted
		if r.err != nil {
			lost += " (error: " + strings.ReplaceAll(r.err.Error(), "|", "/") + ")"
		}
		fmt.Fprintf(out, "| %d | %s | %s | %.1f | %s | %s | %s | %.2f %s | %.0f | %s | %s | %s | %s | %s |\n",
			r.n, server, r.mode, r.fill.Seconds(), r.idle.P50P99(), r.bare.P50P99(), ratio(r.idle, r.bare), r.expiry.Seconds(),
			map[string]string{"ttl": "ttl", "gc": "sweep"}[r.mode], r.deletedPS, r.during.P50P99(), lost, r.list.P50P99(), r.endOthr.P50P99(), r.plan)
	}
	return err
}

// result is the outcome of one size.
type result struct {
	n, lost                           int
	mode, plan                        string // plan: how the server answers a listing
	fill, expiry                      time.Duration
	deletedPS                         float64
	idle, bare, during, list, endOthr load.Batch // during: loads while expired documents go
	err                               error
}

// benchSize runs the benchmark of one size on coll.
func (s *scaleRun) benchSize(ctx context.Context, coll *mongo.Collection, out io.Writer, res *result) error {
	key := db.RandomBytes(32)
	opts := lib.Options{Expiry: "ttl", Logger: s.logger, Timeout: s.opTimeout}
	store, err := lib.Open(ctx, coll, opts, key)
	if res.mode = "ttl"; lib.TTLUnsupported(err) {
		// An ExpiryGC store makes the indexes; ExpiryNone: no sweep but the timed one.
		res.mode, opts.Expiry = "gc", "gc"
		if store, err = lib.Open(ctx, coll, opts, key); err == nil {
			store.Close()
			opts.Expiry = "none"
			store, err = lib.Open(ctx, coll, opts, key)
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  collection %s.%s, expiry %s\n", coll.Database().Name(), coll.Name(), res.mode)

	// 1. Fill: real sessions, then filler shaped like their documents.
	start := time.Now()
	nReal := min(s.sessions, res.n-res.n*expiredPercent/100)
	cookies := make([]*http.Cookie, nReal) // of user i, with fill's values, owned by owner(i)
	b := load.Run(ctx, s.workers, nReal, s.phaseTimeout, nil, func(ctx context.Context, _, i int) (err error) {
		cookies[i], err = store.Create(ctx, cookieName, func(session *sessions.Session) { fill(session, i) },
			owner(i), []string{"Firefox on Linux", "Safari on iPhone", "Chrome on Android", "Edge on Windows", "Safari on Mac"}[i%5], nil)
		return err
	})
	if b.Errors > 0 || b.N() < nReal {
		return fmt.Errorf("%d of %d real sessions created; first error: %v", b.N()-b.Errors, nReal, b.First)
	}
	docs, err := db.Read(ctx, coll, 0) // the real sessions' only
	if err != nil {
		return err
	}
	field, realMin := db.Latest(docs[0]) // the expiry, and the earliest of a real session
	ids := make([]bson.RawValue, len(docs))
	for i, doc := range docs {
		if key, t := db.Latest(doc); key != field {
			return fmt.Errorf("the store's documents keep their expiry in %q and %q", field, key)
		} else if t.Before(realMin) {
			realMin = t
		}
		ids[i] = doc.Lookup("_id")
	}
	templates := docs[:min(len(docs), 64)]
	// Live filler expires well before every real session: the two are told apart.
	ahead := time.Until(realMin)
	if ahead < 4*time.Minute {
		return fmt.Errorf("real sessions expire in %v: too soon to tell them from live filler", ahead)
	}
	total, expired := res.n-nReal, res.n*expiredPercent/100
	fmt.Fprintf(out, "  %d real sessions in %.1fs, documents of %d bytes; inserting %d filler documents (%d expired)\n",
		nReal, time.Since(start).Seconds(), len(templates[0]), total, expired)
	batches := (total + fillBatch - 1) / fillBatch
	b = load.Run(ctx, min(s.workers, 4), batches, s.timeout, nil, func(ctx context.Context, _, k int) error {
		docs := make([]any, 0, fillBatch)
		now := time.Now()
		for j := k * fillBatch; j < min(total, (k+1)*fillBatch); j++ {
			at := now.Add(ahead/4 + rand.N(ahead/4))
			if j*expired/total != (j+1)*expired/total { // exactly `expired`, evenly spread
				at = now.Add(-time.Minute - rand.N(59*time.Minute))
			}
			tmpl := templates[rand.IntN(len(templates))]
			_, tmplAt := db.Latest(tmpl)
			doc, err := db.Reshape(tmpl, func(t time.Time) any { return at.Add(t.Sub(tmplAt)).Truncate(time.Millisecond) })
			if err != nil {
				return err
			}
			docs = append(docs, doc)
		}
		_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		return err
	})
	if b.Errors > 0 || b.N() < batches {
		return fmt.Errorf("fill: %d of %d batches inserted; first error: %v", b.N()-b.Errors, batches, b.First)
	}
	res.fill = time.Since(start)
	fmt.Fprintf(out, "  fill: %d documents in %.1fs (%.0f/s)\n", res.n, res.fill.Seconds(), float64(res.n)/res.fill.Seconds())

	// 2. Loads, and expiry with loads going on: the TTL job, waited for
	// before the idle loads, or a sweep after them (the GC's command).
	loadOp := func(ctx context.Context, _, i int) error {
		i %= nReal
		session, err := store.Load(ctx, cookies[i])
		if err == nil && (session.IsNew || session.Values["uid"] != 100_000+i) {
			err = errors.New("a real session did not load")
		}
		return err
	}
	randomLoad := func(ctx context.Context, w, _ int) error { return loadOp(ctx, w, rand.IntN(nReal)) }
	bareOp := func(ctx context.Context, _, _ int) error {
		return coll.FindOne(ctx, bson.D{{Key: "_id", Value: ids[rand.IntN(len(ids))]}}).Err()
	}
	if res.mode == "ttl" {
		first, err := s.expire(ctx, randomLoad, res, func(ctx context.Context) (int64, error) { return s.waitTTL(ctx, coll, field) })
		if err != nil {
			return fmt.Errorf("expired documents (%d at first) still there %v after the fill: %w", first, res.expiry.Round(time.Second), err)
		}
		fmt.Fprintf(out, "  ttl: expired documents gone %.2fs after the fill (%d left when it ended; TTL job every %v); store load meanwhile %s\n",
			res.expiry.Seconds(), first, s.ttlPeriod, res.during)
	}
	s.measureIdle(ctx, randomLoad, bareOp, out, res)
	if res.mode == "gc" {
		deleted, err := s.expire(ctx, randomLoad, res, store.DeleteExpired)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  sweep (DeleteExpired): %d deleted (expected %d) in %.2fs (%.0f/s); store load meanwhile %s, p50 %s idle\n",
			deleted, expired, res.expiry.Seconds(), res.deletedPS, res.during, ratio(res.during, res.idle))
	}

	// 3. Lost sessions: every real one loads, every live filler is there.
	b = load.Run(ctx, s.workers, nReal, s.phaseTimeout, nil, loadOp)
	live, err := coll.CountDocuments(ctx, bson.D{{Key: field, Value: bson.D{{Key: "$gt", Value: time.Now()}, {Key: "$lt", Value: realMin}}}})
	if err != nil || b.N() < nReal {
		return fmt.Errorf("count lost sessions: %d of %d loaded, %v", b.N(), nReal, err)
	}
	res.lost = b.Errors + total - expired - int(live)
	fmt.Fprintf(out, "  lost: %d; the %d real sessions reloaded: %s; %d of %d live filler documents missing\n",
		res.lost, nReal, b, total-expired-int(live), total-expired)

	// 4. Owners, last: it ends sessions.
	return s.measureOwners(ctx, coll, store, cookies, out, res)
}

// measureIdle measures store and bare loads in interleaved rounds of
// -loads/-rounds each, within -phase-timeout, after a warm-up.
func (s *scaleRun) measureIdle(ctx context.Context, storeOp, bareOp load.Op, out io.Writer, res *result) {
	ops := map[string]load.Op{"store": storeOp, "bare": bareOp}
	deadline := time.Now().Add(s.phaseTimeout)
	for _, op := range ops {
		load.Run(ctx, s.workers, min(s.loads, 20*s.workers), s.phaseTimeout/10, nil, op)
	}
	left := 2 * s.rounds
	got, _ := load.Rounds(ctx, s.rounds, []string{"store", "bare"}, func(name string) load.Batch {
		left-- // this turn gets 1/(left+1) of the time left
		return load.Run(ctx, s.workers, (s.loads+s.rounds-1)/s.rounds, max(time.Until(deadline)/time.Duration(left+1), time.Millisecond), nil, ops[name])
	}, nil)
	res.idle, res.bare = *got["store"], *got["bare"]
	fmt.Fprintf(out, "  idle: store load %s; bare FindOne %s; ratio p50 %s\n", res.idle, res.bare, ratio(res.idle, res.bare))
}

// expire runs f, which deletes expired documents and says how many, with
// loads going on (res.during), and times it (res.expiry, res.deletedPS).
func (s *scaleRun) expire(ctx context.Context, loadOp load.Op, res *result, f func(context.Context) (int64, error)) (n int64, err error) {
	done, start := make(chan struct{}), time.Now()
	go func() {
		defer close(done)
		n, err = f(ctx)
		res.expiry = time.Since(start)
	}()
	res.during = load.Run(ctx, s.workers, 0, s.timeout, done, loadOp)
	<-done
	res.deletedPS = float64(n) / res.expiry.Seconds()
	return n, err
}

// waitTTL waits until the server's TTL job has deleted every document that
// expired two TTL periods ago, and returns how many there were at first.
func (s *scaleRun) waitTTL(ctx context.Context, coll *mongo.Collection, field string) (first int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.phaseTimeout+3*s.ttlPeriod)
	defer cancel()
	tick := time.NewTicker(min(max(s.ttlPeriod/4, 100*time.Millisecond), 5*time.Second))
	defer tick.Stop()
	for {
		left, err := coll.CountDocuments(ctx, bson.D{{Key: field, Value: bson.D{{Key: "$lte", Value: time.Now().Add(-2 * s.ttlPeriod)}}}})
		if first = max(first, left); err != nil || left == 0 { // the first count is the largest
			return first, err
		}
		<-tick.C
	}
}

// measureOwners times, owner by owner, ListSessions from one of its sessions,
// then EndOtherSessions; and asks the server (explain) how it lists.
func (s *scaleRun) measureOwners(ctx context.Context, coll *mongo.Collection, store *lib.Store, cookies []*http.Cookie, out io.Writer, res *result) error {
	currents := make([]*sessions.Session, len(cookies)/sessionsPerOwner)
	for k := range currents {
		var err error
		if currents[k], err = store.Load(ctx, cookies[k*sessionsPerOwner]); err != nil || currents[k].IsNew {
			return fmt.Errorf("owners: load a session: %v", err)
		}
	}
	each := func(f func(ctx context.Context, owner string, current *sessions.Session) (int64, error), want int64) load.Batch {
		return load.Run(ctx, 1, len(currents), s.phaseTimeout, nil, func(ctx context.Context, _, k int) error {
			n, err := f(ctx, owner(k*sessionsPerOwner), currents[k])
			if err == nil && n != want {
				err = fmt.Errorf("%d sessions, want %d", n, want)
			}
			return err
		})
	}
	res.list, res.endOthr = each(store.ListSessions, sessionsPerOwner), each(store.EndOtherSessions, sessionsPerOwner-1)
	explain, err := coll.Database().RunCommand(ctx, bson.D{{Key: "explain", Value: bson.D{
		{Key: "find", Value: coll.Name()}, {Key: "filter", Value: bson.D{{Key: "owner", Value: owner(0)}}},
	}}}).Raw()
	if res.plan = "unknown"; err == nil {
		res.plan = listingPlan(explain)
	}
	fmt.Fprintf(out, "  owners: %d of %d sessions each: ListSessions %s; EndOtherSessions %s; listing plan: %s\n",
		len(currents), sessionsPerOwner, res.list, res.endOthr, res.plan)
	if res.list.Errors+res.endOthr.Errors > 0 || res.endOthr.N() < len(currents) {
		return fmt.Errorf("owners: %v; %v", res.list.First, res.endOthr.First)
	}
	return nil
}

// listingPlan says how explain, of a listing, reads: "index owner_1",
// "scan", or what the plan reads.
func listingPlan(explain bson.Raw) string {
	switch p := plan.Read(explain); {
	case p.Uses("owner_1"):
		return "index owner_1"
	case p.Scan:
		return "scan"
	default:
		return p.String()
	}
}

// ratio formats the ratio of a's p50 to b's.
func ratio(a, b load.Batch) string {
	if a.N() == 0 || b.N() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a.Percentile(0.5))/float64(b.Percentile(0.5)))
}
