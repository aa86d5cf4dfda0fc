package main

// bench http: -users clients per variant, each with its own session, loop
// requests to an in-process server, read-write (rw) and read-only (ro), in
// interleaved rounds, through: floor, the bare driver sending the store's
// commands; store, Get and in rw a change and Save; middleware, the same
// in the store's middleware; laziness, laziness-coders/mongostore (laziness.go).
// It prints req/s, p50, p99, this process's CPU and heap allocations per
// request (client, server and store: all but the database's), the whole
// machine's CPU per request (the database's too) and how busy it was, and
// req/s ratios to the floor and to laziness.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongostore/mongostore/bench/internal/db"
	"github.com/mongostore/mongostore/bench/internal/lib"
	"github.com/mongostore/mongostore/bench/internal/load"
)

const (
	cookieName                             = "session"
	floorV, storeV, middlewareV, lazinessV = "floor", "store", "middleware", "laziness"
)

var (
	variants = []string{floorV, storeV, middlewareV, lazinessV}
	// The goals: req/s ratios to the floor's, and to laziness's.
	floorGoals    = map[string]float64{storeV: 0.95, middlewareV: 0.93}
	lazinessGoals = map[string]float64{storeV: 1.10}
)

// httpRun is a run of bench http: its flags, and what it sets up.
type httpRun struct {
	*common
	users, rounds int
	round, warmup time.Duration
	modes         []string
	cpuProfile    string
	lazyAbout     string // what laziness is, once opened
	baseURL       string
	clients       map[string][]*http.Client // each variant's users
	closers       []func(context.Context) error
	store         *lib.Store
	lazy          sessions.Store
	floor         floor
	measured      map[string]map[string]*load.Batch // by mode and variant
}

