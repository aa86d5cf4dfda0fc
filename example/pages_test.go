package main

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
)

// shownPage is a page of the app as a test saw it, in one of the states
// that change what it says.
type shownPage struct {
	name string
	body string
}

// everyPage visits every page of a new app in each of the states that
// change what it says (messages, one device or several, errors) and
// returns them: the login form (fresh, returning to /sessions, after a
// wrong password, after the session was signed out from another device,
// with a tampered cookie, after the session expired, in an app of its
// own, and after a logout), the home page (with the login's welcome, then
// without), the page of sessions (this device only, two devices, after
// each kind of sign-out, with the notice of a device signed out for the
// limit of sessions per user, in an app of its own, and after it), the 404
// page and the 405 page (a form's address opened, a page's address
// posted to). The page of sessions shows the activity log in each of its
// states.
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
	keep("login, returning to /sessions", anon.get("/login?next=/sessions"), http.StatusOK)
	keep("login, wrong password", anon.post("/login", url.Values{"username": {"demo"}, "password": {"nope"}}), http.StatusUnprocessableEntity)
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
	evil := newBrowser(t, app.url)
	evil.setCookie(sessionName, "not-a-session-cookie")
	r = evil.get("/login")
	wantFlash(t, r, kindWarning, noticeUnreadable)
	keep("login, cookie unreadable", r, http.StatusOK)
	b2.loginAs("demo", "demo", chromeAndroid)
	wantStatus(t, "sign out the others", b1.post("/sessions/end-others", nil), http.StatusSeeOther, "/sessions")
	keep("sessions, the others signed out", b1.get("/sessions"), http.StatusOK)
	wantStatus(t, "sign out the others again", b1.post("/sessions/end-others", nil), http.StatusSeeOther, "/sessions")
	keep("sessions, no other to sign out", b1.get("/sessions"), http.StatusOK)
	wantStatus(t, "sign out an ended session", b1.post("/sessions/end", url.Values{"handle": {"gone"}}), http.StatusSeeOther, "/sessions")
	keep("sessions, already ended", b1.get("/sessions"), http.StatusOK)
	keep("not found", b1.get("/no-such-page"), http.StatusNotFound)
	keep("not allowed, a form's address opened", b1.get("/logout"), http.StatusMethodNotAllowed)
	keep("not allowed, a page's address posted to", b1.post("/", nil), http.StatusMethodNotAllowed)
	wantStatus(t, "POST /logout", b1.post("/logout", nil), http.StatusSeeOther, "/login")
	keep("login, after logout", b1.get("/login"), http.StatusOK)
	limitPages(t, keep)
	expiredPage(t, keep)
	return pages
}

// expiredPage gives keep the login form of an app with a SESSION_MAX_AGE
// of 2s, after a session expired there.
func expiredPage(t *testing.T, keep func(name string, r response, status int)) {
	t.Helper()
	app := startApp(t, func(c *config) { c.MaxAge = 2 * time.Second })
	b := newBrowser(t, app.url)
	waitExpired(t, b)
	r := b.get("/login")
	wantFlash(t, r, kindWarning, expiredAfter2s)
	keep("login, session expired", r, http.StatusOK)
}

