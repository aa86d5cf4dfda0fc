package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestLoginHomeLogout(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)

	wantStatus(t, "GET / before login", b.get("/"), http.StatusSeeOther, "/login")

	r := b.get("/login")
	wantStatus(t, "GET /login", r, http.StatusOK, "")
	for _, want := range []string{`<form method="post" action="/login">`, `name="username"`, `name="password"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("login page lacks %s", want)
		}
	}
	if got := autofocused(t, r.body); got != "username" {
		t.Errorf("login page: autofocus on %q, want username", got)
	}
	if got := r.header.Get("Set-Cookie"); got != "" {
		t.Errorf("GET /login set a cookie before login: %s", got)
	}

	before := time.Now()
	b.login("demo", "demo")
	cookie := b.cookie(sessionName)
	if cookie == "" {
		t.Fatal("no session cookie after login")
	}
	if n := app.countSessions(t); n != 1 {
		t.Fatalf("%d session documents after login, want 1", n)
	}

	r = b.get("/")
	wantStatus(t, "GET / after login", r, http.StatusOK, "")
	for _, want := range []string{`<strong id="current-user">demo</strong>`, `<p class="flash success" role="status">Welcome, demo!</p>`, "Expires if you stay idle"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("home page lacks %q:\n%s", want, r.body)
		}
	}
	exp := pageExpiry(t, r.body)
	if lo, hi := before.Add(defaultMaxAge-time.Second), time.Now().Add(defaultMaxAge+time.Second); exp.Before(lo) || exp.After(hi) {
		t.Errorf("page says the session expires at %v, want between %v and %v", exp, lo, hi)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("home page Cache-Control %q, want no-store", cc)
	}
	if got, want := pageText(t, r.body, "dd", "server"), describeServer(testURI); got != want || !strings.HasPrefix(got, "MongoDB at ") {
		t.Errorf("page says the server is %q, want %q", got, want)
	}

	r = b.get("/")
	wantStatus(t, "GET / again", r, http.StatusOK, "")
	if strings.Contains(r.body, "Welcome, demo!") {
		t.Error("the login flash message is shown twice")
	}

	r = b.post("/logout", nil)
	wantStatus(t, "POST /logout", r, http.StatusSeeOther, "/login")
	if b.cookie(sessionName) != "" {
		t.Error("the session cookie survived the logout")
	}
	if n := app.countSessions(t); n != 0 {
		t.Errorf("%d session documents after logout, want 0", n)
	}

	r = b.get("/login")
	wantStatus(t, "GET /login after logout", r, http.StatusOK, "")
	wantFlash(t, r, kindSuccess, "You have been logged out.")
	if r = b.get("/login"); strings.Contains(r.body, "You have been logged out.") {
		t.Error("the logout flash message is shown twice")
	}
	wantStatus(t, "GET / after logout", b.get("/"), http.StatusSeeOther, "/login")

	// The old cookie is dead on the server too, not only gone from the jar.
	replay := newBrowser(t, app.url)
	replay.setCookie(sessionName, cookie)
	wantStatus(t, "GET / with the cookie of a logged-out session", replay.get("/"), http.StatusSeeOther, "/login")
}

func TestLoginChangesSessionID(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	b.login("demo", "demo")
	first := b.cookie(sessionName)
	b.get("/")

	// Logging in again (as an attacker who planted a session would) gives a
	// new ID and kills the old one.
	b.login("demo", "demo")
	if second := b.cookie(sessionName); second == first || second == "" {
		t.Fatal("the session cookie did not change at login")
	}
	if n := app.countSessions(t); n != 1 {
		t.Errorf("%d session documents after a second login, want 1", n)
	}
	old := newBrowser(t, app.url)
	old.setCookie(sessionName, first)
	wantStatus(t, "GET / with the pre-login cookie", old.get("/"), http.StatusSeeOther, "/login")
	wantStatus(t, "GET / with the new cookie", b.get("/"), http.StatusOK, "")
}

func TestLoginRacingLogout(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	in := newBrowser(t, app.url)
	in.login("demo", "demo")
	for i := range 20 {
		// Two tabs with the same session: one logs out while the other
		// logs in again.
		out := newBrowser(t, app.url)
		out.setCookie(sessionName, in.cookie(sessionName))
		var wg sync.WaitGroup
		var login, logout response
		wg.Go(func() { logout = out.post("/logout", nil) })
		wg.Go(func() { login = in.post("/login", url.Values{"username": {"demo"}, "password": {"demo"}}) })
		wg.Wait()
		wantStatus(t, fmt.Sprintf("round %d: POST /login racing a logout", i), login, http.StatusSeeOther, "/")
		wantStatus(t, fmt.Sprintf("round %d: POST /logout racing a login", i), logout, http.StatusSeeOther, "/login")
		r := in.get("/")
		wantStatus(t, fmt.Sprintf("round %d: GET / after the login", i), r, http.StatusOK, "")
		if user := pageText(t, r.body, "strong", "current-user"); user != "demo" {
			t.Fatalf("round %d: logged in as %q", i, user)
		}
	}
}

func TestWrongPassword(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)

	// The focus goes to the field to fill in: the password, unless the
	// user name is missing too.
	for _, tc := range []struct{ user, password, focus string }{
		{"demo", "wrong", "password"},
		{"nobody", "demo", "password"},
		{"demo", "", "password"},
		{"", "", "username"},
		{"", "demo", "username"},
		{"demo", strings.Repeat("x", 100), "password"},
	} {
		r := b.post("/login", url.Values{"username": {tc.user}, "password": {tc.password}})
		wantStatus(t, fmt.Sprintf("POST /login %q/%q", tc.user, tc.password), r, http.StatusUnprocessableEntity, "")
		if !strings.Contains(r.body, "Wrong username or password.") || !strings.Contains(r.body, `name="password"`) {
			t.Errorf("422 page lacks the error message or the form:\n%s", r.body)
		}
		if !strings.Contains(r.body, fmt.Sprintf(`name="username" value="%s"`, tc.user)) {
			t.Errorf("422 page does not keep the user name %q", tc.user)
		}
		if got := autofocused(t, r.body); got != tc.focus {
			t.Errorf("422 page after %q/%q: autofocus on %q, want %q", tc.user, tc.password, got, tc.focus)
		}
		if c := r.header.Get("Set-Cookie"); c != "" {
			t.Errorf("failed login set a cookie: %s", c)
		}
	}
	wantStatus(t, "GET / after failed logins", b.get("/"), http.StatusSeeOther, "/login")
	if n := app.countSessions(t); n != 0 {
		t.Errorf("%d session documents after failed logins, want 0", n)
	}
}

// TestReturnTo checks which pages a login may return to: paths of this
// site only, never another site's address in any of the forms browsers
// read as one.
func TestReturnTo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ next, want string }{
		{"/sessions", "/sessions"},
		{"/sessions?tab=2#activity", "/sessions?tab=2#activity"},
		{"/a/b/../c", "/a/b/../c"},
		{"/%2F/evil.example", "/%2F/evil.example"}, // a path: browsers do not decode %2F
		{"/http://evil.example", "/http://evil.example"},
		{"/", ""}, // the home page, where a login goes anyway
		{"", ""},
		{"sessions", ""},
		{"//evil.example", ""},
		{"//evil.example/sessions", ""},
		{"///evil.example", ""},
		{"/\\evil.example", ""},
		{"/\\/evil.example", ""},
		{"/sessions\\..", ""},
		{"/\t/evil.example", ""},
		{"/\n/evil.example", ""},
		{"/\r\nLocation: http://evil.example", ""},
		{" /sessions", ""},
		{"/ /evil.example", ""},
		{"/\x7f", ""},
		{"https://evil.example/", ""},
		{"http:/sessions", ""},
		{"javascript:alert(1)", ""},
		{"data:text/html,hi", ""},
		{"\\\\evil.example", ""},
		{"/%zz", ""}, // not a URL
	} {
		if got := returnTo(tc.next); got != tc.want {
			t.Errorf("returnTo(%q) = %q, want %q", tc.next, got, tc.want)
		}
	}
}

// TestLoginURL checks where a request that needs a login is sent: the
// login form, returning to the page asked for (GET) after the login.
func TestLoginURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ method, target, want string }{
		{http.MethodGet, "/sessions", "/login?next=/sessions"},
		{http.MethodHead, "/sessions", "/login?next=/sessions"},
		{http.MethodGet, "/", "/login"},
		{http.MethodGet, "/sessions?a=1&b=%2F", "/login?next=/sessions%3Fa%3D1%26b%3D%252F"},
		{http.MethodPost, "/sessions/end", "/login"},
		{http.MethodPost, "/sessions/end-others", "/login"},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		got := loginURL(r)
		if got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.target, got, tc.want)
			continue
		}
		u, err := url.Parse(got)
		if next := u.Query().Get("next"); err != nil || next != "" && next != tc.target {
			t.Errorf("%s %s: %q names the page %q (%v), want %q", tc.method, tc.target, got, next, err, tc.target)
		}
	}
}

// TestLoginReturnsToAskedPage checks that a login returns to the page that
// sent the browser to the login form, which carries it in a hidden field
// (also after a wrong password); and that a next that is not a path of
// this site leads to the home page and is not put in the form.
func TestLoginReturnsToAskedPage(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	r := b.get("/sessions")
	wantStatus(t, "GET /sessions before login", r, http.StatusSeeOther, "/login?next=/sessions")
	r = b.get(r.location)
	wantStatus(t, "GET /login?next=/sessions", r, http.StatusOK, "")
	const field = `<input type="hidden" name="next" value="/sessions">`
	if !strings.Contains(r.body, field) || !strings.Contains(r.body, `id="next-note"`) {
		t.Errorf("the login form lacks %s or the note that says where it goes on to:\n%s", field, r.body)
	}
	creds := func(password, next string) url.Values {
		return url.Values{"username": {"demo"}, "password": {password}, "next": {next}}
	}
	r = b.post("/login", creds("wrong", "/sessions"))
	wantStatus(t, "POST /login, wrong password", r, http.StatusUnprocessableEntity, "")
	if !strings.Contains(r.body, field) {
		t.Errorf("the form after a wrong password lacks %s:\n%s", field, r.body)
	}
	wantStatus(t, "POST /login", b.post("/login", creds("demo", "/sessions")), http.StatusSeeOther, "/sessions")
	wantStatus(t, "GET /sessions after login", b.get("/sessions"), http.StatusOK, "")
	wantStatus(t, "GET /login?next=/sessions, logged in", b.get("/login?next=/sessions"), http.StatusSeeOther, "/sessions")
	wantStatus(t, "GET /login?next=//evil.example, logged in", b.get("/login?next=//evil.example"), http.StatusSeeOther, "/")

	for _, next := range []string{"//evil.example", "/\\evil.example", "https://evil.example/", "javascript:alert(1)", "/\t/evil.example", "/"} {
		anon := newBrowser(t, app.url)
		r := anon.get("/login?next=" + url.QueryEscape(next))
		wantStatus(t, "GET /login with next "+next, r, http.StatusOK, "")
		if strings.Contains(r.body, `name="next"`) || strings.Contains(r.body, `id="next-note"`) {
			t.Errorf("next %q: the form keeps it:\n%s", next, r.body)
		}
		wantStatus(t, "POST /login with next "+next, anon.post("/login", creds("demo", next)), http.StatusSeeOther, "/")
	}
}

var inputRE = regexp.MustCompile(`<input id="([^"]+)"[^>]*>`)

