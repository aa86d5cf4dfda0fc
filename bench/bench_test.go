package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongostore/mongostore/bench/internal/db"
	"github.com/mongostore/mongostore/bench/internal/lib"
	"github.com/mongostore/mongostore/bench/internal/load"
)

// runOK runs bench with args and checks that it succeeds and prints want.
func runOK(t *testing.T, args []string, want ...string) {
	var out bytes.Buffer
	err := run(context.Background(), args, &out, io.Discard)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q", w)
		}
	}
}

// TestScale runs bench scale at a small size: nothing is lost. Its
// operations may take 30 s, not the store's default 5: without a MONGODB_URI
// the server is FerretDB v1 in this test's process, built with -race, where
// every listing of an owner's sessions scans the 2,000 documents (about
// 1.5 s) and EndOtherSessions lists twice.
func TestScale(t *testing.T) {
	runOK(t, []string{"scale", "-db", "mongostore_scale_test", "-n", "2000", "-sessions", "50", "-loads", "100",
		"-workers", "2", "-rounds", "2", "-phase-timeout", "90s", "-op-timeout", "30s", "-timeout", "4m"},
		"lost: 0; the 50 real sessions reloaded", "0 of 1750 live filler documents missing", "| 2000 |", "owners: 10 of 5 sessions each")
}

// TestFilters runs bench filters briefly: every filter matches every time.
func TestFilters(t *testing.T) {
	runOK(t, []string{"filters", "-db", "mongostore_filters_test", "-users", "2", "-docs", "5", "-rounds", "2", "-round", "300ms"},
		"| {_id} | ", "| {_id, rev} | ", "| {_id, rev, expiresAt > now} | ")
}

