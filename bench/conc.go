package main

// bench conc: do overlapping requests of one client lose updates? In each of
// -trials trials, -overlap requests with the same cookie go at once through
// the store's middleware to an in-process server; each handler waits until
// all have loaded the session (a barrier: every trial is a conflict), then
// sets a key of its own, "k<trial>-<i>" = i, and answers. After each trial
// the session is loaded again: every key a 200 response set, in this trial
// or an earlier one, that is missing or changed is a lost update (counted
// once). Conflicts and retries are the store's Debug records of saves that
// met concurrent ones. The run fails on a lost update or a status but 200.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mongostore/mongostore/bench/internal/db"
	"github.com/mongostore/mongostore/bench/internal/lib"
	"github.com/mongostore/mongostore/bench/internal/load"
)

// barrierWait bounds a handler's wait for the others of its trial (one failed to arrive).
const barrierWait = 10 * time.Second

// concRun is a run of bench conc.
type concRun struct {
	*common
	trials, overlap int
	store           *lib.Store
	barriers        []*barrier // one per trial
	baseURL         string
	merges          merges
}

func conc(fs *flag.FlagSet, c *common) (func() string, func(context.Context, io.Writer) error) {
	h := &concRun{common: c}
	fs.IntVar(&h.trials, "trials", 100, "trials")
	fs.IntVar(&h.overlap, "overlap", 2, "overlapping requests per trial, each setting a key of its own")
	return func() string {
		if h.trials < 1 || h.trials > 1_000_000 || h.overlap < 2 || h.overlap > 1000 {
			return "-trials must be 1 to 1000000, -overlap 2 to 1000"
		}
		return ""
	}, h.run
}

// concResult is what a run of bench conc counts.
type concResult struct {
	statuses  map[int]int // by HTTP status; 0: no response
	lost      int
	firstLost string
	mu        sync.Mutex // guards firstErr
	firstErr  error      // of a request that got no response
	perTrial  load.Batch
}

// run sets up, runs the trials and prints the table; it fails on lost
// updates or a status but 200.
func (h *concRun) run(ctx context.Context, out io.Writer) (err error) {
	client, server, disconnect, err := db.Connect(ctx, h.uri, nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, disconnect(ctx)) }()
	coll := client.Database(h.db).Collection("conc_" + db.RandomHex(8))
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute) // drop even when the budget is spent
		defer cancel()
		err = errors.Join(err, coll.Drop(dctx))
	}()
	logger := slog.New(mergeCounter{h.logger.Handler(), &h.merges})
	if h.store, err = lib.Open(ctx, coll, lib.Options{Expiry: "auto", Logger: logger}, db.RandomBytes(32)); err != nil {
		return err
	}
	defer h.store.Close()
	h.barriers = make([]*barrier, h.trials)
	for t := range h.barriers {
		h.barriers[t] = &barrier{left: int32(h.overlap), all: make(chan struct{})}
	}
	mux := http.NewServeMux()
	mw := h.store.Middleware(cookieName)
	mux.Handle("GET /login", mw(handle(h.store.Sessions(), "login", false)))
	mux.Handle("GET /set", mw(h.setKey()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	h.baseURL = srv.URL
	base, _ := url.Parse(srv.URL) // a valid URL
	jar, _ := cookiejar.New(nil)  // never fails without options
	c := &http.Client{Jar: jar, Transport: &http.Transport{MaxIdleConnsPerHost: h.overlap, DisableCompression: true}}
	defer c.CloseIdleConnections()
	if err := get(ctx, c, srv.URL+"/login?u=0"); err != nil || len(jar.Cookies(base)) == 0 {
		return fmt.Errorf("log in: no cookie (%v)", err)
	}
	fmt.Fprintf(out, "server %s; collection %s.%s; http %s; %d trials of %d overlapping requests of one client\n",
		server, h.db, coll.Name(), srv.URL, h.trials, h.overlap)

	res := &concResult{statuses: map[int]int{}}
	want := map[string]int{} // keys that 200 responses set and that were there since
	for t := range h.trials {
		codes := make([]int, h.overlap)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range h.overlap {
			wg.Go(func() { codes[i] = h.send(ctx, c, t, i, res) })
		}
		wg.Wait()
		res.perTrial.Lat = append(res.perTrial.Lat, time.Since(start))
		if ctx.Err() != nil {
			return fmt.Errorf("trial %d cut short: %w", t, context.Cause(ctx))
		}
		for i, code := range codes {
			if res.statuses[code]++; code == http.StatusOK {
				want[fmt.Sprintf("k%d-%d", t, i)] = i
			}
		}
		session, err := h.store.Load(ctx, jar.Cookies(base)[0])
		if err != nil || session.IsNew {
			return fmt.Errorf("trial %d: load the session: new %v, %v", t, session != nil && session.IsNew, err)
		}
		for k, i := range want {
			if session.Values[k] != any(i) {
				res.lost++
				if res.firstLost == "" {
					res.firstLost = fmt.Sprintf("trial %d: %s is %v, not %d", t, k, session.Values[k], i)
				}
				delete(want, k)
			}
		}
	}
	return h.report(out, server, res)
}

// send sends request i of trial t and returns its status, or 0 if none came.
func (h *concRun) send(ctx context.Context, c *http.Client, t, i int, res *concResult) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/set?t=%d&i=%d", h.baseURL, t, i), nil) // our URLs parse
	resp, err := c.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		err = errors.Join(err, resp.Body.Close())
	}
	if err != nil {
		res.mu.Lock()
		res.firstErr = cmp.Or(res.firstErr, err)
		res.mu.Unlock()
		return 0
	}
	return resp.StatusCode
}

