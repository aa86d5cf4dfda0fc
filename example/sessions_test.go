package main

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// User-Agents of the tests' browsers, and the labels the app makes of them.
const (
	firefoxLinux   = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
	chromeAndroid  = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36"
	safariIPhone   = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1"
	labelFirefox   = "Firefox on Linux"
	labelChrome    = "Chrome on Android"
	labelSafari    = "Safari on iPhone"
	alreadyEnded   = "That session had already ended."
	notAnywhereMsg = "You are not logged in anywhere else."
)

// loginAs logs in with the User-Agent ua and checks that it worked.
func (b *browser) loginAs(user, password, ua string) {
	b.t.Helper()
	r := b.do(http.MethodPost, "/login", url.Values{"username": {user}, "password": {password}}, http.Header{"User-Agent": {ua}})
	if r.status != http.StatusSeeOther || r.location != "/" {
		b.t.Fatalf("POST /login as %s: got %d to %q, want 303 to /\n%s", user, r.status, r.location, r.body)
	}
}

// listedSession is a session as the page of sessions shows it.
type listedSession struct {
	device  string
	current bool
	handle  string // of its end button; the current session has none

	created, lastActive, expires time.Time
}

var (
	sessionItem   = regexp.MustCompile(`(?s)<li class="session( current)?"[^>]*>(.*?)</li>`)
	sessionDevice = regexp.MustCompile(`<h2 id="session-\d+-device" class="device">([^<]*)`)
	sessionHandle = regexp.MustCompile(`<input type="hidden" name="handle" value="([^"]*)">`)
)

// sessionsOf fetches /sessions with b, checks that it answers 200, and
// returns the page and the sessions it lists, in order.
func sessionsOf(t *testing.T, b *browser) (response, []listedSession) {
	t.Helper()
	r := b.get("/sessions")
	wantStatus(t, "GET /sessions", r, http.StatusOK, "")
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("GET /sessions: Cache-Control %q, want no-store", cc)
	}
	var list []listedSession
	for _, m := range sessionItem.FindAllStringSubmatch(r.body, -1) {
		item := m[2]
		s := listedSession{current: m[1] != ""}
		d := sessionDevice.FindStringSubmatch(item)
		if d == nil {
			t.Fatalf("a session without a device heading:\n%s", item)
		}
		s.device = strings.TrimSpace(html.UnescapeString(d[1]))
		if h := sessionHandle.FindStringSubmatch(item); h != nil {
			s.handle = html.UnescapeString(h[1])
		}
		if s.current != strings.Contains(item, "(this device)") {
			t.Errorf("session %q: marked current %v, but the page says (this device) %v", s.device, s.current, !s.current)
		}
		if s.current == (s.handle != "") {
			t.Errorf("session %q: current %v with handle %q: want a button on the other sessions only", s.device, s.current, s.handle)
		}
		s.created = listedTime(t, item, "created")
		s.lastActive = listedTime(t, item, "last-active")
		s.expires = listedTime(t, item, "expires")
		switch n := len(list); {
		case s.current && n > 0:
			t.Errorf("current session %q listed after %d others, want it first", s.device, n)
		case n > 0 && !list[n-1].current && s.lastActive.After(list[n-1].lastActive):
			t.Errorf("session %q, last used %v, listed after one last used %v: want the most recently used first", s.device, s.lastActive, list[n-1].lastActive)
		}
		list = append(list, s)
	}
	return r, list
}

// listedTime returns the time of class class of a session of the page,
// and checks that it shows it in local time for people.
func listedTime(t *testing.T, item, class string) time.Time {
	t.Helper()
	m := regexp.MustCompile(`<time class="` + class + `" datetime="([^"]+)">([^<]*)</time>`).FindStringSubmatch(item)
	if m == nil {
		t.Fatalf("no time .%s in the session:\n%s", class, item)
	}
	tm, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatalf("time .%s %q: %v", class, m[1], err)
	}
	if want := tm.Local().Format("Mon 2 Jan 2006 15:04:05 MST"); html.UnescapeString(m[2]) != want {
		t.Errorf("time .%s shown as %q, want %q (local time)", class, m[2], want)
	}
	return tm
}