// autofocused returns the id of the only input of a page with the
// attribute autofocus, and fails the test unless there is exactly one.
func autofocused(t *testing.T, body string) string {
	t.Helper()
	var ids []string
	for _, m := range inputRE.FindAllStringSubmatch(body, -1) {
		if slices.Contains(strings.Fields(strings.TrimSuffix(m[0], ">")), "autofocus") {
			ids = append(ids, m[1])
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d inputs with autofocus (%q), want 1:\n%s", len(ids), ids, body)
	}
	return ids[0]
}

func TestTamperedCookie(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	b.login("demo", "demo")
	good := b.cookie(sessionName)

	flip := []byte(good)
	if i := len(flip) / 2; flip[i] == 'A' {
		flip[i] = 'B'
	} else {
		flip[i] = 'A'
	}
	for name, value := range map[string]string{
		"one character changed": string(flip),
		"truncated":             good[:len(good)-5],
		"garbage":               "not-a-cookie",
		"empty":                 "",
		"other key": func() string {
			other := startApp(t, nil)
			ob := newBrowser(t, other.url)
			ob.login("demo", "demo")
			return ob.cookie(sessionName)
		}(),
	} {
		evil := newBrowser(t, app.url)
		evil.setCookie(sessionName, value)
		r := evil.get("/")
		wantStatus(t, "GET / with a cookie "+name, r, http.StatusSeeOther, "/login")
		r = evil.get("/login")
		wantStatus(t, "GET /login with a cookie "+name, r, http.StatusOK, "")
		// Logging in with it works and gives a fresh cookie.
		evil.login("demo", "demo")
		if got := evil.cookie(sessionName); got == value {
			t.Errorf("login with a cookie %s kept it", name)
		}
		wantStatus(t, "GET / after login with a cookie "+name, evil.get("/"), http.StatusOK, "")
	}
	if strings.Contains(app.logs.String(), "level=ERROR") {
		t.Errorf("tampered cookies caused errors:\n%s", app.logs)
	}
	wantStatus(t, "GET / with the good cookie", b.get("/"), http.StatusOK, "")
}

func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	const maxAge = 2 * time.Second
	app := startApp(t, func(c *config) { c.MaxAge = maxAge })
	b := newBrowser(t, app.url)
	b.login("demo", "demo")
	r := b.get("/")
	wantStatus(t, "GET / after login", r, http.StatusOK, "")
	exp := pageExpiry(t, r.body)
	if left := time.Until(exp); left <= 0 || left > maxAge+100*time.Millisecond {
		t.Fatalf("page says the session expires in %v, want about %v", left, maxAge)
	}
	if c := setCookies(t, r)[sessionName]; c == nil || c.MaxAge != 2 && c.MaxAge != 1 {
		t.Errorf("session cookie %v, want Max-Age of at most 2 seconds", c)
	}

	// Keep the cookie: the jar drops it at its Max-Age, and the point is
	// that the server refuses it once the session has expired.
	cookie := b.cookie(sessionName)
	time.Sleep(time.Until(exp) + 200*time.Millisecond)
	late := newBrowser(t, app.url)
	late.setCookie(sessionName, cookie)
	wantStatus(t, "GET / after expiry", late.get("/"), http.StatusSeeOther, "/login")
	wantStatus(t, "GET / after expiry (jar)", b.get("/"), http.StatusSeeOther, "/login")
}