func httpBench(fs *flag.FlagSet, c *common) (func() string, func(context.Context, io.Writer) error) {
	h := &httpRun{common: c, clients: map[string][]*http.Client{}, measured: map[string]map[string]*load.Batch{}}
	fs.IntVar(&h.users, "users", 8, "concurrent users per variant")
	fs.IntVar(&h.rounds, "rounds", 4, "interleaved rounds per mode (a multiple of 4 balances their orders)")
	fs.DurationVar(&h.round, "round", 3*time.Second, "length of one variant's turn in a round")
	fs.DurationVar(&h.warmup, "warmup", time.Second, "unmeasured requests per variant before a mode's rounds")
	modes := fs.String("modes", "rw,ro", "modes, comma-separated: rw, ro")
	fs.StringVar(&h.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	check := func() string {
		h.modes = strings.Split(*modes, ",")
		switch planned := time.Duration(len(h.modes)*len(variants)) * (h.warmup + time.Duration(h.rounds)*h.round); {
		case slices.ContainsFunc(h.modes, func(m string) bool { return m != "rw" && m != "ro" }):
			return "-modes takes rw, ro or both"
		case h.users < 1 || h.users > 10_000 || h.rounds < 1 || h.round <= 0 || h.warmup < 0:
			return "-users must be 1 to 10000, -rounds at least 1, -round positive, -warmup not negative"
		case planned >= h.timeout:
			return fmt.Sprintf("-timeout %v is spent before the rounds end (%v)", h.timeout, planned)
		}
		return ""
	}
	return check, h.run
}

// run sets up, measures every mode and prints the tables.
func (h *httpRun) run(ctx context.Context, out io.Writer) (err error) {
	if h.cpuProfile != "" {
		f, perr := os.Create(h.cpuProfile)
		if perr == nil {
			perr = pprof.StartCPUProfile(f)
		}
		if perr != nil {
			return fmt.Errorf("-cpuprofile: %w", perr)
		}
		defer func() { pprof.StopCPUProfile(); err = errors.Join(err, f.Close()) }()
	}
	defer func() { // release what setUp set up, last first, even when ctx is done
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, c := range slices.Backward(h.closers) {
			err = errors.Join(err, c(ctx))
		}
	}()
	if err := h.setUp(ctx, out); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	for _, mode := range h.modes {
		if h.measured[mode], err = h.measure(ctx, mode, out); err != nil {
			break
		}
	}
	return errors.Join(err, h.writeTables(out))
}

// setUp connects, opens the stores, records the store's update, starts the
// server and logs every user in; h.closers release it all, even on error.
func (h *httpRun) setUp(ctx context.Context, out io.Writer) error {
	client, server, disconnect, err := db.Connect(ctx, h.uri, nil)
	if err != nil {
		return err
	}
	h.closers = append(h.closers, disconnect)
	coll := client.Database(h.db).Collection("loadbench_" + db.RandomHex(8))
	lazyColl := client.Database(h.db).Collection(coll.Name() + "_laziness")
	h.closers = append(h.closers, func(ctx context.Context) error { return errors.Join(coll.Drop(ctx), lazyColl.Drop(ctx)) })
	key := db.RandomBytes(32)
	if h.store, err = lib.Open(ctx, coll, lib.Options{Expiry: "auto", Logger: h.logger}, key); err != nil {
		return err
	}
	h.closers = append(h.closers, func(context.Context) error { h.store.Close(); return nil })
	if err := h.floor.record(ctx, h.uri, coll, h.logger, key); err != nil {
		return err
	}
	if h.lazy, h.lazyAbout, disconnect, err = openLaziness(ctx, h.uri, lazyColl, key, h.floor.cookie.MaxAge, out); err != nil {
		return err
	}
	h.closers = append(h.closers, disconnect)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h.routes(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = srv.Serve(ln) }()
	h.closers = append(h.closers, srv.Shutdown)
	h.baseURL = "http://" + ln.Addr().String()
	base, _ := url.Parse(h.baseURL)
	tr := &http.Transport{MaxIdleConnsPerHost: h.users + 4, IdleConnTimeout: 90 * time.Second, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext}
	for _, v := range variants {
		for i := range h.users {
			jar, _ := cookiejar.New(nil) // never fails without options
			h.clients[v] = append(h.clients[v], &http.Client{Transport: tr, Jar: jar})
			if v == floorV {
				continue
			}
			// The user's session, made as a login would.
			if err := get(ctx, h.clients[v][i], h.baseURL+"/login/"+v+"?u="+strconv.Itoa(i)); err != nil || len(jar.Cookies(base)) == 0 {
				return fmt.Errorf("log user %d in (%s): no cookie (%v)", i, v, err)
			}
		}
	}
	fmt.Fprintf(out, "server %s; collection %s.%s; http %s; %d users per variant\n", server, h.db, coll.Name(), h.baseURL, h.users)
	users, err := h.floor.setUp(ctx, coll, h.users, out)
	for i, u := range users {
		h.clients[floorV][i].Jar.SetCookies(base, []*http.Cookie{{Name: cookieName, Value: u.cookie, Path: "/"}})
	}
	return err
}

// routes: /login/{variant}?u=N makes user N's session; /{rw,ro}/{variant} are measured.
func (h *httpRun) routes() http.Handler {
	mux := http.NewServeMux()
	mw := h.store.Middleware(cookieName)
	for _, kind := range []string{"login", "ro", "rw"} {
		mux.Handle("GET /"+kind+"/"+middlewareV, mw(handle(h.store.Sessions(), kind, false)))
		mux.Handle("GET /"+kind+"/"+storeV, handle(h.store.Sessions(), kind, true))
		mux.Handle("GET /"+kind+"/"+lazinessV, handle(h.lazy, kind, true))
	}
	mux.Handle("GET /ro/floor", h.floor.handler(false))
	mux.Handle("GET /rw/floor", h.floor.handler(true))
	if h.cpuProfile == "" {
		return mux
	}
	// Label the samples of each request's handler, and of the goroutines it
	// starts, with its variant (-tagfocus variant=store). The clients' are
	// not: the variants' requests share the transport's connections.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.Do(r.Context(), pprof.Labels("variant", path.Base(r.URL.Path)), func(context.Context) { mux.ServeHTTP(w, r) })
	})
}

// handle is a store variant's handler: Get; in a login fill, else check
// and, in rw mode, change the session; Save it if it changed and save.
func handle(store sessions.Store, kind string, save bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		session, err := store.Get(r, cookieName)
		switch {
		case err != nil:
		case kind == "login":
			i, _ := strconv.Atoi(r.URL.Query().Get("u"))
			fill(session, i)
		case session.IsNew || session.Values["uid"] == nil:
			err = errors.New("session not loaded")
		case kind == "rw":
			increment(session)
		}
		if err == nil && save && kind != "ro" {
			err = session.Save(r, w)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeOK(w)
	})
}

// increment counts one more visit (both stores' codecs give back an int).
func increment(session *sessions.Session) {
	n, _ := session.Values["counter"].(int)
	session.Values["counter"] = n + 1
}

func writeOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// get sends a GET with c and reads the response; all but 200 is an error.
func get(ctx context.Context, c *http.Client, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil) // our URLs parse
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body[:min(len(body), 300)])))
	}
	return err
}