// report prints the table of res and returns its failures.
func (h *concRun) report(out io.Writer, server string, res *concResult) error {
	other := h.trials*h.overlap - res.statuses[http.StatusOK] - res.statuses[http.StatusConflict] - res.statuses[http.StatusInternalServerError]
	conflicts, retries := h.merges.conflicts.Load(), h.merges.retries.Load()
	fmt.Fprintln(out, "\n| server | trials | overlap | requests | 200 | 409 | 500 | other | lost updates | conflicts | retries | per trial p50 / p99 ms |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Fprintf(out, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s |\n", server, h.trials, h.overlap, h.trials*h.overlap,
		res.statuses[http.StatusOK], res.statuses[http.StatusConflict], res.statuses[http.StatusInternalServerError], other,
		res.lost, conflicts, retries, res.perTrial.P50P99())
	var err error
	if res.lost > 0 {
		err = fmt.Errorf("%d lost updates (first: %s)", res.lost, res.firstLost)
	}
	if failed := h.trials*h.overlap - res.statuses[http.StatusOK]; failed > 0 {
		err = errors.Join(err, fmt.Errorf("%d requests not answered 200 (statuses %v; first without a response: %v)", failed, res.statuses, res.firstErr))
	}
	return err
}

// setKey is the handler of /set?t=T&i=I: once all requests of trial T have
// loaded the session, it sets key "kT-I" = I.
func (h *concRun) setKey() http.Handler {
	ss := h.store.Sessions()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, terr := strconv.Atoi(r.URL.Query().Get("t"))
		i, ierr := strconv.Atoi(r.URL.Query().Get("i"))
		session, err := ss.Get(r, cookieName)
		switch {
		case terr != nil || ierr != nil || t < 0 || t >= len(h.barriers):
			err = errors.New("bad trial or request")
		case err != nil:
		case session.IsNew || session.Values["uid"] == nil:
			err = errors.New("session not loaded")
		default:
			err = h.barriers[t].wait(r.Context())
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		session.Values[fmt.Sprintf("k%d-%d", t, i)] = i
		writeOK(w)
	})
}

// barrier lets its waiters go when all have come.
type barrier struct {
	left int32 // still to come
	all  chan struct{}
}

func (b *barrier) wait(ctx context.Context) error {
	if atomic.AddInt32(&b.left, -1) == 0 {
		close(b.all)
	}
	select {
	case <-b.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(barrierWait):
		return fmt.Errorf("the trial's other requests did not come within %v", barrierWait)
	}
}

// merges counts the store's records of saves that met concurrent ones
// (conflicts) and the extra writes they took (retries).
type merges struct{ conflicts, retries atomic.Int64 }

// mergedMsg is the store's Debug record of a save that met concurrent ones, with an int "retries".
const mergedMsg = "mongostore: merged concurrent changes"

// mergeCounter is a slog.Handler that counts merges and passes every record inner takes on to it.
type mergeCounter struct {
	inner slog.Handler
	*merges
}

// Enabled takes Debug records too: the store logs its merges at Debug.
func (m mergeCounter) Enabled(context.Context, slog.Level) bool { return true }

func (m mergeCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == mergedMsg {
		m.conflicts.Add(1)
		r.Attrs(func(a slog.Attr) bool {
			if v := a.Value.Resolve(); a.Key == "retries" && v.Kind() == slog.KindInt64 {
				m.retries.Add(v.Int64())
			}
			return true
		})
	}
	if !m.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return m.inner.Handle(ctx, r)
}

func (m mergeCounter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return mergeCounter{m.inner.WithAttrs(attrs), m.merges}
}

func (m mergeCounter) WithGroup(name string) slog.Handler {
	return mergeCounter{m.inner.WithGroup(name), m.merges}
}
