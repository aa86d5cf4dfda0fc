package mongostore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore/internal/faultproxy"
	"github.com/mongostore/mongostore/internal/testserver"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The reliability suite puts an in-process TCP proxy (internal/faultproxy)
// between the store and its server, runs many users through the store's
// middleware, and injects faults while they run: connections cut and
// refused, latency above and below the store's timeout, a black hole, and
// the server killed and restarted on the same data. Each user checks every
// answer against what it was told before: it sees only its own values, and
// every write the middleware acknowledged (a 200) is there afterwards;
// sessions it logged out never come back.

const (
	// faultTimeout is the stores' Config.Timeout in this suite: short, for
	// a quick suite, but above the stalls of a loaded 2-core machine running
	// FerretDB v1 beside the race detector (up to about 1s seen).
	faultTimeout = 2 * time.Second
	// faultUsers is the number of concurrent users.
	faultUsers = 16
	// faultDuration is how long each fault lasts.
	faultDuration = 3 * time.Second
	// recoveryWindow is how long the load goes on after a fault ends,
	// and the longest a first success may take after it.
	recoveryWindow = 2 * time.Second
	// answerBound is the longest any request may take: a load and a save,
	// each bounded by faultTimeout, plus slack for the race detector on a
	// small machine. The driver's own server selection would take 30s.
	answerBound = 2*faultTimeout + 1500*time.Millisecond
)

// faultResult is one request of a user, as the user saw it.
type faultResult struct {
	start, end time.Time
	status     int // 0: the HTTP request itself failed
}

func (r faultResult) ok() bool { return r.status == http.StatusOK }

// faultRig is a store behind a fault proxy, served by its middleware over
// HTTP to faultUsers users with cookie jars of their own.
type faultRig struct {
	t      *testing.T
	proxy  *faultproxy.Proxy
	client *mongo.Client
	store  *Store
	srv    *httptest.Server
	users  []*faultUser

	mu         sync.Mutex
	results    []faultResult
	errorKinds map[string]int // the error handler's errors, by sentinel
	violations []string
}

