package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongostore/mongostore"
)

// idleGCInterval is the GC interval of the stores under test: long enough
// that the background GC never sweeps during a run (it sweeps once when
// the store starts, on an empty collection). The tool sweeps itself with
// Store.DeleteExpired, timed.
const idleGCInterval = 1000 * time.Hour

// expiredShare is the share of all documents that are expired.
const expiredShare = 10 // percent

// result is the outcome of one size.
type result struct {
	n      int
	server string
	mode   string
	fill   time.Duration

	idle, bare stats

	ttl        bool          // expiry by the server's TTL job, not a sweep
	expiry     time.Duration // the sweep's duration, or how long after the fill the TTL job was done
	deleted    int64         // documents the sweep deleted, or the TTL job after the fill
	deletedPS  float64       // deleted per second; 0 if unknown
	during     stats         // loads while expired documents were being removed
	expiryNote string        // anything odd about the expiry

	lost    int  // live sessions lost
	checked bool // whether the lost sessions were counted

	list, endOthers stats  // Store.ListSessions and Store.EndOtherSessions, one owner at a time
	ownerPlan       string // how the server answers a listing: "index owner_1", "scan" or "unknown"

	err error
}

// runSize runs the whole benchmark for one collection size.
func runSize(ctx context.Context, db *mongo.Database, s settings, n int, out io.Writer) (res result) {
	res = result{n: n}
	coll := db.Collection(fmt.Sprintf("%ssessions_%d", s.collPrefix, n))
	if err := coll.Drop(ctx); err != nil {
		res.err = fmt.Errorf("drop %s: %w", coll.Name(), err)
		return res
	}
	if !s.keep {
		defer func() {
			// Drop even when the budget is spent, within a bound of its own.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := coll.Drop(dctx); err != nil {
				res.err = errors.Join(res.err, fmt.Errorf("drop %s: %w", coll.Name(), err))
			}
		}()
	}
	res.err = benchSize(ctx, coll, s, n, out, &res)
	if res.err != nil && ctx.Err() != nil {
		res.err = fmt.Errorf("%w (%w)", res.err, context.Cause(ctx))
	}
	return res
}

func benchSize(ctx context.Context, coll *mongo.Collection, s settings, n int, out io.Writer, res *result) error {
	hashKey := make([]byte, 32)
	_, _ = rand.Read(hashKey) // crypto/rand.Read never fails (Go 1.24+)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := mongostore.NewStore(ctx, coll, mongostore.Config{
		Expiry:     s.expiry,
		GCInterval: idleGCInterval,
		Logger:     quiet,
	}, hashKey)
	if errors.Is(err, mongostore.ErrTTLUnsupported) {
		return fmt.Errorf("new store: the server refuses TTL indexes: use -expiry auto or gc: %w", err)
	}
	if err != nil {
		return fmt.Errorf("new store: %w", err)
	}
	defer store.Close()
	mode := store.ExpiryMode()
	res.mode = mode.String()
	res.ttl = mode == mongostore.ExpiryTTL
	fmt.Fprintf(out, "  collection %s.%s, expiry mode %s\n", coll.Database().Name(), coll.Name(), res.mode)

	// 1. Fill.
	fillStart := time.Now()
	nReal := min(s.sessions, n-n*expiredShare/100)
	real, err := createRealSessions(ctx, store, nReal, s.workers)
	if err != nil {
		return fmt.Errorf("create real sessions: %w", err)
	}
	fmt.Fprintf(out, "  %d real sessions created through the store in %.1fs\n", nReal, time.Since(fillStart).Seconds())
	shape, err := learnShape(ctx, coll, real)
	if err != nil {
		return err
	}
	realIDs, err := allIDs(ctx, coll) // only the real sessions' documents exist yet
	if err != nil {
		return err
	}
	realMin := real[0].expiresAt
	for _, r := range real {
		if r.expiresAt.Before(realMin) {
			realMin = r.expiresAt
		}
	}
	// Live filler expires well before every real session, so that the two
	// can be told apart by expiry alone when counting what is left.
	ahead := time.Until(realMin)
	if ahead < 4*time.Minute {
		return fmt.Errorf("real sessions expire in %v: too soon to tell them from live filler", ahead)
	}
	plan := fillPlan{
		total:    n - nReal,
		expired:  n * expiredShare / 100,
		liveFrom: ahead / 4,
		liveTo:   ahead / 2,
	}
	fmt.Fprintf(out, "  real documents: %d bytes on average, expiry in field %q; inserting %d filler documents (%d expired)\n",
		shape.meanSize, shape.expiryField, plan.total, plan.expired)
	filler, err := insertFiller(ctx, coll, shape, plan, s.workers, out)
	if err != nil {
		return err
	}
	res.fill = time.Since(fillStart)
	fillEnd := time.Now()
	fmt.Fprintf(out, "  fill: %d documents in %.1fs (%.0f/s); filler documents %d bytes on average\n",
		n, res.fill.Seconds(), float64(n)/res.fill.Seconds(), filler.meanSize)

	load := storeLoad(store, real)
	// The floor reads the very documents the store loads: on a server
	// without a usable _id index (FerretDB v1 scans its table until the
	// first match), a document's position decides its cost.
	bare := bareLoad(coll, realIDs)
	idle := func() {
		l, b := measureIdle(ctx, s, load, bare)
		res.idle, res.bare = l.stats(), b.stats()
		reportErrors(out, "idle load", l)
		reportErrors(out, "bare load", b)
		fmt.Fprintf(out, "  idle: store load %s; bare FindOne %s; ratio p50 %s\n", res.idle, res.bare, ratio(res.idle.p50, res.bare.p50))
		if res.idle.n < s.loads || res.bare.n < s.loads {
			fmt.Fprintf(out, "  idle: fewer than %d loads each: stopped by -phase-timeout %v\n", s.loads, s.phaseTimeout)
		}
	}

	// 2. Expiry, with the idle measurement before a sweep, or after the
	// TTL job (which starts deleting during the fill) is done.
	if res.ttl {
		if err := waitTTL(ctx, coll, s, shape.expiryField, store, real, fillEnd, out, res); err != nil {
			return err
		}
		idle()
	} else {
		idle()
		if err := sweep(ctx, coll, s, shape.expiryField, store, real, int64(plan.expired), out, res); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}

	// 3. Lost sessions.
	lost, err := countLost(ctx, coll, s, shape.expiryField, store, real, filler, out)
	res.lost, res.checked = lost, err == nil
	if err != nil {
		return err
	}

	// 4. Owners (last: it ends sessions).
	return measureOwners(ctx, coll, store, real, out, res)
}