func TestActivityExtendsSession(t *testing.T) {
	t.Parallel()
	const maxAge = 2 * time.Second
	app := startApp(t, func(c *config) { c.MaxAge = maxAge })
	b := newBrowser(t, app.url)
	b.login("demo", "demo")
	start := time.Now()
	first := pageExpiry(t, b.get("/").body)
	// Visits more often than the idle timeout keep the session alive past it:
	// each one after the touch interval (maxAge/10) slides the expiry.
	var last time.Time
	for time.Since(start) < maxAge+time.Second {
		time.Sleep(maxAge / 4)
		r := b.get("/")
		wantStatus(t, fmt.Sprintf("GET / after %v of activity", time.Since(start).Round(time.Millisecond)), r, http.StatusOK, "")
		last = pageExpiry(t, r.body)
	}
	if !last.After(first.Add(maxAge / 2)) {
		t.Errorf("expiry did not slide: %v at first, %v at last", first, last)
	}
}

func TestParallelUsers(t *testing.T) {
	t.Parallel()
	const users = 20
	app := startApp(t, func(c *config) {
		for i := range users {
			c.Users = append(c.Users, credential{Name: fmt.Sprintf("user%02d", i), Password: fmt.Sprintf("pw%02d", i)})
		}
	})
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range users {
		wg.Go(func() {
			name, password := fmt.Sprintf("user%02d", i), fmt.Sprintf("pw%02d", i)
			b := newBrowser(t, app.url)
			<-start
			r := b.post("/login", url.Values{"username": {name}, "password": {password}})
			if r.status != http.StatusSeeOther {
				t.Errorf("%s: POST /login: %d", name, r.status)
				return
			}
			for range 3 {
				r := b.get("/")
				if want := `<strong id="current-user">` + name + `</strong>`; r.status != http.StatusOK || !strings.Contains(r.body, want) {
					t.Errorf("%s: GET /: %d, page without %q", name, r.status, want)
					return
				}
			}
			if r := b.post("/logout", nil); r.status != http.StatusSeeOther {
				t.Errorf("%s: POST /logout: %d", name, r.status)
			}
			if r := b.get("/"); r.status != http.StatusSeeOther {
				t.Errorf("%s: GET / after logout: %d, want 303", name, r.status)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := app.countSessions(t); n != 0 {
		t.Errorf("%d session documents after all logged out, want 0", n)
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	r := b.get("/healthz")
	if r.status != http.StatusOK || r.body != "ok\n" {
		t.Fatalf("GET /healthz: %d %q, want 200 ok", r.status, r.body)
	}
}

func TestHealthzDatabaseDown(t *testing.T) {
	t.Parallel()
	db, err := startDBProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = db.Stop()
		}
	})
	app := startApp(t, func(c *config) { c.MongoURI = db.URI })
	b := newBrowser(t, app.url)
	wantStatus(t, "GET /healthz", b.get("/healthz"), http.StatusOK, "")
	b.login("demo", "demo")

	if err := db.Stop(); err != nil {
		t.Fatalf("stop database: %v", err)
	}
	stopped = true
	start := time.Now()
	r := b.get("/healthz")
	if r.status != http.StatusServiceUnavailable || r.body != "database unavailable\n" {
		t.Fatalf("GET /healthz with the database down: %d %q, want 503", r.status, r.body)
	}
	if d := time.Since(start); d > pingTimeout+time.Second {
		t.Errorf("GET /healthz took %v with the database down, want at most about %v", d, pingTimeout)
	}
	// A page that needs the session fails cleanly too, within the
	// database timeout.
	start = time.Now()
	r = b.get("/")
	wantStatus(t, "GET / with the database down", r, http.StatusInternalServerError, "")
	if d := time.Since(start); d > dbTimeout+2*time.Second {
		t.Errorf("GET / took %v with the database down, want at most about %v", d, dbTimeout)
	}
	// A logout signs this browser out all the same, and says what it could
	// not do.
	wantStatus(t, "POST /logout with the database down", b.post("/logout", nil), http.StatusSeeOther, "/login")
	if b.cookie(sessionName) != "" {
		t.Error("the session cookie outlived the logout")
	}
	if r := b.get("/login"); !strings.Contains(r.body, "could not end the session") {
		t.Errorf("the login page after the logout says nothing of it:\n%s", r.body)
	}
}

func TestCrossOriginPostRefused(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	b.login("demo", "demo")

	creds := url.Values{"username": {"demo"}, "password": {"demo"}}
	for _, tc := range []struct {
		name, path string
		header     http.Header
	}{
		{"login, Sec-Fetch-Site cross-site", "/login", http.Header{"Sec-Fetch-Site": {"cross-site"}}},
		{"login, Sec-Fetch-Site same-site", "/login", http.Header{"Sec-Fetch-Site": {"same-site"}}},
		{"login, foreign Origin", "/login", http.Header{"Origin": {"http://evil.example"}}},
		{"logout, Sec-Fetch-Site cross-site", "/logout", http.Header{"Sec-Fetch-Site": {"cross-site"}}},
		{"logout, foreign Origin", "/logout", http.Header{"Origin": {"https://evil.example"}}},
	} {
		r := b.do(http.MethodPost, tc.path, creds, tc.header)
		if r.status != http.StatusForbidden {
			t.Errorf("%s: got %d, want 403", tc.name, r.status)
		}
		if c := r.header.Get("Set-Cookie"); c != "" {
			t.Errorf("%s: refused request set a cookie: %s", tc.name, c)
		}
	}
	// The refused logouts did not log the user out.
	wantStatus(t, "GET / after refused cross-origin logouts", b.get("/"), http.StatusOK, "")

	// Same-origin browser requests pass.
	r := b.do(http.MethodPost, "/logout", nil, http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {app.url}})
	wantStatus(t, "same-origin POST /logout", r, http.StatusSeeOther, "/login")
	r = b.do(http.MethodPost, "/login", creds, http.Header{"Origin": {app.url}})
	wantStatus(t, "same-origin POST /login", r, http.StatusSeeOther, "/")
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	for _, path := range []string{"/login", "/healthz", "/static/style.css"} {
		r := b.get(path)
		wantStatus(t, "GET "+path, r, http.StatusOK, "")
		for h, want := range map[string]string{
			"X-Content-Type-Options": "nosniff",
			"X-Frame-Options":        "DENY",
			"Referrer-Policy":        "same-origin",
		} {
			if got := r.header.Get(h); got != want {
				t.Errorf("GET %s: %s %q, want %q", path, h, got, want)
			}
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	b.login("demo", "demo")
	r := b.get("/")
	if c := r.header.Get("Set-Cookie"); !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Lax") {
		t.Errorf("session cookie %q, want HttpOnly and SameSite=Lax", c)
	}
}

// commandCounter counts the commands the app sends to the database for
// session documents.
type commandCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *commandCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if isGCSweep(e) {
			return // the store's background sweep, not a request's work
		}
		switch e.CommandName {
		case "hello", "isMaster", "ismaster", "buildInfo", "endSessions":
			return // connection handshakes and bookkeeping
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.counts == nil {
			c.counts = map[string]int{}
		}
		name := e.CommandName
		if _, update := e.Command.Lookup("update").DocumentOK(); name == "update" || name == "findAndModify" && update {
			name = "save" // update where the server plans queries, findAndModify on FerretDB v1
		}
		c.counts[name]++
	}}
}

