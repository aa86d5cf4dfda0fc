package main

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// shownPage is a page of the app as a test saw it, in one of the states
// that change what it says.
type shownPage struct {
	name string
	body string
}

// everyPage visits every page of a new app in each of the states that
// change what it says (messages, one device or several, errors) and
// returns them: the login form (fresh, after a wrong password, after the
// session was signed out from another device, after a logout), the home
// page (with the login's welcome, then without), the page of sessions
// (this device only, two devices, after each kind of sign-out) and the
// 404 page.
func everyPage(t *testing.T) []shownPage {
	t.Helper()
	app := startApp(t, nil)
	var pages []shownPage
	keep := func(name string, r response, status int) {
		t.Helper()
		wantStatus(t, name, r, status, "")
		pages = append(pages, shownPage{name, r.body})
	}
	anon, b1, b2 := newBrowser(t, app.url), newBrowser(t, app.url), newBrowser(t, app.url)
	keep("login", anon.get("/login"), http.StatusOK)
	keep("login, wrong password", anon.post("/login", url.Values{"username": {"demo"}, "password": {"nope"}}), http.StatusUnauthorized)
	b1.loginAs("demo", "demo", firefoxLinux)
	keep("home, first visit", b1.get("/"), http.StatusOK)
	keep("home", b1.get("/"), http.StatusOK)
	keep("sessions, this device only", b1.get("/sessions"), http.StatusOK)
	b2.loginAs("demo", "demo", chromeAndroid)
	r, list := sessionsOf(t, b1)
	keep("sessions, two devices", r, http.StatusOK)
	wantStatus(t, "sign out the other device", b1.post("/sessions/end", url.Values{"handle": {other(t, list).handle}}), http.StatusSeeOther, "/sessions")
	keep("sessions, one device signed out", b1.get("/sessions"), http.StatusOK)
	wantStatus(t, "GET / on the device signed out", b2.get("/"), http.StatusSeeOther, "/login")
	keep("login, session ended elsewhere", b2.get("/login"), http.StatusOK)
	b2.loginAs("demo", "demo", chromeAndroid)
	wantStatus(t, "sign out the others", b1.post("/sessions/end-others", nil), http.StatusSeeOther, "/sessions")
	keep("sessions, the others signed out", b1.get("/sessions"), http.StatusOK)
	wantStatus(t, "sign out the others again", b1.post("/sessions/end-others", nil), http.StatusSeeOther, "/sessions")
	keep("sessions, no other to sign out", b1.get("/sessions"), http.StatusOK)
	wantStatus(t, "sign out an ended session", b1.post("/sessions/end", url.Values{"handle": {"gone"}}), http.StatusSeeOther, "/sessions")
	keep("sessions, already ended", b1.get("/sessions"), http.StatusOK)
	keep("not found", b1.get("/no-such-page"), http.StatusNotFound)
	wantStatus(t, "POST /logout", b1.post("/logout", nil), http.StatusSeeOther, "/login")
	keep("login, after logout", b1.get("/login"), http.StatusOK)
	return pages
}

var (
	buttonRE = regexp.MustCompile(`(?s)<button([^>]*)>(.*?)</button>`)
	classRE  = regexp.MustCompile(`\bclass="([^"]*)"`)
)

// TestButtonStyles checks that the buttons that end a session (Log out,
// Sign out …) have the danger style, a red outline, and the others (Log
// in) the default one, green.
func TestButtonStyles(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, p := range everyPage(t) {
		for _, m := range buttonRE.FindAllStringSubmatch(p.body, -1) {
			label := strings.Join(strings.Fields(html.UnescapeString(m[2])), " ")
			var class string
			if c := classRE.FindStringSubmatch(m[1]); c != nil {
				class = c[1]
			}
			ends := strings.HasPrefix(label, "Log out") || strings.HasPrefix(label, "Sign out")
			if danger := strings.Contains(" "+class+" ", " danger "); danger != ends {
				t.Errorf("%s: button %q has the class %q: danger style %v, want %v", p.name, label, class, danger, ends)
			}
			if words := strings.Fields(label); len(words) >= 2 {
				seen[words[0]+" "+words[1]] = true
			}
		}
	}
	for _, want := range []string{"Log in", "Log out", "Sign out"} {
		if !seen[want] {
			t.Errorf("no button %q found on the pages", want)
		}
	}
	css, err := staticFS.ReadFile("static/style.css")
	if err != nil {
		t.Fatal(err)
	}
	if rule := regexp.MustCompile(`button\.danger \{[^}]*border-color: #b3261e;`); !rule.Match(css) {
		t.Errorf("style.css has no red outline for button.danger")
	}
}