// measureOwners times, for each owner of real sessions in turn, a
// Store.ListSessions from one of its sessions and the Store.EndOtherSessions
// that ends the others, checking that each lists and ends what it should;
// and asks the server (explain) whether it answers a listing from the
// owner index.
func measureOwners(ctx context.Context, coll *mongo.Collection, store *mongostore.Store, real []realSession, out io.Writer, res *result) error {
	res.ownerPlan = ownerPlan(ctx, coll, real[0].owner)
	var list, end latencies
	for i := 0; i+sessionsPerOwner <= len(real); i += sessionsPerOwner {
		rs := real[i]
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, requestURL, nil)
		if err != nil {
			return err
		}
		r.AddCookie(rs.cookie)
		current, err := store.New(r, cookieName)
		if err != nil || current.IsNew {
			return fmt.Errorf("owners: load a session of %s: %v (new: %v)", rs.owner, err, current.IsNew)
		}
		start := time.Now()
		listed, err := store.ListSessions(ctx, rs.owner, current)
		list.d = append(list.d, time.Since(start))
		if err != nil {
			return fmt.Errorf("owners: list the sessions of %s: %w", rs.owner, err)
		}
		if len(listed) != sessionsPerOwner {
			return fmt.Errorf("owners: %d sessions listed for %s, want %d", len(listed), rs.owner, sessionsPerOwner)
		}
		start = time.Now()
		ended, err := store.EndOtherSessions(ctx, rs.owner, current)
		end.d = append(end.d, time.Since(start))
		if err != nil {
			return fmt.Errorf("owners: end the other sessions of %s: %w", rs.owner, err)
		}
		if ended != sessionsPerOwner-1 {
			return fmt.Errorf("owners: %d sessions of %s ended, want %d", ended, rs.owner, sessionsPerOwner-1)
		}
	}
	res.list, res.endOthers = list.stats(), end.stats()
	fmt.Fprintf(out, "  owners: %d owners of %d sessions each: ListSessions %s; EndOtherSessions %s; listing plan: %s\n",
		len(real)/sessionsPerOwner, sessionsPerOwner, res.list, res.endOthers, res.ownerPlan)
	return nil
}

// ownerPlan says how the server answers a listing of owner's sessions,
// from its explain of the same filter.
func ownerPlan(ctx context.Context, coll *mongo.Collection, owner string) string {
	var plan bson.Raw
	err := coll.Database().RunCommand(ctx, bson.D{{Key: "explain", Value: bson.D{
		{Key: "find", Value: coll.Name()},
		{Key: "filter", Value: bson.D{{Key: "owner", Value: owner}}},
	}}}).Decode(&plan)
	text := plan.String()
	switch {
	case err != nil:
		return "unknown"
	case strings.Contains(text, "owner_1") && strings.Contains(text, "expiresAt_1"):
		return "owner_1 and expiresAt_1"
	case strings.Contains(text, "owner_1"):
		return "index owner_1"
	case strings.Contains(text, "SCAN"):
		return "scan"
	}
	return "unknown"
}