// gcSweepComment is the comment of the commands of the store's GC sweep
// (see Store.DeleteExpired), which the store no longer exports.
const gcSweepComment = "mongostore gc sweep"

// isGCSweep reports whether e is a command of the store's GC sweep, which
// the store marks with gcSweepComment.
func isGCSweep(e *event.CommandStartedEvent) bool {
	comment, _ := e.Command.Lookup("comment").StringValueOK()
	return comment == gcSweepComment
}

// take returns the counts since the last take and resets them.
func (c *commandCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := c.counts
	c.counts = nil
	if counts == nil {
		counts = map[string]int{}
	}
	return counts
}

// format shows counts in a stable order.
func format(counts map[string]int) string {
	if len(counts) == 0 {
		return "none"
	}
	var parts []string
	total := 0
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[name], name))
		total += counts[name]
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func TestDatabaseRoundTrips(t *testing.T) {
	t.Parallel()
	var counter commandCounter
	app := startApp(t, func(c *config) { c.ClientOptions = options.Client().SetMonitor(counter.monitor()) })
	b := newBrowser(t, app.url)
	counter.take() // the start-up commands

	steps := []struct {
		name    string
		request func() response
		status  int
		want    map[string]int
	}{
		{"GET /login (no cookie)", func() response { return b.get("/login") }, 200, map[string]int{}},
		{"POST /login (no session yet)", func() response {
			return b.post("/login", url.Values{"username": {"demo"}, "password": {"demo"}})
		}, 303, map[string]int{"insert": 1}},
		{"GET / (first: takes the flash message)", func() response { return b.get("/") }, 200, map[string]int{"find": 1, "save": 1}},
		{"GET / (read-only)", func() response { return b.get("/") }, 200, map[string]int{"find": 1}},
		{"GET / (read-only, again)", func() response { return b.get("/") }, 200, map[string]int{"find": 1}},
		{"POST /login (already logged in)", func() response {
			return b.post("/login", url.Values{"username": {"demo"}, "password": {"demo"}})
		}, 303, map[string]int{"find": 1, "findAndModify": 1, "insert": 1}}, // the ending returns what it deletes, for the activity log's event
		{"GET /login (logged in: redirect)", func() response { return b.get("/login") }, 303, map[string]int{"find": 1}},
		// The list of sessions: one find on the owner index. Ending a
		// session lists them too (the flash message names the device),
		// and EndSession finds the handle's document before deleting it.
		// EndOtherSessions lists the others first, and deletes only what
		// it found: here nothing, the second login ended the first.
		{"GET /sessions (takes the login's flash message)", func() response { return b.get("/sessions") }, 200, map[string]int{"find": 2, "save": 1}},
		{"GET /sessions (read-only)", func() response { return b.get("/sessions") }, 200, map[string]int{"find": 2}},
		{"POST /sessions/end-others (none)", func() response { return b.post("/sessions/end-others", nil) }, 303, map[string]int{"find": 2, "save": 1}},
		{"GET /sessions (takes the flash message)", func() response { return b.get("/sessions") }, 200, map[string]int{"find": 2, "save": 1}},
		{"POST /sessions/end", func() response {
			return b.post("/sessions/end", url.Values{"handle": {"no-such-session"}})
		}, 303, map[string]int{"find": 2, "save": 1}},
		{"POST /logout", func() response { return b.post("/logout", nil) }, 303, map[string]int{"find": 1, "findAndModify": 1}},
		{"GET /login (after logout)", func() response { return b.get("/login") }, 200, map[string]int{}},
		{"POST /login (wrong password)", func() response {
			return b.post("/login", url.Values{"username": {"demo"}, "password": {"nope"}})
		}, 422, map[string]int{}},
		{"GET /healthz", func() response { return b.get("/healthz") }, 200, map[string]int{"ping": 1}},
	}
	for _, s := range steps {
		r := s.request()
		got := counter.take()
		t.Logf("database commands for %-40s %s", s.name+":", format(got))
		if r.status != s.status {
			t.Errorf("%s: status %d, want %d", s.name, r.status, s.status)
		}
		if !maps.Equal(got, s.want) {
			t.Errorf("%s: %s, want %s", s.name, format(got), format(s.want))
		}
	}
}