// uriHost returns the host:port of the server at uri.
func uriHost(t *testing.T, uri string) string {
	t.Helper()
	host, err := faultproxy.Host(uri)
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// newFaultRig starts a rig on the server at uri. cfg's Timeout defaults to
// faultTimeout.
func newFaultRig(t *testing.T, uri string, cfg Config) *faultRig {
	t.Helper()
	proxy, err := faultproxy.New(uriHost(t, uri))
	if err != nil {
		t.Fatal(err)
	}
	rig := &faultRig{t: t, proxy: proxy, errorKinds: make(map[string]int)}
	// The client's defaults, as an application that followed no advice
	// would have them: the store's Timeout alone bounds each request.
	proxied, err := proxy.MongoURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	rig.client, err = mongo.Connect(options.Client().ApplyURI(proxied))
	if err != nil {
		t.Fatal(err)
	}
	coll := rig.client.Database(testDatabase).Collection(fmt.Sprintf("faults_%d_%d", os.Getpid(), collectionSeq.Add(1)))
	if cfg.Timeout == 0 {
		cfg.Timeout = faultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(&syncBuffer{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rig.store, err = NewStore(ctx, coll, cfg, testHashKey); err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	rig.srv = httptest.NewServer(rig.store.Middleware(testSessionName, rig.errorHandler)(rig.handler()))
	for i := range faultUsers {
		jar, _ := cookiejar.New(nil)
		rig.users = append(rig.users, &faultUser{id: i, rig: rig,
			client: &http.Client{Jar: jar, Timeout: 30 * time.Second}})
	}
	return rig
}

// close stops everything the rig started, and checks that nothing is left:
// no connection open through the proxy once the client is gone.
func (rig *faultRig) close() {
	rig.srv.Close()
	for _, u := range rig.users {
		u.client.CloseIdleConnections()
	}
	rig.store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = rig.store.coll.c.Drop(ctx)
	if err := rig.client.Disconnect(ctx); err != nil {
		rig.t.Errorf("disconnect: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rig.proxy.Conns() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := rig.proxy.Conns(); n != 0 {
		rig.t.Errorf("%d connections still open through the proxy after Disconnect", n)
	}
	rig.proxy.Close()
}

// handler serves the users' requests. Every answer says what the session
// held when the request came: "new" or "owner n".
func (rig *faultRig) handler() http.Handler {
	state := func(s *sessions.Session) string {
		if s.IsNew {
			return "new"
		}
		owner, _ := s.Values["owner"].(string)
		n, _ := s.Values["n"].(int)
		return fmt.Sprintf("%s %d", owner, n)
	}
	session := func(r *http.Request) *sessions.Session {
		s, _ := rig.store.Get(r, testSessionName) // loaded by the middleware: the same session
		return s
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, state(session(r)))
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		s := session(r)
		before := state(s)
		n, _ := strconv.Atoi(r.FormValue("n"))
		s.Values["owner"] = r.FormValue("owner")
		s.Values["n"] = n
		io.WriteString(w, before) // the middleware saves first; its error handler answers if that fails
	})
	mux.HandleFunc("POST /logout", func(w http.ResponseWriter, r *http.Request) {
		s := session(r)
		before := state(s)
		s.Options.MaxAge = -1
		io.WriteString(w, before)
	})
	return mux
}

// errorHandler counts the middleware's errors by the sentinel they wrap,
// and answers 503 (500 for errors the suite does not expect).
func (rig *faultRig) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	kind := "other: " + err.Error()
	switch {
	case errors.Is(err, ErrDatabase) && errors.Is(err, context.DeadlineExceeded):
		kind = "ErrDatabase (deadline)"
	case errors.Is(err, ErrDatabase):
		kind = "ErrDatabase (network)"
	case errors.Is(err, ErrSessionGone):
		kind = "ErrSessionGone"
	}
	rig.mu.Lock()
	rig.errorKinds[kind]++
	rig.mu.Unlock()
	status := http.StatusServiceUnavailable
	if strings.HasPrefix(kind, "other") {
		status = http.StatusInternalServerError
	}
	http.Error(w, kind, status)
}

func (rig *faultRig) record(r faultResult) {
	rig.mu.Lock()
	rig.results = append(rig.results, r)
	rig.mu.Unlock()
}

func (rig *faultRig) violation(format string, args ...any) {
	rig.mu.Lock()
	rig.violations = append(rig.violations, fmt.Sprintf(format, args...))
	rig.mu.Unlock()
}

// load runs the users until stop is closed, and waits for them.
func (rig *faultRig) load(stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for _, u := range rig.users {
		wg.Go(func() { u.run(stop) })
	}
	return wg.Wait
}

// faultUser is one user with a cookie jar of its own. Its model of the
// session: the owner token its values carry (new after each logout), the
// last n the middleware acknowledged and the last it asked for, and the
// cookies of the sessions whose logout was acknowledged.
type faultUser struct {
	id        int
	rig       *faultRig
	client    *http.Client
	gen       int
	acked     int // last n acknowledged (0: no session acknowledged yet)
	attempted int // last n asked for
	ended     []string
}

func (u *faultUser) owner() string { return fmt.Sprintf("user%d-gen%d", u.id, u.gen) }

func (u *faultUser) run(stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(u.id), 1))
	for {
		select {
		case <-stop:
			return
		default:
		}
		switch p := rng.IntN(100); {
		case p < 3 && u.acked > 0:
			u.logout()
		case p < 35:
			u.read()
		default:
			u.write()
		}
	}
}

