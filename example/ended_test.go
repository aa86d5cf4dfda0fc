package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// expiredAfter2s is the notice of a session that expired with a
// SESSION_MAX_AGE of 2s.
const expiredAfter2s = "Your session expired after 2 seconds without activity. Please log in again."

// waitExpired logs b in to an app whose SESSION_MAX_AGE is 2s, opens the
// home page, and waits until the session has expired; it returns the
// cookies of the session and of the hint as they were before, which the
// jar has dropped (the session's) by then.
func waitExpired(t *testing.T, b *browser) (session, hint string) {
	t.Helper()
	b.login("demo", "demo")
	r := b.get("/")
	wantStatus(t, "GET / after login", r, http.StatusOK, "")
	session, hint = b.cookie(sessionName), b.cookie(hintName)
	if session == "" || hint == "" {
		t.Fatalf("after login: session cookie %q, hint %q; want both", session, hint)
	}
	time.Sleep(time.Until(pageExpiry(t, r.body)) + 200*time.Millisecond)
	return session, hint
}

// tampered returns value with one character changed.
func tampered(value string) string {
	b := []byte(value)
	if i := len(b) / 2; b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// setCookies returns the cookies r sets, by name.
func setCookies(t *testing.T, r response) map[string]*http.Cookie {
	t.Helper()
	out := map[string]*http.Cookie{}
	for _, line := range r.header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			t.Fatalf("Set-Cookie %q: %v", line, err)
		}
		out[c.Name] = c
	}
	return out
}