// wantSessions fails the test unless list holds the sessions of devices,
// in any order, with the one of current marked current.
func wantSessions(t *testing.T, what string, list []listedSession, current string, devices ...string) {
	t.Helper()
	var got []string
	currents := 0
	for _, s := range list {
		got = append(got, s.device)
		if s.current {
			currents++
			if s.device != current {
				t.Errorf("%s: current session is %q, want %q", what, s.device, current)
			}
		}
	}
	if currents != 1 {
		t.Errorf("%s: %d sessions marked current, want 1", what, currents)
	}
	if !sameSet(got, devices) {
		t.Fatalf("%s: sessions %q, want %q", what, got, devices)
	}
}

// sameSet reports whether a and b hold the same strings, as many times
// each.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

// wantFlash fails the test unless the page of r shows the flash message
// msg, of the kind (kindSuccess…) that colours it.
func wantFlash(t *testing.T, r response, kind, msg string) {
	t.Helper()
	if !strings.Contains(html.UnescapeString(r.body), `<p class="flash `+kind+`" role="status">`+msg+"</p>") {
		t.Errorf("page lacks the %s message %q:\n%s", kind, msg, r.body)
	}
}

// other returns the session of list that is not the current one, which
// must be the only other one.
func other(t *testing.T, list []listedSession) listedSession {
	t.Helper()
	var out []listedSession
	for _, s := range list {
		if !s.current {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d other sessions listed, want 1", len(out))
	}
	return out[0]
}

func TestSessionsListAndEnd(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b1, b2 := newBrowser(t, app.url), newBrowser(t, app.url)
	before := time.Now().Truncate(time.Millisecond)
	b1.loginAs("demo", "demo", firefoxLinux)
	b2.loginAs("demo", "demo", chromeAndroid)

	r := b1.get("/")
	wantStatus(t, "GET / (browser 1)", r, http.StatusOK, "")
	if !strings.Contains(r.body, `<a href="/sessions" id="sessions-link">`) {
		t.Errorf("home page has no link to /sessions:\n%s", r.body)
	}

	r, list := sessionsOf(t, b1)
	wantSessions(t, "browser 1", list, labelFirefox, labelFirefox, labelChrome)
	if got := pageText(t, r.body, "strong", "current-user"); got != "demo" {
		t.Errorf("page of sessions says the user is %q", got)
	}
	for _, s := range list {
		if s.created.Before(before) || s.lastActive.Before(s.created) || s.lastActive.After(time.Now()) {
			t.Errorf("%s: started %v, last used %v: want a start after %v, and a last use between the start and now", s.device, s.created, s.lastActive, before)
		}
		if d := s.expires.Sub(s.lastActive); d != defaultMaxAge {
			t.Errorf("%s: expires %v after its last use, want %v", s.device, d, defaultMaxAge)
		}
	}
	for _, want := range []string{`action="/sessions/end-others"`, ">Sign out all other sessions</button>", ">Sign out " + labelChrome + "</button>", `href="/"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("page of sessions lacks %s:\n%s", want, r.body)
		}
	}
	if strings.Contains(r.body, "Sign out "+labelFirefox) {
		t.Errorf("the current session has an end button:\n%s", r.body)
	}
	for _, leak := range []string{firefoxLinux, chromeAndroid, "127.0.0.1", b1.cookie(sessionName), b2.cookie(sessionName)} {
		if strings.Contains(r.body, leak) {
			t.Errorf("page of sessions shows %q", leak)
		}
	}
	chrome := other(t, list)

	// Browser 2 sees the same two sessions, with its own marked current,
	// and the handle of browser 1's session.
	_, list2 := sessionsOf(t, b2)
	wantSessions(t, "browser 2", list2, labelChrome, labelFirefox, labelChrome)
	firefox := other(t, list2)

	// The handle of the current session ends nothing: the page offers no
	// such button, logging out does that.
	r = b1.post("/sessions/end", url.Values{"handle": {firefox.handle}})
	wantStatus(t, "POST /sessions/end with the current session's handle", r, http.StatusSeeOther, "/sessions")
	r, list = sessionsOf(t, b1)
	wantFlash(t, r, kindInfo, "That is the session you are using: to end it, log out.")
	wantSessions(t, "after trying to end the current session", list, labelFirefox, labelFirefox, labelChrome)

	// Browser 1 ends browser 2's session.
	r = b1.post("/sessions/end", url.Values{"handle": {chrome.handle}})
	wantStatus(t, "POST /sessions/end", r, http.StatusSeeOther, "/sessions")
	r, list = sessionsOf(t, b1)
	wantFlash(t, r, kindSuccess, "Signed out "+labelChrome+".")
	wantSessions(t, "after ending the other session", list, labelFirefox, labelFirefox)
	if !strings.Contains(r.body, notAnywhereMsg) || strings.Contains(r.body, "/sessions/end-others") {
		t.Errorf("page with one session still offers to end the others:\n%s", r.body)
	}
	if r, _ := sessionsOf(t, b1); strings.Contains(r.body, `<p class="flash `) {
		t.Error("the flash message is shown twice")
	}

	// Browser 2's next request is anonymous, and the login form says why.
	wantStatus(t, "GET / (browser 2, its session ended)", b2.get("/"), http.StatusSeeOther, "/login")
	login := b2.get("/login")
	wantStatus(t, "GET /login (browser 2)", login, http.StatusOK, "")
	wantFlash(t, login, kindWarning, noticeElsewhere)
	wantStatus(t, "GET /sessions (browser 2, its session ended)", b2.get("/sessions"), http.StatusSeeOther, "/login?next=/sessions")
	wantStatus(t, "GET / (browser 1)", b1.get("/"), http.StatusOK, "")
	if n := app.countSessions(t); n != 1 {
		t.Errorf("%d session documents, want 1", n)
	}

	// Ending it again, as from a page loaded before it ended, is harmless.
	r = b1.post("/sessions/end", url.Values{"handle": {chrome.handle}})
	wantStatus(t, "POST /sessions/end again", r, http.StatusSeeOther, "/sessions")
	r, _ = sessionsOf(t, b1)
	wantFlash(t, r, kindInfo, alreadyEnded)

	wantStatus(t, "POST /sessions/end without a handle", b1.post("/sessions/end", nil), http.StatusBadRequest, "")
	if strings.Contains(app.logs.String(), "level=ERROR") {
		t.Errorf("errors in the log:\n%s", app.logs)
	}
}

func TestSessionsEndOthers(t *testing.T) {
	t.Parallel()
	app := startApp(t, func(c *config) { c.Users = append(c.Users, credential{Name: "alice", Password: "alice-pw"}) })
	b1, b2, b3 := newBrowser(t, app.url), newBrowser(t, app.url), newBrowser(t, app.url)
	b1.loginAs("demo", "demo", firefoxLinux)
	b2.loginAs("demo", "demo", chromeAndroid)
	b3.loginAs("demo", "demo", safariIPhone)
	alice := newBrowser(t, app.url)
	alice.loginAs("alice", "alice-pw", firefoxLinux)

	_, list := sessionsOf(t, b1)
	wantSessions(t, "three browsers", list, labelFirefox, labelFirefox, labelChrome, labelSafari)

	r := b1.post("/sessions/end-others", nil)
	wantStatus(t, "POST /sessions/end-others", r, http.StatusSeeOther, "/sessions")
	r, list = sessionsOf(t, b1)
	wantFlash(t, r, kindSuccess, "Signed out 2 other sessions.")
	wantSessions(t, "after ending the others", list, labelFirefox, labelFirefox)

	wantStatus(t, "GET / (browser 2)", b2.get("/"), http.StatusSeeOther, "/login")
	wantStatus(t, "GET / (browser 3)", b3.get("/"), http.StatusSeeOther, "/login")
	wantStatus(t, "GET / (browser 1)", b1.get("/"), http.StatusOK, "")
	wantStatus(t, "GET / (alice, another user)", alice.get("/"), http.StatusOK, "")
	if n := app.countSessions(t); n != 2 {
		t.Errorf("%d session documents, want 2 (demo's current one and alice's)", n)
	}

	r = b1.post("/sessions/end-others", nil)
	wantStatus(t, "POST /sessions/end-others (none left)", r, http.StatusSeeOther, "/sessions")
	r, _ = sessionsOf(t, b1)
	wantFlash(t, r, kindInfo, "Those sessions had already ended.")

	b2.loginAs("demo", "demo", chromeAndroid)
	wantStatus(t, "POST /sessions/end-others (one other)", b1.post("/sessions/end-others", nil), http.StatusSeeOther, "/sessions")
	r, _ = sessionsOf(t, b1)
	wantFlash(t, r, kindSuccess, "Signed out 1 other session.")
	wantStatus(t, "GET / (browser 2, logged in again and out)", b2.get("/"), http.StatusSeeOther, "/login")
}

func TestSessionsLoggedOut(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b := newBrowser(t, app.url)
	check := func(when string) {
		t.Helper()
		wantStatus(t, "GET /sessions "+when, b.get("/sessions"), http.StatusSeeOther, "/login?next=/sessions")
		wantStatus(t, "POST /sessions/end "+when, b.post("/sessions/end", url.Values{"handle": {"x"}}), http.StatusSeeOther, "/login")
		wantStatus(t, "POST /sessions/end-others "+when, b.post("/sessions/end-others", nil), http.StatusSeeOther, "/login")
	}
	check("before login")
	if n := app.countSessions(t); n != 0 {
		t.Errorf("%d session documents before login, want 0", n)
	}
	b.login("demo", "demo")
	wantStatus(t, "POST /logout", b.post("/logout", nil), http.StatusSeeOther, "/login")
	b.get("/login") // takes the logout's message
	check("after logout")
	// A logout removes the cookie and the hint: no notice of a session
	// that ended afterwards.
	if r := b.get("/login"); strings.Contains(r.body, `<p class="flash `) {
		t.Errorf("after a logout the login form shows a message:\n%s", r.body)
	}
}

// TestSessionsOtherUsersHandle checks that a user cannot end another
// user's session, even with its handle.
func TestSessionsOtherUsersHandle(t *testing.T) {
	t.Parallel()
	app := startApp(t, func(c *config) { c.Users = append(c.Users, credential{Name: "alice", Password: "alice-pw"}) })
	alice, alice2 := newBrowser(t, app.url), newBrowser(t, app.url)
	alice.loginAs("alice", "alice-pw", firefoxLinux)
	alice2.loginAs("alice", "alice-pw", safariIPhone)
	demo := newBrowser(t, app.url)
	demo.loginAs("demo", "demo", chromeAndroid)

	_, list := sessionsOf(t, alice)
	wantSessions(t, "alice", list, labelFirefox, labelFirefox, labelSafari)
	stolen := other(t, list).handle

	_, list = sessionsOf(t, demo)
	wantSessions(t, "demo", list, labelChrome, labelChrome)

	for name, handle := range map[string]string{"alice's": stolen, "a made-up": "AAAAAAAAAAAAAAAAAAAAAA", "a tampered": stolen[:len(stolen)-1] + "A"} {
		r := demo.post("/sessions/end", url.Values{"handle": {handle}})
		wantStatus(t, "POST /sessions/end with "+name+" handle", r, http.StatusSeeOther, "/sessions")
		r, _ = sessionsOf(t, demo)
		wantFlash(t, r, kindInfo, alreadyEnded)
	}
	wantStatus(t, "GET / (alice)", alice.get("/"), http.StatusOK, "")
	wantStatus(t, "GET / (alice's other browser)", alice2.get("/"), http.StatusOK, "")
	if n := app.countSessions(t); n != 3 {
		t.Errorf("%d session documents, want 3", n)
	}
}

func TestSessionsCrossOriginRefused(t *testing.T) {
	t.Parallel()
	app := startApp(t, nil)
	b1, b2 := newBrowser(t, app.url), newBrowser(t, app.url)
	b1.loginAs("demo", "demo", firefoxLinux)
	b2.loginAs("demo", "demo", chromeAndroid)
	_, list := sessionsOf(t, b1)
	handle := other(t, list).handle

	form := url.Values{"handle": {handle}}
	for _, path := range []string{"/sessions/end", "/sessions/end-others"} {
		for name, header := range map[string]http.Header{
			"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": {"cross-site"}},
			"Sec-Fetch-Site same-site":  {"Sec-Fetch-Site": {"same-site"}},
			"foreign Origin":            {"Origin": {"https://evil.example"}},
		} {
			r := b1.do(http.MethodPost, path, form, header)
			if r.status != http.StatusForbidden {
				t.Errorf("POST %s, %s: got %d, want 403", path, name, r.status)
			}
			if c := r.header.Get("Set-Cookie"); c != "" {
				t.Errorf("POST %s, %s: refused request set a cookie: %s", path, name, c)
			}
		}
	}
	// Nothing ended.
	wantStatus(t, "GET / (browser 2) after refused cross-origin POSTs", b2.get("/"), http.StatusOK, "")
	if n := app.countSessions(t); n != 2 {
		t.Errorf("%d session documents after refused cross-origin POSTs, want 2", n)
	}

	// A same-origin browser request passes.
	r := b1.do(http.MethodPost, "/sessions/end", form, http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {app.url}})
	wantStatus(t, "same-origin POST /sessions/end", r, http.StatusSeeOther, "/sessions")
	wantStatus(t, "GET / (browser 2) after a same-origin POST", b2.get("/"), http.StatusSeeOther, "/login")
}