// limitPages gives keep the page of sessions of an app with a limit of one
// session per user, after a login beyond it: with its notice, then
// without.
func limitPages(t *testing.T, keep func(name string, r response, status int)) {
	t.Helper()
	app := startApp(t, func(c *config) { c.MaxSessionsPerUser = 1 })
	b1, b2 := newBrowser(t, app.url), newBrowser(t, app.url)
	b1.loginAs("demo", "demo", firefoxLinux)
	b2.loginAs("demo", "demo", chromeAndroid)
	r := b2.get("/sessions")
	if !strings.Contains(r.body, `id="limit-notice"`) {
		t.Errorf("no limit notice after a login beyond the limit:\n%s", r.body)
	}
	keep("sessions, the limit signed a device out", r, http.StatusOK)
	keep("sessions, after the limit's notice", b2.get("/sessions"), http.StatusOK)
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

var (
	headRE     = regexp.MustCompile(`(?s)<head>.*?</head>`)
	blockTagRE = regexp.MustCompile(`</?(?:html|body|main|footer|div|form|ul|li|dl|dt|dd|h1|h2|p|label|button)\b[^>]*>`)
	tagRE      = regexp.MustCompile(`<[^>]*>`)
	sentenceRE = regexp.MustCompile(`\S.*?[.!?](?:\s|$)`)
)

// textLines returns the text of an HTML page's body as a person reads it:
// one line per block (paragraph, heading, list item, button…).
func textLines(body string) []string {
	body = headRE.ReplaceAllString(body, "")
	body = strings.Join(strings.Fields(body), " ") // the source's line breaks are spaces
	body = blockTagRE.ReplaceAllString(body, "\n")
	body = html.UnescapeString(tagRE.ReplaceAllString(body, ""))
	var lines []string
	for line := range strings.SplitSeq(body, "\n") {
		if line = strings.Join(strings.Fields(line), " "); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// repeatedSentences returns what the sentences of lines (the text of a
// page, one block per line; a sentence ends with . ! or ?) say twice: a
// sentence said twice, or a run of four words that two sentences share
// ("You are logged in." and "You are logged in as demo.").
func repeatedSentences(lines []string) []string {
	var sentences [][]string // their words, lower case
	var texts []string
	for _, line := range lines {
		for _, s := range sentenceRE.FindAllString(line, -1) {
			texts = append(texts, strings.TrimSpace(s))
			sentences = append(sentences, words(s))
		}
	}
	var out []string
	for i := range sentences {
		for j := range i {
			if run := sharedRun(sentences[i], sentences[j], 4); run != "" {
				out = append(out, fmt.Sprintf("%q and %q both say %q", texts[j], texts[i], run))
			}
		}
	}
	return out
}

// words returns the words of sentence s, in lower case, without the
// punctuation around them: a user name or an address is one word.
func words(s string) []string {
	var out []string
	for _, f := range strings.Fields(strings.ToLower(s)) {
		if w := strings.TrimFunc(f, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) }); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// sharedRun returns the first run of n words of a that b has too, or "";
// a sentence of fewer than n words counts as a run if b is the same.
func sharedRun(a, b []string, n int) string {
	if len(a) < n || len(b) < n {
		if slices.Equal(a, b) {
			return strings.Join(a, " ")
		}
		return ""
	}
	for i := 0; i+n <= len(a); i++ {
		for j := 0; j+n <= len(b); j++ {
			if slices.Equal(a[i:i+n], b[j:j+n]) {
				return strings.Join(a[i:i+n], " ")
			}
		}
	}
	return ""
}

// TestPagesSayThingsOnce checks that no page, in any of its states, says
// the same thing twice (see repeatedSentences).
func TestPagesSayThingsOnce(t *testing.T) {
	t.Parallel()
	for _, p := range everyPage(t) {
		lines := textLines(p.body)
		for _, r := range repeatedSentences(lines) {
			t.Errorf("%s: %s", p.name, r)
		}
		t.Logf("%s:\n\t%s", p.name, strings.Join(lines, "\n\t"))
	}
}

func TestRepeatedSentences(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  int
	}{
		{[]string{"Welcome, demo! You are logged in.", "You are logged in as demo."}, 1},
		{[]string{"Signed out Firefox on Linux.", "Signed out Firefox on Linux."}, 1},
		{[]string{"Log in", "Log in"}, 0}, // a heading and a button: not sentences
		{[]string{"Done.", "Done!"}, 1},
		{[]string{"Started", "Mon 2 Jan 2006 15:04:05 CET", "Started", "Mon 2 Jan 2006 15:04:05 CET"}, 0},
		{[]string{"You are logged in as demo.", "You are not logged in anywhere else.", "Sessions are kept in MongoDB by mongostore."}, 0},
		{[]string{"The server at 127.0.0.1:27018 answers. So the server at 127.0.0.1:27018 is up."}, 1}, // one line, two sentences
		{[]string{"Welcome, a.b.c.d.e!", "You are logged in as a.b.c.d.e."}, 0},                         // a name is one word
	} {
		if got := repeatedSentences(tc.lines); len(got) != tc.want {
			t.Errorf("repeatedSentences(%q) = %q, want %d", tc.lines, got, tc.want)
		}
	}
}