// TestListingPlan checks how bench scale names the plan of a listing, on
// each server's explain output.
func TestListingPlan(t *testing.T) {
	for _, tc := range []struct{ name, explain, want string }{
		{"MongoDB", `{"queryPlanner": {"winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "owner_1"}}}}`, "index owner_1"},
		{"MongoDB, index rejected", `{"queryPlanner": {"winningPlan": {"stage": "COLLSCAN"}, "rejectedPlans": [{"stage": "IXSCAN", "indexName": "owner_1"}]}}`, "scan"},
		{"DocumentDB", `{"queryPlanner": {"Plan": {"Node Type": "Bitmap Heap Scan", "Plans": [{"Node Type": "Bitmap Index Scan", "Index Name": "owner_1"}]}}}`, "index owner_1"},
		{"DocumentDB, no index", `{"queryPlanner": {"Plan": {"Node Type": "Seq Scan", "Relation Name": "documents_5196"}}}`, "scan"},
		{"FerretDB v1", `{"queryPlanner": {"Plan": ["id=2 parent=0 notused=0 detail=SCAN s_f60c4582"]}, "filterPushdown": true}`, "scan"},
		{"no collection", `{"queryPlanner": {"winningPlan": {"stage": "EOF"}}}`, "nothing to read (EOF: the collection does not exist)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw bson.Raw
			if err := bson.UnmarshalExtJSON([]byte(tc.explain), false, &raw); err != nil {
				t.Fatal(err)
			}
			if got := listingPlan(raw); got != tc.want {
				t.Errorf("listingPlan = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestHTTP runs bench http briefly, with a CPU profile (its requests
// labelled by variant): every request of every variant succeeds (run fails
// otherwise), both tables have their rows, and the profile is written.
func TestHTTP(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	runOK(t, []string{"http", "-db", "mongostore_loadbench_test", "-users", "2", "-rounds", "2", "-round", "150ms",
		"-warmup", "50ms", "-timeout", "2m", "-cpuprofile", profile},
		"| rw | floor | ", "| ro | middleware | ", "| rw | laziness | ", "| ro | store ÷ laziness | ", "mongo-driver v1.",
		"| CPU µs/req | beyond the floor's | machine CPU µs/req | busy | allocs/req | B/req |")
	if fi, err := os.Stat(profile); err != nil || fi.Size() == 0 {
		t.Errorf("no CPU profile: %v", err)
	}
}

// TestAllocsPerOp: a Run counts what its ops allocate, in every goroutine.
func TestAllocsPerOp(t *testing.T) {
	var sink [][]byte
	var mu sync.Mutex
	b := load.Run(context.Background(), 2, 1000, time.Minute, nil, func(context.Context, int, int) error {
		p := make([]byte, 4096)
		mu.Lock()
		sink = append(sink, p)
		mu.Unlock()
		return nil
	})
	objects, size := b.AllocsPerOp()
	if len(sink) != 1000 || objects < 1 || size < 4096 || size > 8192 {
		t.Errorf("%d ops: %.1f objects, %.0f bytes per op; want at least 1 and 4096, at most 8192 bytes", len(sink), objects, size)
	}
}

// TestOrder: load.Order's rounds are orders of every turn, and over its
// period each turn comes right after each other one equally often.
func TestOrder(t *testing.T) {
	for n := 1; n <= 7; n++ {
		period := n
		if n%2 == 1 {
			period = 2 * n
		}
		follows := map[[2]int]int{}
		for r := range period {
			row := load.Order(r, n)
			if sorted := slices.Sorted(slices.Values(row)); len(row) != n || sorted[0] != 0 || sorted[n-1] != n-1 || len(slices.Compact(sorted)) != n {
				t.Fatalf("n %d, round %d: %v is not an order of %d turns", n, r, row, n)
			}
			for i := 1; i < n; i++ {
				follows[[2]int{row[i-1], row[i]}]++
			}
		}
		if n > 1 && len(follows) != n*(n-1) {
			t.Errorf("n %d: %d of %d pairs ever follow each other: %v", n, len(follows), n*(n-1), follows)
		}
		for pair, k := range follows {
			if want := period / n; k != want {
				t.Errorf("n %d: %d comes right after %d %d times in %d rounds, want %d", n, pair[1], pair[0], k, period, want)
			}
		}
	}
}

// TestConc runs bench conc briefly: overlapping requests of one client,
// each setting a key of its own, all answered 200 and none lost.
func TestConc(t *testing.T) {
	runOK(t, []string{"conc", "-db", "mongostore_conc_test", "-trials", "10", "-overlap", "2", "-timeout", "2m"},
		"| 10 | 2 | 20 | 20 | 0 | 0 | 0 | 0 | ")
}

// TestMergeCounter: bench conc counts the store's merge records and their
// retries, and passes on the records its logger takes.
func TestMergeCounter(t *testing.T) {
	var m merges
	var buf bytes.Buffer
	logger := slog.New(mergeCounter{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}), &m}).With("store", "x")
	logger.Debug(mergedMsg, "retries", 2)
	logger.Debug(mergedMsg, slog.Int("retries", 0))
	logger.Debug("other", "retries", 5)
	logger.Warn("shown")
	if c, r := m.conflicts.Load(), m.retries.Load(); c != 2 || r != 2 {
		t.Errorf("conflicts %d, retries %d; want 2, 2", c, r)
	}
	if got := buf.String(); !strings.Contains(got, "msg=shown store=x") || strings.Contains(got, "DEBUG") {
		t.Errorf("logged %q; want the Warn record only", got)
	}
}

// The Go benchmarks (make bench) put the store beside the bare driver
// sending its commands (bench http's floor) on a copy of its document, as
// sub-benchmarks "store" and "driver"; "store-nullcodec" is the store with
// a codec that does nothing: the difference is the default codec's cost.

// env: a store with a session of fill's values, the floor with one user, their requests.
type env struct {
	store         *lib.Store
	floor         floor
	user          *floorUser
	req, floorReq *http.Request
}

// newEnv sets up an env with codec on $MONGODB_URI, or an embedded server.
func newEnv(b *testing.B, codec lib.Codec) *env {
	ctx, e, uri := context.Background(), &env{}, os.Getenv("MONGODB_URI")
	if uri == "" {
		embedded, stop, err := db.StartEmbedded(ctx)
		must(b, err)
		b.Cleanup(func() { _ = stop() })
		uri = embedded
	}
	client, _, disconnect, err := db.Connect(ctx, uri, nil)
	must(b, err)
	coll := client.Database("mongostore_gobench").Collection("bench_" + db.RandomHex(8))
	b.Cleanup(func() { _ = errors.Join(coll.Drop(ctx), disconnect(ctx)) })
	key, quiet := db.RandomBytes(32), slog.New(slog.DiscardHandler)
	e.store, err = lib.Open(ctx, coll, lib.Options{Expiry: "none", Codec: codec, Logger: quiet}, key)
	must(b, err)
	b.Cleanup(e.store.Close)
	cookie, err := e.store.Create(ctx, cookieName, func(s *sessions.Session) { fill(s, 0) }, "", "", nil)
	must(b, err)
	must(b, e.floor.record(ctx, uri, coll, quiet, key))
	users, err := e.floor.setUp(ctx, coll, 1, io.Discard)
	must(b, err)
	e.user, e.req, e.floorReq = users[0], lib.Request(ctx, cookie), lib.Request(ctx, &http.Cookie{Name: cookieName, Value: users[0].cookie})
	return e
}

// nullCodec returns the same bytes (the default codec's size) and values, every time.
type nullCodec struct {
	data   []byte
	values map[any]any
}

func (c nullCodec) Encode(map[any]any) ([]byte, error) { return c.data, nil }
func (c nullCodec) Decode([]byte) (map[any]any, error) { return c.values, nil }

// nullEnv is an env with a nullCodec made from e's store, of the default codec.
func (e *env) nullEnv(b *testing.B) *env {
	_, data, _ := e.floor.update.Lookup("$set", "data").BinaryOK() // an envelope byte, then the codec's
	_, s := e.load(b)
	return newEnv(b, nullCodec{make([]byte, max(len(data)-1, 0)), s.Values})
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Helper()
		b.Fatal(err)
	}
}

// load gets the session as a handler does, on a fresh copy of e.req (Get caches per request).
func (e *env) load(b *testing.B) (*http.Request, *sessions.Session) {
	r := e.req.WithContext(context.Background())
	session, err := e.store.Sessions().Get(r, cookieName)
	if err != nil || session.IsNew {
		b.Fatalf("Get: new %v, %v", session.IsNew, err)
	}
	return r, session
}

// saver loads the session and returns an op that changes and saves it.
func (e *env) saver(b *testing.B) func(*testing.B) {
	r, session := e.load(b)
	w := &writer{h: http.Header{}}
	return func(b *testing.B) {
		increment(session)
		clear(w.h)
		must(b, session.Save(r, w))
	}
}

// serve returns an op that serves h a copy of r and checks its status.
func serve(h http.Handler, r *http.Request) func(*testing.B) {
	w := &writer{h: http.Header{}}
	return func(b *testing.B) {
		clear(w.h)
		if h.ServeHTTP(w, r.WithContext(context.Background())); w.code > http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
}

// writer is a ResponseWriter that keeps the header and the last status, not the body.
type writer struct {
	h    http.Header
	code int
}

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(p []byte) (int, error) { return len(p), nil }
func (w *writer) WriteHeader(code int)        { w.code = code }

// subs runs sub-benchmarks called names, each looping over its op, and
// reports, beside the allocations, the process's CPU time (user and
// system: the driver's goroutines and the GC count too) per op.
func subs(b *testing.B, names []string, ops ...func(*testing.B)) {
	for i, op := range ops {
		b.Run(names[i], func(b *testing.B) {
			b.ReportAllocs()
			start := load.CPUTime()
			for b.Loop() {
				op(b)
			}
			b.ReportMetric(float64(load.CPUTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestTable: bench table pairs each store variant with its driver's, each
// the median of its rounds (Load: CPU 41 of 40, 41, 90; driver 30 of 20, 30, 90).
func TestTable(t *testing.T) {
	in := `BenchmarkLoad/store-2   300   1229864 ns/op   12602 B/op   153 allocs/op   41000 cpu-ns/op
BenchmarkLoad/driver-2  300   1159105 ns/op   7435 B/op    72 allocs/op    30000 cpu-ns/op
BenchmarkLoad/store-2   300   1229864 ns/op   12602 B/op   153 allocs/op   90000 cpu-ns/op
BenchmarkLoad/driver-2  300   1159105 ns/op   7435 B/op    72 allocs/op    20000 cpu-ns/op
BenchmarkLoad/store-2   300   1229864 ns/op   12602 B/op   153 allocs/op   40000 cpu-ns/op
BenchmarkLoad/driver-2  300   1159105 ns/op   7435 B/op    72 allocs/op    90000 cpu-ns/op
BenchmarkSave/store-2   300   1 ns/op   1 B/op   107 allocs/op   60000 cpu-ns/op
BenchmarkSave/driver-2  300   1 ns/op   1 B/op   94 allocs/op    50000 cpu-ns/op
BenchmarkMiddleware/ro/store-2  300  1 ns/op  1 B/op  155 allocs/op  50000 cpu-ns/op
BenchmarkMiddleware/ro/driver-2  300  1 ns/op  1 B/op  78 allocs/op  20000 cpu-ns/op
`
	var out bytes.Buffer
	if err := table(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| Load | store | 153 | 72 | +81 | 41 | 30 | +11 |", "| Middleware/ro | store | 155 | 78 | +77 | 50 | 20 | +30 |",
		"| Load+Save | store | 260 | 166 | +94 | 101 | 80 | +21 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// BenchmarkLoad: store.Get of a stored session by its cookie, against FindOne({_id}).
func BenchmarkLoad(b *testing.B) {
	e := newEnv(b, nil)
	null := e.nullEnv(b)
	subs(b, []string{"store", "store-nullcodec", "driver"}, func(b *testing.B) { e.load(b) }, func(b *testing.B) { null.load(b) },
		func(b *testing.B) { must(b, e.floor.find(context.Background(), e.user)) })
}

// BenchmarkSave: session.Save of a changed session, against the floor's FindOneAndUpdate.
func BenchmarkSave(b *testing.B) {
	e := newEnv(b, nil)
	subs(b, []string{"store", "store-nullcodec", "driver"}, e.saver(b), e.nullEnv(b).saver(b),
		func(b *testing.B) { must(b, e.floor.save(context.Background(), e.user)) })
}

// BenchmarkMiddleware serves bench http's handler in the store's middleware,
// read-only (ro) or changing the session (rw), against the floor's handler;
// "exclusive" is the middleware with mongostore.Exclusive (one command
// more: the load takes the session's lock, an update releases it).
func BenchmarkMiddleware(b *testing.B) {
	e := newEnv(b, nil)
	mw, ex, ss := e.store.Middleware(cookieName), e.store.ExclusiveMiddleware(cookieName), e.store.Sessions()
	subs(b, []string{"ro/store", "ro/exclusive", "ro/driver", "rw/store", "rw/exclusive", "rw/driver"},
		serve(mw(handle(ss, "ro", false)), e.req), serve(ex(handle(ss, "ro", false)), e.req), serve(e.floor.handler(false), e.floorReq),
		serve(mw(handle(ss, "rw", false)), e.req), serve(ex(handle(ss, "rw", false)), e.req), serve(e.floor.handler(true), e.floorReq))
}