// sweep times one Store.DeleteExpired while loads go on.
func sweep(ctx context.Context, coll *mongo.Collection, s settings, expiryField string, store *mongostore.Store, real []realSession, expected int64, out io.Writer, res *result) error {
	fmt.Fprintf(out, "  sweep: Store.DeleteExpired, loads going on\n")
	done := make(chan struct{})
	var deleted int64
	var err error
	start := time.Now()
	go func() {
		defer close(done)
		deleted, err = store.DeleteExpired(ctx)
		res.expiry = time.Since(start)
	}()
	during := runOps(ctx, s.workers, 0, s.timeout, done, storeLoad(store, real))
	<-done
	if err != nil {
		return fmt.Errorf("DeleteExpired after %.1fs and %d deletions: %w", time.Since(start).Seconds(), deleted, err)
	}
	res.deleted = deleted
	if res.expiry > 0 {
		res.deletedPS = float64(deleted) / res.expiry.Seconds()
	}
	res.during = during.stats()
	reportErrors(out, "load during sweep", during)
	if deleted != expected {
		res.expiryNote = fmt.Sprintf("deleted %d, expected %d", deleted, expected)
	}
	// Nothing that had expired when the sweep started may be left.
	left, err := coll.CountDocuments(ctx, bson.D{{Key: expiryField, Value: bson.D{{Key: "$lte", Value: start}}}})
	if err != nil {
		return fmt.Errorf("count expired documents left: %w", err)
	}
	if left > 0 {
		res.expiryNote = strings.TrimPrefix(res.expiryNote+fmt.Sprintf("; %d expired documents left", left), "; ")
	}
	fmt.Fprintf(out, "  sweep: %d deleted in %.2fs (%.0f/s), %d left; store load meanwhile %s, %s idle p50\n",
		deleted, res.expiry.Seconds(), res.deletedPS, left, res.during, ratio(res.during.p50, res.idle.p50))
	return nil
}

// waitTTL waits, with loads going on, until the server's TTL job has
// deleted every document that expired more than two TTL periods ago.
func waitTTL(ctx context.Context, coll *mongo.Collection, s settings, expiryField string, store *mongostore.Store, real []realSession, fillEnd time.Time, out io.Writer, res *result) error {
	fmt.Fprintf(out, "  ttl: waiting for the server's TTL job (period %v), loads going on\n", s.ttlPeriod)
	limit := s.phaseTimeout + 3*s.ttlPeriod
	poll := min(max(s.ttlPeriod/4, 100*time.Millisecond), 5*time.Second)

	done := make(chan struct{})
	var first, left int64 = -1, -1
	var firstAt time.Time
	var err error
	go func() {
		defer close(done)
		pctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			cutoff := time.Now().Add(-2 * s.ttlPeriod)
			n, cerr := coll.CountDocuments(pctx, bson.D{{Key: expiryField, Value: bson.D{{Key: "$lte", Value: cutoff}}}})
			if cerr != nil {
				err = cerr
				return
			}
			left = n
			if first < 0 {
				first, firstAt = left, time.Now()
			}
			if left == 0 {
				res.expiry = time.Since(fillEnd)
				return
			}
			select {
			case <-pctx.Done():
				err = pctx.Err()
				return
			case <-t.C:
			}
		}
	}()
	during := runOps(ctx, s.workers, 0, s.timeout, done, storeLoad(store, real))
	<-done
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && left != 0 {
			res.expiryNote = fmt.Sprintf("%d expired documents still there %v after the fill", left, time.Since(fillEnd).Round(time.Second))
			fmt.Fprintf(out, "  ttl: %s\n", res.expiryNote)
			return fmt.Errorf("the TTL job did not delete the expired documents within %v", limit)
		}
		return fmt.Errorf("count expired documents: %w", err)
	}
	res.deleted = first
	if first > 0 {
		res.deletedPS = float64(first) / time.Since(firstAt).Seconds()
	}
	res.during = during.stats()
	reportErrors(out, "load during TTL deletions", during)
	fmt.Fprintf(out, "  ttl: expired documents gone %.2fs after the fill (%d were left when the fill ended); store load meanwhile %s\n",
		res.expiry.Seconds(), first, res.during)
	return nil
}