// TestSessionEndedNotices checks each way a browser can come back with a
// session that is gone: the response that finds it expires the session
// cookie (if the browser sent one) and the hint, and the login form says
// what happened, as a warning, once; the next visits say nothing more.
func TestSessionEndedNotices(t *testing.T) {
	t.Parallel()
	short := func(c *config) { c.MaxAge = 2 * time.Second }
	for _, tc := range []struct {
		name string
		edit func(*config)
		// gone returns a browser of app whose session is gone.
		gone         func(t *testing.T, app *testApp) *browser
		method, path string
		status       int
		location     string // "": the notice is on the page itself
		notice       string
		cookie       bool // the browser still sends the session cookie
	}{
		{
			name: "signed out from another device", method: http.MethodGet, path: "/",
			status: http.StatusSeeOther, location: "/login", notice: noticeElsewhere, cookie: true,
			gone: func(t *testing.T, app *testApp) *browser {
				b, other := newBrowser(t, app.url), newBrowser(t, app.url)
				b.login("demo", "demo")
				b.get("/")
				other.login("demo", "demo")
				wantStatus(t, "sign out the others", other.post("/sessions/end-others", nil), http.StatusSeeOther, "/sessions")
				return b
			},
		},
		{
			name: "signed out by the limit, on /sessions", edit: func(c *config) { c.MaxSessionsPerUser = 1 },
			method: http.MethodGet, path: "/sessions",
			status: http.StatusSeeOther, location: "/login?next=/sessions", notice: noticeElsewhere, cookie: true,
			gone: func(t *testing.T, app *testApp) *browser {
				b := newBrowser(t, app.url)
				b.login("demo", "demo")
				newBrowser(t, app.url).login("demo", "demo")
				return b
			},
		},
		{
			name: "signed out from another device, found by the login form", method: http.MethodGet, path: "/login",
			status: http.StatusOK, notice: noticeElsewhere, cookie: true,
			gone: func(t *testing.T, app *testApp) *browser {
				b, other := newBrowser(t, app.url), newBrowser(t, app.url)
				b.login("demo", "demo")
				other.setCookie(sessionName, b.cookie(sessionName))
				wantStatus(t, "log out from another browser", other.post("/logout", nil), http.StatusSeeOther, "/login")
				return b
			},
		},
		{
			name: "signed out from another device, found by a form", method: http.MethodPost, path: "/sessions/end-others",
			status: http.StatusSeeOther, location: "/login", notice: noticeElsewhere, cookie: true,
			gone: func(t *testing.T, app *testApp) *browser {
				b := newBrowser(t, app.url)
				b.login("demo", "demo")
				if _, err := app.sessions().DeleteMany(t.Context(), bson.D{}); err != nil {
					t.Fatal(err)
				}
				return b
			},
		},
		{
			name: "expired, the browser still sends the cookie", edit: short, method: http.MethodGet, path: "/",
			status: http.StatusSeeOther, location: "/login", notice: expiredAfter2s, cookie: true,
			gone: func(t *testing.T, app *testApp) *browser {
				session, hint := waitExpired(t, newBrowser(t, app.url))
				b := newBrowser(t, app.url)
				b.setCookie(sessionName, session)
				b.setCookie(hintName, hint)
				return b
			},
		},
		{
			name: "expired, the browser dropped the cookie", edit: short, method: http.MethodGet, path: "/sessions",
			status: http.StatusSeeOther, location: "/login?next=/sessions", notice: expiredAfter2s,
			gone: func(t *testing.T, app *testApp) *browser {
				b := newBrowser(t, app.url)
				waitExpired(t, b)
				if b.cookie(sessionName) != "" || b.cookie(hintName) == "" {
					t.Fatal("the jar kept the session cookie past its Max-Age, or dropped the hint")
				}
				return b
			},
		},
		{
			name: "expired, found by the login form", edit: short, method: http.MethodGet, path: "/login",
			status: http.StatusOK, notice: expiredAfter2s,
			gone: func(t *testing.T, app *testApp) *browser {
				b := newBrowser(t, app.url)
				waitExpired(t, b)
				return b
			},
		},
		{
			name: "tampered", method: http.MethodGet, path: "/",
			status: http.StatusSeeOther, location: "/login", notice: noticeUnreadable, cookie: true,
			gone: func(t *testing.T, app *testApp) *browser {
				b := newBrowser(t, app.url)
				b.login("demo", "demo")
				b.setCookie(sessionName, tampered(b.cookie(sessionName)))
				return b
			},
		},
		{
			name: "signed with another key, found by a failed login", method: http.MethodPost, path: "/login",
			status: http.StatusUnprocessableEntity, notice: noticeUnreadable, cookie: true,
			gone: func(t *testing.T, app *testApp) *browser {
				other := newBrowser(t, startApp(t, nil).url)
				other.login("demo", "demo")
				b := newBrowser(t, app.url)
				b.setCookie(sessionName, other.cookie(sessionName))
				return b
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := startApp(t, tc.edit)
			b := tc.gone(t, app)
			hint := b.cookie(hintName) != ""
			var form url.Values
			switch {
			case tc.path == "/login" && tc.method == http.MethodPost:
				form = url.Values{"username": {"demo"}, "password": {"wrong"}}
			case tc.method == http.MethodPost:
				form = url.Values{}
			}
			r := b.do(tc.method, tc.path, form, nil)
			wantStatus(t, tc.method+" "+tc.path, r, tc.status, tc.location)
			set := setCookies(t, r)
			if c := set[sessionName]; tc.cookie != (c != nil && c.MaxAge < 0) {
				t.Errorf("the session cookie sent %v; expired by the response: %v (%v)", tc.cookie, !tc.cookie, c)
			}
			if c := set[hintName]; hint != (c != nil && c.MaxAge < 0) {
				t.Errorf("the hint sent %v; expired by the response: %v (%v)", hint, !hint, c)
			}
			if tc.location != "" {
				r = b.get("/login")
			}
			wantFlash(t, r, kindWarning, tc.notice)
			if n := strings.Count(r.body, `<p class="flash `); n != 1 {
				t.Errorf("%d messages on the page, want the notice only:\n%s", n, r.body)
			}
			// Said once: the browser has no cookie left to find.
			again := b.get("/")
			wantStatus(t, "GET / again", again, http.StatusSeeOther, "/login")
			if c := again.header.Values("Set-Cookie"); len(c) > 0 {
				t.Errorf("GET / again set cookies: %q", c)
			}
			if r := b.get("/login"); strings.Contains(r.body, `<p class="flash `) {
				t.Errorf("the login form opened again shows a message:\n%s", r.body)
			}
			if strings.Contains(app.logs.String(), "level=ERROR") {
				t.Errorf("errors in the log:\n%s", app.logs)
			}
		})
	}
}