// do sends one request and records it; body is "" unless the answer is a
// 200.
func (u *faultUser) do(method, path string, form url.Values) (status int, body string) {
	req, _ := http.NewRequest(method, u.rig.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res := faultResult{start: time.Now()}
	resp, err := u.client.Do(req)
	if err == nil {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res.status = resp.StatusCode
		if res.ok() {
			body = string(data)
		}
	}
	res.end = time.Now()
	u.rig.record(res)
	if d := res.end.Sub(res.start); d > answerBound {
		u.rig.violation("%s %s took %v, more than %v", method, path, d.Round(time.Millisecond), answerBound)
	}
	return res.status, body
}

// check compares what a request saw of the session with the model.
func (u *faultUser) check(what, seen string) {
	if u.acked == 0 {
		// Nothing acknowledged yet: a new session, or one whose first
		// write went through unacknowledged.
		if seen == "new" || strings.HasPrefix(seen, u.owner()+" ") {
			return
		}
		u.rig.violation("user %d %s: saw %q, want a new session or its own", u.id, what, seen)
		return
	}
	owner, nstr, _ := strings.Cut(seen, " ")
	n, _ := strconv.Atoi(nstr)
	switch {
	case seen == "new":
		u.rig.violation("user %d %s: its session (n=%d acknowledged) was lost", u.id, what, u.acked)
	case owner != u.owner():
		u.rig.violation("user %d %s: saw the values of %q (cross-talk)", u.id, what, owner)
	case n < u.acked || n > u.attempted:
		u.rig.violation("user %d %s: saw n=%d, want between the acknowledged %d and the attempted %d", u.id, what, n, u.acked, u.attempted)
	}
}

func (u *faultUser) read() {
	if status, body := u.do(http.MethodGet, "/read", nil); status == http.StatusOK {
		u.check("read", body)
	}
}

func (u *faultUser) write() {
	u.attempted++
	status, body := u.do(http.MethodPost, "/write", url.Values{"owner": {u.owner()}, "n": {strconv.Itoa(u.attempted)}})
	if status == http.StatusOK {
		u.check("write", body)
		u.acked = u.attempted
	}
}

func (u *faultUser) logout() {
	cookie := u.cookie()
	status, body := u.do(http.MethodPost, "/logout", url.Values{})
	if status == http.StatusOK {
		u.check("logout", body)
		u.ended = append(u.ended, cookie)
	}
	// Acknowledged or not, the user starts over: an unacknowledged logout
	// may have deleted the session, so its values are not checked again.
	u.client.Jar, _ = cookiejar.New(nil)
	u.gen++
	u.acked, u.attempted = 0, 0
}

// cookie returns the session cookie the user holds, or "".
func (u *faultUser) cookie() string {
	base, _ := url.Parse(u.rig.srv.URL)
	for _, c := range u.client.Jar.Cookies(base) {
		if c.Name == testSessionName {
			return c.Value
		}
	}
	return ""
}

// verify checks, once the faults are over, that every user's
// acknowledged state is there and every acknowledged logout held.
func (rig *faultRig) verify() {
	for _, u := range rig.users {
		status, body := u.do(http.MethodGet, "/read", nil)
		if status != http.StatusOK {
			rig.violation("user %d: final read answered %d", u.id, status)
			continue
		}
		u.check("final read", body)
		for _, cookie := range u.ended {
			jar, _ := cookiejar.New(nil)
			base, _ := url.Parse(rig.srv.URL)
			jar.SetCookies(base, []*http.Cookie{{Name: testSessionName, Value: cookie, Path: "/"}})
			old := &faultUser{id: u.id, rig: rig, client: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
			if status, body := old.do(http.MethodGet, "/read", nil); status != http.StatusOK || body != "new" {
				rig.violation("user %d: a logged-out session answered %d %q, want 200 new", u.id, status, body)
			}
		}
	}
}

// phaseStats is what one fault did to the requests around it.
type phaseStats struct {
	name              string
	requests, ok      int
	errors            map[string]int
	slowest, recovery time.Duration
	recovered         bool
}

// faultPhase runs one fault under load: the load runs for warm-up, the
// fault is applied for faultDuration (or until apply returns, for a
// restart), lifted, and the load runs recoveryWindow longer. It returns
// the phase's figures.
func (rig *faultRig) faultPhase(name string, apply, lift func()) phaseStats {
	stop := make(chan struct{})
	rig.mu.Lock()
	rig.results = rig.results[:0]
	clear(rig.errorKinds)
	rig.mu.Unlock()
	wait := rig.load(stop)
	time.Sleep(500 * time.Millisecond)
	apply()
	lift()
	ended := time.Now()
	time.Sleep(recoveryWindow + 500*time.Millisecond)
	close(stop)
	wait()

	rig.mu.Lock()
	defer rig.mu.Unlock()
	st := phaseStats{name: name, errors: make(map[string]int)}
	for k, v := range rig.errorKinds {
		st.errors[k] = v
	}
	first := time.Time{}
	for _, r := range rig.results {
		st.requests++
		if r.ok() {
			st.ok++
			if r.end.After(ended) && (first.IsZero() || r.end.Before(first)) {
				first = r.end
			}
		}
		st.slowest = max(st.slowest, r.end.Sub(r.start))
	}
	if !first.IsZero() {
		st.recovered, st.recovery = true, first.Sub(ended)
	}
	return st
}

func (st phaseStats) String() string {
	kinds := make([]string, 0, len(st.errors))
	for k, v := range st.errors {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, v))
	}
	slices.Sort(kinds)
	rec := "never"
	if st.recovered {
		rec = st.recovery.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("| %s | %d | %d | %s | %v | %s |", st.name, st.requests, st.ok,
		strings.Join(kinds, ", "), st.slowest.Round(time.Millisecond), rec)
}

// report fails the test for the rig's violations and a phase that did not
// recover in time, and logs the phase's figures.
func (rig *faultRig) report(st phaseStats, wantErrors bool) {
	rig.t.Helper()
	rig.t.Log(st)
	for kind := range st.errors {
		if strings.HasPrefix(kind, "other") {
			rig.t.Errorf("%s: an error wrapping no expected sentinel: %s", st.name, kind)
		}
	}
	if !st.recovered || st.recovery > recoveryWindow {
		rig.t.Errorf("%s: first success %v after the fault ended, want within %v", st.name, st.recovery, recoveryWindow)
	}
	errs := st.requests - st.ok
	switch {
	case wantErrors && errs == 0:
		rig.t.Errorf("%s: no request failed: the fault was not injected", st.name)
	case !wantErrors && (errs > st.requests/100 || errs != st.errors["ErrDatabase (deadline)"]):
		// Without a fault, a request fails only when the server stalls
		// past faultTimeout, which a shared 2-core machine building
		// PostgreSQL beside FerretDB v1 and the race detector does now
		// and then: a few in a hundred would be a fault of the store's.
		rig.t.Errorf("%s: %d of %d requests failed (errors %v), want at most 1%%, and none but deadlines", st.name, errs, st.requests, st.errors)
	}
	rig.flushViolations(st.name)
}

// flushViolations fails the test for the violations the users found
// during what is called name, and forgets them.
func (rig *faultRig) flushViolations(name string) {
	rig.t.Helper()
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for i, v := range rig.violations {
		if i == 20 {
			rig.t.Errorf("... and %d more", len(rig.violations)-20)
			break
		}
		rig.t.Errorf("%s: %s", name, v)
	}
	rig.violations = nil
}

// sleepFault returns an apply function that turns a fault on, waits
// faultDuration, and a lift function that turns it off.
func sleepFault(on, off func()) (apply, lift func()) {
	return func() { on(); time.Sleep(faultDuration) }, off
}

func TestReliabilityUnderFaults(t *testing.T) {
	baseline := runtime.NumGoroutine()
	rig := newFaultRig(t, os.Getenv("MONGODB_URI"), Config{})
	var stats []phaseStats

	phases := []struct {
		name       string
		on, off    func()
		wantErrors bool
	}{
		{"no fault", func() {}, func() {}, false},
		{"connections cut and refused", func() { rig.proxy.Refuse(true); rig.proxy.Cut() }, func() { rig.proxy.Refuse(false) }, true},
		{"latency 1.5x the timeout", func() { rig.proxy.SetLatency(faultTimeout * 3 / 2) }, func() { rig.proxy.SetLatency(0) }, true},
		{"latency 0.1x the timeout", func() { rig.proxy.SetLatency(faultTimeout / 10) }, func() { rig.proxy.SetLatency(0) }, false},
		{"black hole", func() { rig.proxy.BlackHole(true) }, func() { rig.proxy.BlackHole(false) }, true},
	}
	for _, p := range phases {
		apply, lift := sleepFault(p.on, p.off)
		st := rig.faultPhase(p.name, apply, lift)
		rig.report(st, p.wantErrors)
		stats = append(stats, st)
	}
	rig.verify()
	rig.flushViolations("after the faults")

	// The connections through the proxy are those of the users' requests
	// and the driver's monitors, not one per fault.
	if n := rig.proxy.Conns(); n > faultUsers+4 {
		t.Errorf("%d connections open after the faults, want at most %d", n, faultUsers+4)
	}
	rig.close()
	waitGoroutines(t, baseline)
	logFaultTable(t, stats)
}

// TestReliabilityServerRestart kills the embedded server's process while
// users run (on both CI legs: it needs a server this test owns) and
// restarts it on the same data.
func TestReliabilityServerRestart(t *testing.T) {
	baseline := runtime.NumGoroutine()
	dir := t.TempDir()
	bin, err := testserver.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	server, err := testserver.Start(bin, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Stop() }) // after a failure; stopping twice is harmless
	rig := newFaultRig(t, server.URI, Config{})

	var stats []phaseStats
	for _, down := range []time.Duration{time.Second, 3 * time.Second} {
		st := rig.faultPhase(fmt.Sprintf("server killed, restarted after %v", down), func() {
			server.Kill()
			time.Sleep(down)
			if server, err = testserver.Start(bin, data); err != nil {
				t.Fatalf("restart the server: %v", err)
			}
			rig.proxy.SetUpstream(uriHost(t, server.URI))
		}, func() {})
		rig.report(st, true)
		stats = append(stats, st)
	}
	rig.verify()
	rig.flushViolations("after the restarts")
	rig.close()
	if err := server.Stop(); err != nil {
		t.Errorf("stop the server: %v", err)
	}
	waitGoroutines(t, baseline)
	logFaultTable(t, stats)
}