// storedTimes returns the times in the app's only session document.
func (a *testApp) storedTimes(t *testing.T) (createdAt, expiresAt time.Time) {
	t.Helper()
	var doc struct {
		CreatedAt time.Time `bson:"createdAt"`
		ExpiresAt time.Time `bson:"expiresAt"`
	}
	if n := a.countSessions(t); n != 1 {
		t.Fatalf("%d session documents, want 1", n)
	}
	if err := a.sessions().FindOne(t.Context(), bson.D{}).Decode(&doc); err != nil {
		t.Fatalf("read the session document: %v", err)
	}
	return doc.CreatedAt, doc.ExpiresAt
}

// TestHomePageShowsStoredTimes checks that the home page shows the times
// the session's document holds, for people and for machines, and that the
// absolute limit is 7 days from the creation, or MaxAge if longer: the
// store's default, which honours a long MaxAge in full.
func TestHomePageShowsStoredTimes(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	for _, tc := range []struct {
		maxAge                 time.Duration
		wantAbsolute           time.Duration // from the creation
		wantIn, wantAbsoluteIn string        // as the page says it, rounded to minutes
	}{
		{maxAge: day, wantAbsolute: 7 * day, wantIn: "(in 1d;", wantAbsoluteIn: "(in 7d,"},
		{maxAge: 90 * time.Minute, wantAbsolute: 7 * day, wantIn: "(in 1h30m;", wantAbsoluteIn: "(in 7d,"},
		{maxAge: 30 * day, wantAbsolute: 30 * day, wantIn: "(in 30d;", wantAbsoluteIn: "(in 30d,"},
	} {
		t.Run(tc.maxAge.String(), func(t *testing.T) {
			t.Parallel()
			app := startApp(t, func(c *config) { c.MaxAge = tc.maxAge })
			b := newBrowser(t, app.url)
			b.login("demo", "demo")
			for _, visit := range []string{"first visit (saves: takes the flash)", "second visit (read-only)"} {
				r := b.get("/")
				wantStatus(t, "GET / "+visit, r, http.StatusOK, "")
				createdAt, expiresAt := app.storedTimes(t)
				for _, c := range []struct {
					id     string
					want   time.Time
					wantIn string
				}{
					{"created", createdAt, ""},
					{"expires", expiresAt, tc.wantIn},
					{"absolute-expires", createdAt.Add(tc.wantAbsolute), tc.wantAbsoluteIn},
				} {
					got := pageTime(t, r.body, c.id)
					if !got.Equal(c.want) {
						t.Errorf("%s: page shows #%s %v, want %v (the document's)", visit, c.id, got, c.want)
					}
					human := `datetime="` + got.UTC().Format("2006-01-02T15:04:05.000Z07:00") + `">` + got.Local().Format("Mon 2 Jan 2006 15:04:05 MST") + "</time>"
					if !strings.Contains(r.body, human) {
						t.Errorf("%s: #%s not shown in local time as %s:\n%s", visit, c.id, human, r.body)
					}
					if c.wantIn != "" && !strings.Contains(r.body, c.wantIn) {
						t.Errorf("%s: page lacks %q:\n%s", visit, c.wantIn, r.body)
					}
				}
			}
		})
	}
}