// TestEndNotice checks which notice a request gets from what it brought
// back (see endNotice).
func TestEndNotice(t *testing.T) {
	t.Parallel()
	a := &app{absolute: sessionLifetime}
	now := time.Now()
	past, future := now.Add(-time.Second), now.Add(time.Second)
	for _, tc := range []struct {
		name    string
		loadErr error
		hint    sessionHint
		want    string
	}{
		{"no hint", nil, sessionHint{}, noticeElsewhere},
		{"hint not yet passed", nil, sessionHint{At: future, Idle: 30 * time.Minute}, noticeElsewhere},
		{"hint passed", nil, sessionHint{At: past, Idle: 30 * time.Minute}, "Your session expired after 30 minutes without activity. Please log in again."},
		{"hint passed just now", nil, sessionHint{At: now, Idle: 24 * time.Hour}, "Your session expired after 1 day without activity. Please log in again."},
		{"absolute limit passed", nil, sessionHint{At: past, Limit: true}, "Your session expired: a session lasts at most 7 days, however active. Please log in again."},
		{"absolute limit not yet passed", nil, sessionHint{At: future, Limit: true}, noticeElsewhere},
		{"tampered cookie", fmt.Errorf("%w: signature", mongostore.ErrInvalidCookie), sessionHint{}, noticeUnreadable},
		{"tampered cookie, hint passed", mongostore.ErrInvalidCookie, sessionHint{At: past, Idle: time.Hour}, noticeUnreadable},
		{"unreadable document", errors.Join(mongostore.ErrDecode, errors.New("gob")), sessionHint{At: future, Idle: time.Hour}, noticeUnreadable},
	} {
		if got := a.endNotice(tc.loadErr, tc.hint, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestHintValue checks the hint cookie's value both ways, and that a value
// the app did not write gives no hint.
func TestHintValue(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1795000000123)
	for _, h := range []sessionHint{
		{At: at, Idle: 2 * time.Second},
		{At: at, Idle: 24 * time.Hour},
		{At: at, Limit: true},
	} {
		if got := parseHint(h.String()); !got.At.Equal(h.At) || got.Idle != h.Idle || got.Limit != h.Limit {
			t.Errorf("parseHint(%q) = %+v, want %+v", h.String(), got, h)
		}
	}
	for _, v := range []string{"", "1795000000123", "1795000000123.", "x.60", "1795000000123.x", "-5.60", "0.60",
		"1795000000123.0", "1795000000123.-60", "1795000000123.99999999999", "1795000000123.LIMIT"} {
		if got := parseHint(v); !got.At.IsZero() {
			t.Errorf("parseHint(%q) = %+v, want no hint", v, got)
		}
	}
}

func TestSpellDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "less than a second"},
		{time.Second, "1 second"},
		{2 * time.Second, "2 seconds"},
		{30 * time.Minute, "30 minutes"},
		{90 * time.Minute, "1 hour and 30 minutes"},
		{24 * time.Hour, "1 day"},
		{7 * 24 * time.Hour, "7 days"},
		{2*24*time.Hour + 3*time.Hour + time.Second, "2 days, 3 hours and 1 second"},
		{time.Hour + 1500*time.Millisecond, "1 hour and 1 second"},
	} {
		if got := spellDuration(tc.d); got != tc.want {
			t.Errorf("spellDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestTakeFlashes checks that flash messages keep their kind, and that a
// bare string (an earlier version's) is information.
func TestTakeFlashes(t *testing.T) {
	t.Parallel()
	sess := sessions.NewSession(nil, "test")
	want := []flash{{kindSuccess, "Welcome!"}, {kindWarning, noticeElsewhere}, {kindInfo, "Old message."}}
	addFlash(sess, want[0])
	addFlash(sess, want[1])
	sess.AddFlash("Old message.")
	sess.AddFlash([]string{"blink", "An unknown kind."})
	got := takeFlashes(sess)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("takeFlashes: %q, want %q", got, want)
	}
	if got := takeFlashes(sess); len(got) != 0 {
		t.Errorf("takeFlashes again: %q, want none", got)
	}
}

// TestHintCookie checks the hint that each logged-in page sets, through
// the app: never after the session's expiry as stored (so that a session
// that expired always says so), at most a touch interval before it, in a
// cookie that outlives it by hintLinger; on a page that saves the session
// and on one that only reads it.
func TestHintCookie(t *testing.T) {
	t.Parallel()
	for _, maxAge := range []time.Duration{2 * time.Second, 30 * time.Minute, 24 * time.Hour} {
		t.Run(maxAge.String(), func(t *testing.T) {
			t.Parallel()
			app := startApp(t, func(c *config) { c.MaxAge = maxAge })
			b := newBrowser(t, app.url)
			b.login("demo", "demo")
			for _, visit := range []string{"first visit (saves: takes the flash)", "second visit (read-only)", "third visit"} {
				r := b.get("/")
				wantStatus(t, "GET / "+visit, r, http.StatusOK, "")
				c := setCookies(t, r)[hintName]
				if c == nil {
					t.Fatalf("%s: no hint set", visit)
				}
				h, expires := parseHint(c.Value), pageExpiry(t, r.body)
				if h.Idle != maxAge || h.Limit || h.At.After(expires) || h.At.Before(expires.Add(-touchInterval(maxAge)-time.Second)) {
					t.Errorf("%s: hint %+v, the session expires at %v: want idle %v, at most a touch interval (%v) before", visit, h, expires, maxAge, touchInterval(maxAge))
				}
				if left := time.Until(h.At) + hintLinger; c.MaxAge < int(left/time.Second)-1 || c.MaxAge > int(left/time.Second)+1 {
					t.Errorf("%s: hint cookie Max-Age %d, want about %v", visit, c.MaxAge, left)
				}
				if !c.HttpOnly || c.Path != "/" || c.SameSite != http.SameSiteLaxMode || c.Secure {
					t.Errorf("%s: hint cookie %v, want HttpOnly, Path=/, SameSite=Lax, not Secure", visit, c)
				}
				time.Sleep(min(touchInterval(maxAge)/2, 100*time.Millisecond))
			}
		})
	}
}