// measure runs a mode's warm-up and rounds, printing a line per round.
func (h *httpRun) measure(ctx context.Context, mode string, out io.Writer) (map[string]*load.Batch, error) {
	fmt.Fprintf(out, "\n== %s: %v warm-up per variant, then %d rounds of %v per variant\n", mode, h.warmup, h.rounds, h.round)
	turn := func(d time.Duration) func(string) load.Batch {
		return func(v string) load.Batch {
			url := h.baseURL + "/" + mode + "/" + v
			return load.Run(ctx, h.users, 0, d, nil, func(ctx context.Context, w, _ int) error { return get(ctx, h.clients[v][w], url) })
		}
	}
	for _, v := range variants {
		turn(h.warmup)(v)
	}
	return load.Rounds(ctx, h.rounds, variants, turn(h.round), func(r int, order []string, got map[string]load.Batch) {
		line := fmt.Sprintf("  round %d/%d:", r+1, h.rounds)
		for _, v := range order {
			b := got[v]
			machine, busy := b.MachinePerOp()
			line += fmt.Sprintf(" %s %.0f req/s p50 %.2fms cpu %.0fµs machine %.0fµs %.0f%% (%.3f of the floor);", v, b.Rate(), load.Ms(b.Percentile(0.5)),
				b.CPUPerOp(), machine, 100*busy, b.Rate()/got[floorV].Rate())
		}
		fmt.Fprintln(out, line)
	})
}

// writeTables prints the tables (per round: less moved by bursts) and the requests' errors.
func (h *httpRun) writeTables(out io.Writer) (err error) {
	fmt.Fprintf(out, "\n%d users per variant; %d rounds of %v per variant and mode\n\n", h.users, h.rounds, h.round)
	fmt.Fprintln(out, "| mode | variant | requests | req/s | p50 ms | p99 ms | CPU µs/req | beyond the floor's | machine CPU µs/req | busy | allocs/req | B/req | ratio to floor | per round: median (range) | goal | errors |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
	var lazyRows []string
	for _, mode := range h.modes {
		for _, v := range variants {
			if r := h.measured[mode][v]; r != nil {
				if r.Errors > 0 {
					err = errors.Join(err, fmt.Errorf("%s %s: %d of %d requests failed; first: %w", mode, v, r.Errors, r.N(), r.First))
				}
				objects, bytes := r.AllocsPerOp()
				machine, busy := r.MachinePerOp()
				fmt.Fprintf(out, "| %s | %s | %d | %.0f | %.2f | %.2f | %.1f | %+.1f | %.0f | %.0f%% | %.0f | %.0f | %s | %d |\n", mode, v, r.N(), r.Rate(), load.Ms(r.Percentile(0.5)),
					load.Ms(r.Percentile(0.99)), r.CPUPerOp(), r.CPUPerOp()-h.measured[mode][floorV].CPUPerOp(), machine, 100*busy, objects, bytes,
					ratios(r, h.measured[mode][floorV], v != floorV, floorGoals[v]), r.Errors)
				if v == storeV || v == middlewareV {
					lazyRows = append(lazyRows, fmt.Sprintf("| %s | %s ÷ laziness | %s |", mode, v, ratios(r, h.measured[mode][lazinessV], true, lazinessGoals[v])))
				}
			}
		}
	}
	fmt.Fprintf(out, "\nlaziness: %s\n\n", h.lazyAbout)
	fmt.Fprintln(out, "| mode | req/s ratio | over all rounds | per round: median (range) | goal |")
	fmt.Fprintln(out, "|---|---|---:|---:|---|")
	fmt.Fprintln(out, strings.Join(lazyRows, "\n"))
	return err
}

// ratios formats the cells of r's req/s over base's: over all rounds, per
// round (if perRound), and whether it meets goal (if positive).
func ratios(r, base *load.Batch, perRound bool, goal float64) string {
	if base == nil || base.Rate() == 0 || r.N() == 0 {
		return "- | - | "
	}
	x, rounds, verdict := r.Rate()/base.Rate(), "-", ""
	if perRound {
		rounds = load.PerRound(r, base)
	}
	if goal > 0 {
		verdict = fmt.Sprintf("≥ %.2f %s", goal, map[bool]string{true: "met", false: "missed"}[x >= goal])
	}
	return fmt.Sprintf("%.3f | %s | %s", x, rounds, verdict)
}

// floor is the bare driver sending the least a store sends, find and
// updateOne by _id (no conflict detection), its documents and update
// copies of the store's (random bytes of the same sizes, dates moved).
type floor struct {
	coll     *mongo.Collection
	update   bson.Raw    // of the store's save
	sentAt   time.Time   // when the store sent it
	cookie   http.Cookie // the store's
	cookieOp sessions.Options
	users    atomic.Pointer[map[string]*floorUser] // by cookie value
}

// floorUser is the floor's session of one user.
type floorUser struct {
	id      any       // its document's _id
	cookie  string    // its cookie's value
	updates [2]bson.D // the update, alternately, with dates as offsets
	saves   atomic.Uint32
}

// offset is a date of the floor's update: the time of the request plus it.
type offset time.Duration

// record creates and changes a session through a store on a client with a
// command monitor, and keeps the cookie and the update of the save (an
// update command, or findAndModify on FerretDB v1).
func (f *floor) record(ctx context.Context, uri string, coll *mongo.Collection, logger *slog.Logger, key []byte) error {
	// The monitor runs in the goroutine that sends the command: Create's.
	client, _, disconnect, err := db.Connect(ctx, uri, &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "findAndModify":
			if u, ok := e.Command.Lookup("update").DocumentOK(); ok {
				f.update, f.sentAt = u, time.Now()
			}
		case "update":
			if u, ok := e.Command.Lookup("updates", "0", "u").DocumentOK(); ok {
				f.update, f.sentAt = u, time.Now()
			}
		}
	}})
	if err != nil {
		return err
	}
	defer disconnect(ctx)
	store, err := lib.Open(ctx, client.Database(coll.Database().Name()).Collection(coll.Name()), lib.Options{Expiry: "auto", Logger: logger}, key)
	if err != nil {
		return err
	}
	defer store.Close()
	cookie, err := store.Create(ctx, cookieName, func(s *sessions.Session) { fill(s, 0) }, "", "", increment)
	if err != nil || f.update == nil {
		return fmt.Errorf("record the store's save: %v", err)
	}
	f.cookie = *cookie
	f.cookieOp = sessions.Options{Path: cookie.Path, MaxAge: cookie.MaxAge, Secure: cookie.Secure, HttpOnly: cookie.HttpOnly, SameSite: cookie.SameSite}
	return nil
}