// TestExpiryModeFollowsServer checks that the page names the expiry mode
// the server allows: "ttl" where it accepts a TTL index (MongoDB, FerretDB
// v2), "gc" where it refuses one with NotImplemented (FerretDB v1).
func TestExpiryModeFollowsServer(t *testing.T) {
	t.Parallel()
	want, how := "ttl", "the server's TTL index deletes expired sessions"
	probe := testDB.Database(testDBName(t)).Collection("ttl_probe")
	_, err := probe.Indexes().CreateOne(t.Context(), mongo.IndexModel{
		Keys:    bson.D{{Key: "at", Value: 1}},
		Options: options.Index().SetExpireAfterSeconds(0),
	})
	var se mongo.ServerError
	switch {
	case err == nil:
	case errors.As(err, &se) && se.HasErrorCode(238): // NotImplemented
		want, how = "gc", "the app's GC goroutine deletes expired sessions"
	default:
		t.Fatalf("probe for TTL indexes: %v", err)
	}
	t.Logf("the server %s TTL indexes: want expiry mode %q", map[bool]string{true: "supports", false: "does not support"}[want == "ttl"], want)

	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	b.login("demo", "demo")
	r := b.get("/")
	wantStatus(t, "GET /", r, http.StatusOK, "")
	if got := pageText(t, r.body, "code", "expiry-mode"); got != want {
		t.Errorf("page says expiry mode %q, want %q", got, want)
	}
	if !strings.Contains(html.UnescapeString(r.body), how) {
		t.Errorf("page does not say %q:\n%s", how, r.body)
	}
	if !strings.Contains(app.logs.String(), "expiry="+want) {
		t.Errorf("the log does not say expiry=%s:\n%s", want, app.logs)
	}
}