// TestCloseWithCommandInBlackHole checks that Close returns at once even
// while a GC sweep waits on a server that never answers.
func TestCloseWithCommandInBlackHole(t *testing.T) {
	var sweeps atomic.Int64
	rig := newFaultRig(t, os.Getenv("MONGODB_URI"), Config{
		Expiry:     ExpiryGC,
		GCInterval: 100 * time.Millisecond,
		Timeout:    30 * time.Second, // a sweep left alone would wait this long
		afterSweep: func() { sweeps.Add(1) },
	})
	rig.proxy.BlackHole(true)
	time.Sleep(300 * time.Millisecond)
	before := sweeps.Load()
	time.Sleep(300 * time.Millisecond)
	if sweeps.Load() != before {
		t.Fatal("sweeps finish in the black hole: the fault is not injected")
	}
	start := time.Now()
	rig.store.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v with a sweep in a black hole, want at once", d)
	}
	rig.proxy.BlackHole(false)
	rig.close()
}

// waitGoroutines fails the test unless the number of goroutines comes back
// to baseline within a few seconds.
func waitGoroutines(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines, %d before the test:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}

// logFaultTable logs the phases' figures as a markdown table.
func logFaultTable(t *testing.T, stats []phaseStats) {
	var b strings.Builder
	b.WriteString("\n| fault | requests | answered 200 | errors by kind | slowest answer | first success after |\n| --- | ---: | ---: | --- | ---: | ---: |\n")
	for _, st := range stats {
		b.WriteString(st.String() + "\n")
	}
	t.Log(b.String())
}