// setUp inserts n copies of the store's documents, for n users.
func (f *floor) setUp(ctx context.Context, coll *mongo.Collection, n int, out io.Writer) ([]*floorUser, error) {
	f.coll = coll
	readAt := time.Now()
	templates, err := db.Read(ctx, coll, 64)
	if err != nil {
		return nil, err
	}
	users, list, docs := map[string]*floorUser{}, make([]*floorUser, n), make([]any, n)
	for i := range n {
		doc, err := db.Reshape(templates[i%len(templates)], func(t time.Time) any { return time.Now().Add(t.Sub(readAt)) })
		if err != nil {
			return nil, err
		}
		u := &floorUser{id: doc[0].Value /* the server sends _id first */, cookie: db.RandomHex(len(f.cookie.Value))}
		for k := range u.updates {
			if u.updates[k], err = db.Reshape(f.update, func(t time.Time) any { return offset(t.Sub(f.sentAt).Round(time.Second)) }); err != nil {
				return nil, err
			}
		}
		users[u.cookie], list[i], docs[i] = u, u, doc
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		return nil, fmt.Errorf("insert the floor's documents: %w", err)
	}
	f.users.Store(&users)
	fmt.Fprintf(out, "floor: %d documents copied from %d of the store's; the store's update %s\n", len(docs), len(templates), f.update)
	return list, nil
}

// handler is the floor's: the store's load of the cookie's document and,
// in rw, its save, and the cookie.
func (f *floor) handler(rw bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var u *floorUser
		if c, err := r.Cookie(cookieName); err == nil && f.users.Load() != nil {
			u = (*f.users.Load())[c.Value]
		}
		err := errors.New("no session")
		if u != nil {
			if err = f.find(r.Context(), u); err == nil && rw {
				err = f.save(r.Context(), u)
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if rw {
			http.SetCookie(w, sessions.NewCookie(cookieName, u.cookie, &f.cookieOp))
		}
		writeOK(w)
	}
}

// find is the store's load: FindOne({_id}).
func (f *floor) find(ctx context.Context, u *floorUser) error {
	return f.coll.FindOne(ctx, bson.D{{Key: "_id", Value: u.id}}).Err()
}

// save is the least a save can be: UpdateOne({_id}, the store's update).
func (f *floor) save(ctx context.Context, u *floorUser) error {
	_, err := f.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: u.id}}, stamp(u.updates[u.saves.Add(1)%2], time.Now()))
	return err
}

// stamp copies update with each offset made a date from now.
func stamp(update bson.D, now time.Time) bson.D {
	out := make(bson.D, len(update))
	for i, e := range update {
		switch v := e.Value.(type) {
		case offset:
			e.Value = bson.NewDateTimeFromTime(now.Add(time.Duration(v)))
		case bson.D:
			e.Value = stamp(v, now)
		}
		out[i] = e
	}
	return out
}