// TestCookieNames checks the names and attributes of every cookie the app
// sets (the session's, the flash messages' and the hint's), at login, on a
// logged-in page, at logout and when the login form takes the logout
// message, over plain HTTP (local development) and with COOKIE_SECURE (the
// app behind HTTPS): then all three are Secure and their names have the
// __Host- prefix, so that no sibling subdomain can toss in a cookie of the
// same name (a second session cookie in the request) and plain HTTP cannot
// overwrite them. The requests carry the cookies by hand: a cookie jar
// sends Secure cookies over HTTPS only.
func TestCookieNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		secure               bool
		session, flash, hint string
	}{
		{false, "session", "flash", "session-hint"},
		{true, "__Host-session", "__Host-flash", "__Host-session-hint"},
	} {
		t.Run(fmt.Sprintf("COOKIE_SECURE=%v", tc.secure), func(t *testing.T) {
			t.Parallel()
			app := startApp(t, func(c *config) { c.CookieSecure = tc.secure })
			b := newBrowser(t, app.url)
			b.client.Jar = nil
			jar := map[string]string{}
			// step sends a request with the cookies of jar, checks every
			// cookie it sets and returns their names, and keeps them in
			// jar (or deletes them from it).
			step := func(what, method, path string, form url.Values, status int, location string) []string {
				t.Helper()
				header := http.Header{}
				for name, value := range jar {
					header.Add("Cookie", (&http.Cookie{Name: name, Value: value}).String())
				}
				r := b.do(method, path, form, header)
				wantStatus(t, what, r, status, location)
				var names []string
				for _, line := range r.header.Values("Set-Cookie") {
					c, err := http.ParseSetCookie(line)
					if err != nil {
						t.Fatalf("%s: Set-Cookie %q: %v", what, line, err)
					}
					names = append(names, c.Name)
					if c.Name != tc.session && c.Name != tc.flash && c.Name != tc.hint {
						t.Errorf("%s: cookie %q set, want only %s, %s and %s", what, c.Name, tc.session, tc.flash, tc.hint)
					}
					if c.Secure != tc.secure || c.Path != "/" || c.Domain != "" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
						t.Errorf("%s: Set-Cookie %q: want Secure %v, Path=/, no Domain, HttpOnly, SameSite=Lax", what, line, tc.secure)
					}
					if c.MaxAge < 0 {
						delete(jar, c.Name)
					} else {
						jar[c.Name] = c.Value
					}
				}
				slices.Sort(names)
				return names
			}
			sorted := func(names ...string) []string { slices.Sort(names); return names }
			for _, s := range []struct {
				what, method, path string
				form               url.Values
				status             int
				location           string
				want               []string // the cookies set
			}{
				{"POST /login", http.MethodPost, "/login", url.Values{"username": {"demo"}, "password": {"demo"}}, http.StatusSeeOther, "/", sorted(tc.session, tc.hint)},
				// The session is saved: its cookie is sent again, and the
				// hint with it, as on every logged-in page.
				{"GET / (takes the login's message)", http.MethodGet, "/", nil, http.StatusOK, "", sorted(tc.session, tc.hint)},
				{"POST /logout", http.MethodPost, "/logout", url.Values{}, http.StatusSeeOther, "/login", sorted(tc.session, tc.flash, tc.hint)},
				{"GET /login (takes the logout message)", http.MethodGet, "/login", nil, http.StatusOK, "", []string{tc.flash}},
			} {
				if got := step(s.what, s.method, s.path, s.form, s.status, s.location); !slices.Equal(got, s.want) {
					t.Errorf("%s set the cookies %q, want %q", s.what, got, s.want)
				}
			}
			if len(jar) != 0 {
				t.Errorf("cookies left after the logout: %v", jar)
			}
			if n := app.countSessions(t); n != 0 {
				t.Errorf("%d session documents after the logout, want 0", n)
			}
		})
	}
}