// countLost loads every real session once and counts the live filler
// documents: all must still be there.
func countLost(ctx context.Context, coll *mongo.Collection, s settings, expiryField string, store *mongostore.Store, real []realSession, filler fillResult, out io.Writer) (int, error) {
	var next, failed atomic.Int64
	var mu sync.Mutex
	var first error
	err := parallel(ctx, s.workers, func(ctx context.Context) error {
		for {
			i := next.Add(1) - 1
			if i >= int64(len(real)) {
				return nil
			}
			if _, err := loadOnce(ctx, store, real[i]); err != nil {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				failed.Add(1)
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}
	})
	if err != nil {
		return 0, fmt.Errorf("load real sessions: %w", err)
	}
	now := time.Now()
	live, err := coll.CountDocuments(ctx, bson.D{{Key: expiryField, Value: bson.D{
		{Key: "$gt", Value: now},
		{Key: "$lte", Value: filler.maxLiveExpiry},
	}}})
	if err != nil {
		return 0, fmt.Errorf("count live filler: %w", err)
	}
	lostFiller := filler.live - live
	fmt.Fprintf(out, "  lost: %d of %d real sessions fail to load", failed.Load(), len(real))
	if first != nil {
		fmt.Fprintf(out, " (first: %v)", first)
	}
	fmt.Fprintf(out, "; %d of %d live filler documents missing\n", lostFiller, filler.live)
	return int(failed.Load() + lostFiller), nil
}

func reportErrors(out io.Writer, what string, l latencies) {
	if l.errors > 0 {
		fmt.Fprintf(out, "  %s: %d of %d failed; first: %v\n", what, l.errors, len(l.d), l.first)
	}
}

// ratio formats a/b.
func ratio(a, b time.Duration) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

// line is the one-line summary of a result.
func (r result) line() string {
	if r.err != nil && r.fill == 0 {
		return fmt.Sprintf("N=%d: error: %v", r.n, r.err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "N=%d server=%q mode=%s fill=%.1fs idle[%s] bare[%s] ratio=%s", r.n, r.server, r.mode, r.fill.Seconds(), r.idle, r.bare, ratio(r.idle.p50, r.bare.p50))
	if r.ttl {
		fmt.Fprintf(&b, " ttl-done=%.1fs-after-fill left-at-fill-end=%d (%.0f/s)", r.expiry.Seconds(), r.deleted, r.deletedPS)
	} else {
		fmt.Fprintf(&b, " sweep=%.2fs deleted=%d (%.0f/s)", r.expiry.Seconds(), r.deleted, r.deletedPS)
	}
	fmt.Fprintf(&b, " during-expiry[%s]", r.during)
	if r.checked {
		fmt.Fprintf(&b, " lost=%d", r.lost)
	}
	if r.list.n > 0 {
		fmt.Fprintf(&b, " list[%s] end-others[%s] owner-plan=%q", r.list, r.endOthers, r.ownerPlan)
	}
	if r.expiryNote != "" {
		fmt.Fprintf(&b, " note=%q", r.expiryNote)
	}
	if r.err != nil {
		fmt.Fprintf(&b, " error: %v", r.err)
	}
	return b.String()
}

// writeTable prints the results as a markdown table.
func writeTable(out io.Writer, results []result) {
	fmt.Fprintln(out, "| N | server | mode | fill s | load p50/p99 idle ms | bare p50/p99 ms | ratio p50 | expiry s | deleted/s | load p50/p99 during expiry ms | lost | list p50/p99 ms | end others p50/p99 ms | listing plan |")
	fmt.Fprintln(out, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range results {
		expiry, fill := "-", "-"
		switch {
		case r.expiry > 0 && r.ttl:
			expiry = fmt.Sprintf("%.2f ttl", r.expiry.Seconds())
		case r.expiry > 0:
			expiry = fmt.Sprintf("%.2f sweep", r.expiry.Seconds())
		}
		if r.fill > 0 {
			fill = fmt.Sprintf("%.1f", r.fill.Seconds())
		}
		deleted := "-"
		if r.deletedPS > 0 {
			deleted = fmt.Sprintf("%.0f", r.deletedPS)
		}
		lost := "-"
		if r.checked {
			lost = fmt.Sprint(r.lost)
		}
		if r.err != nil {
			lost += " (error: " + strings.ReplaceAll(r.err.Error(), "|", "/") + ")"
		}
		plan := r.ownerPlan
		if plan == "" {
			plan = "-"
		}
		fmt.Fprintf(out, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.n, r.server, r.mode, fill, pair(r.idle), pair(r.bare), ratio(r.idle.p50, r.bare.p50),
			expiry, deleted, pair(r.during), lost, pair(r.list), pair(r.endOthers), plan)
	}
}

// pair formats p50/p99 in milliseconds.
func pair(s stats) string {
	if s.n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f", float64(s.p50)/1e6, float64(s.p99)/1e6)
}