// TestSecureCookies checks the app with COOKIE_SECURE: its cookies are
// Secure and have the __Host- prefix, and it works behind an HTTPS proxy,
// as in production.
func TestSecureCookies(t *testing.T) {
	t.Parallel()
	app := startApp(t, func(c *config) { c.CookieSecure = true })

	// What the app sends, read from the header.
	plain := newBrowser(t, app.url)
	r := plain.post("/login", url.Values{"username": {"demo"}, "password": {"demo"}})
	wantStatus(t, "POST /login", r, http.StatusSeeOther, "/")
	var found bool
	for _, line := range r.header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			t.Fatalf("Set-Cookie %q: %v", line, err)
		}
		if c.Name != "__Host-session" && c.Name != "__Host-session-hint" {
			t.Errorf("cookie %q set; want only __Host-session and __Host-session-hint", c.Name)
			continue
		}
		found = found || c.Name == "__Host-session"
		if !c.Secure || c.Path != "/" || c.Domain != "" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
			t.Errorf("Set-Cookie %q: want Secure, Path=/, no Domain, HttpOnly, SameSite=Lax", line)
		}
	}
	if !found {
		t.Fatalf("POST /login set no __Host-session cookie: %q", r.header.Values("Set-Cookie"))
	}

	// Through an HTTPS proxy, with a cookie jar that keeps Secure cookies
	// to HTTPS, as browsers do.
	target, err := url.Parse(app.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(target))
	t.Cleanup(proxy.Close)
	b := newBrowser(t, proxy.URL)
	b.client.Transport = proxy.Client().Transport
	b.login("demo", "demo")
	if b.cookie("__Host-session") == "" {
		t.Fatal("no __Host-session cookie in the jar after login")
	}
	r = b.get("/")
	wantStatus(t, "GET / over HTTPS", r, http.StatusOK, "")
	if !strings.Contains(r.body, "Welcome, demo!") {
		t.Errorf("home page over HTTPS:\n%s", r.body)
	}
	wantStatus(t, "POST /logout over HTTPS", b.post("/logout", nil), http.StatusSeeOther, "/login")
	if b.cookie("__Host-session") != "" {
		t.Error("the session cookie survived the logout")
	}
	r = b.get("/login")
	if !strings.Contains(r.body, "You have been logged out.") {
		t.Errorf("no logout message (the __Host-flash cookie) on the login page:\n%s", r.body)
	}
	wantStatus(t, "GET / after logout", b.get("/"), http.StatusSeeOther, "/login")
	if strings.Contains(app.logs.String(), "level=ERROR") {
		t.Errorf("errors in the log:\n%s", app.logs)
	}
}

// TestNotFound checks that a path the app does not serve gets its own 404
// page, and a path the app serves with another method its own 405 page,
// with the methods it allows in the Allow header (GET /logout typed in the
// address bar, for one): HTML pages in its layout with its style sheet and
// a viewport for phones, that do not repeat the path.
func TestNotFound(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	b.login("demo", "demo") // the page is the same for everybody, and touches no session
	const (
		notFound   = "Page not found"
		notAllowed = "Not available this way"
		formsOnly  = "This address takes the forms that the app's buttons send"
		pageOnly   = "This address is a page to open, not one that takes forms."
	)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
		title, says  string // the page's title, and what it says
	}{
		{http.MethodGet, "/no-such-page", http.StatusNotFound, "", notFound, "There is no page at this address."},
		{http.MethodGet, "/login/extra", http.StatusNotFound, "", notFound, "There is no page at this address."},
		{http.MethodGet, "/static/missing.css", http.StatusNotFound, "", notFound, "There is no page at this address."},
		{http.MethodGet, "/%3Cb%3Eplanted%3C/b%3E", http.StatusNotFound, "", notFound, "There is no page at this address."},
		{http.MethodPost, "/no-such-page", http.StatusNotFound, "", notFound, "There is no page at this address."},
		{http.MethodHead, "/no-such-page", http.StatusNotFound, "", "", ""},
		{http.MethodGet, "/logout", http.StatusMethodNotAllowed, "POST", notAllowed, formsOnly},
		{http.MethodHead, "/logout", http.StatusMethodNotAllowed, "POST", "", ""},
		{http.MethodPost, "/", http.StatusMethodNotAllowed, "GET, HEAD", notAllowed, pageOnly},
		{http.MethodGet, "/sessions/end", http.StatusMethodNotAllowed, "POST", notAllowed, formsOnly},
		{http.MethodGet, "/sessions/end-others", http.StatusMethodNotAllowed, "POST", notAllowed, formsOnly},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, "GET, HEAD", notAllowed, pageOnly},
	} {
		what := tc.method + " " + tc.path
		var form url.Values
		if tc.method == http.MethodPost {
			form = url.Values{}
		}
		r := b.do(tc.method, tc.path, form, nil)
		if r.status != tc.status || r.header.Get("Allow") != tc.allow {
			t.Errorf("%s: %d, Allow %q; want %d, Allow %q", what, r.status, r.header.Get("Allow"), tc.status, tc.allow)
		}
		if c := r.header.Get("Set-Cookie"); c != "" {
			t.Errorf("%s set a cookie: %s", what, c)
		}
		if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("%s: Content-Type %q, want an HTML page", what, ct)
		}
		if tc.method == http.MethodHead {
			continue
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", what, csp)
		}
		for _, want := range []string{
			`<meta name="viewport" content="width=device-width, initial-scale=1">`,
			`<link rel="stylesheet" href="/static/style.css">`,
			`<title>` + tc.title + ` · mongostore example</title>`,
			`<h1>` + tc.title + `</h1>`,
			tc.says,
			`<a href="/" id="home-link">`,
		} {
			if !strings.Contains(r.body, want) {
				t.Errorf("%s: the page lacks %s:\n%s", what, want, r.body)
			}
		}
		if tc.allow != "" && !strings.Contains(r.body, "<code>"+strings.ReplaceAll(tc.allow, ", ", "</code>, <code>")+"</code>") {
			t.Errorf("%s: the page does not list the methods %s:\n%s", what, tc.allow, r.body)
		}
		if strings.Contains(r.body, "planted") || len(tc.path) > 1 && strings.Contains(r.body, tc.path) {
			t.Errorf("%s: the page repeats the path:\n%s", what, r.body)
		}
	}
	wantStatus(t, "GET / after the 404s and 405s", b.get("/"), http.StatusOK, "")
}
