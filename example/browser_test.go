package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/mongostore/mongostore"
)

// chromiumPath returns the browser to drive: CHROMIUM_PATH, or Debian's
// chromium. Without one the test fails when CI is set (a CI that cannot
// run the browser test must say so), and is skipped otherwise.
func chromiumPath(t *testing.T) string {
	t.Helper()
	path := cmp.Or(os.Getenv("CHROMIUM_PATH"), "/usr/bin/chromium")
	if full, err := exec.LookPath(path); err == nil {
		return full
	}
	const msg = "headless Chromium not found at %s: install the Debian package chromium (apt-get install -y chromium) or set CHROMIUM_PATH"
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf(msg+" (CI is set, so the browser test must run)", path)
	}
	t.Skipf(msg, path)
	return ""
}

// Limits of the browser tests.
const (
	tabTimeout   = 2 * time.Minute  // everything one tab does in a test
	closeBrowser = 30 * time.Second // closing the browser, which waits for its processes
)

// chromium is headless Chromium, started for one test.
type chromium struct {
	t   *testing.T
	ctx context.Context // the browser's first tab
}

// startChromium starts headless Chromium, with a profile of its own, for
// the test, and closes it when the test ends.
func startChromium(t *testing.T) *chromium {
	t.Helper()
	execPath := chromiumPath(t)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(execPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancelCtx := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		// Closing the browser waits for its processes: never forever.
		closed := make(chan struct{})
		go func() {
			cancelCtx()
			cancelAlloc()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(closeBrowser):
			t.Errorf("the browser did not close within %v", closeBrowser)
		}
	})
	// Start the browser now: tabs in new browser contexts need it running.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return &chromium{t: t, ctx: ctx}
}

// firstTab returns the browser's first tab, in its default browser context.
func (c *chromium) firstTab() *tab {
	return newTab(c.t, c.ctx)
}

// newDeviceTab opens a tab in a new browser context of its own (as a
// private window does): its cookies are its own, so to the app it is
// another device.
func (c *chromium) newDeviceTab() *tab {
	ctx, cancel := chromedp.NewContext(c.ctx, chromedp.WithNewBrowserContext())
	c.t.Cleanup(cancel)
	return newTab(c.t, ctx)
}

// tab drives one tab of the browser for a test. Its methods fail the test
// when a step fails.
type tab struct {
	t   *testing.T
	ctx context.Context
}

// newTab returns the tab of the chromedp context ctx, with a time limit.
func newTab(t *testing.T, ctx context.Context) *tab {
	ctx, cancel := context.WithTimeout(ctx, tabTimeout)
	t.Cleanup(cancel)
	return &tab{t: t, ctx: ctx}
}

// do runs steps.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// text returns the text of the first element sel selects.
func (b *tab) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// count returns how many elements sel selects, once the page has loaded.
func (b *tab) count(sel string) int {
	b.t.Helper()
	nodes, err := chromedp.Run(b.ctx, chromedp.Nodes(chromedp.CSSAll(sel), chromedp.AtLeast(0)))
	if err != nil {
		b.t.Fatalf("count %s: %v", sel, err)
	}
	return len(nodes)
}

// location returns the URL of the page.
func (b *tab) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatalf("location: %v", err)
	}
	return loc
}

// clickAndLoad clicks sel and waits for the page it leads to.
func (b *tab) clickAndLoad(sel string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel)))); err != nil {
		b.t.Fatalf("click %s: %v", sel, err)
	}
}

// screenshot takes a screenshot of the whole page into the test's folder
// of screenshotDir, where it stays after the test to be looked at.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	file := filepath.Join(screenshotDir(b.t), name)
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s: %d bytes", file, len(png))
}

// screenshotDir returns the folder of test t's screenshots: one named
// after the test in SCREENSHOT_DIR or, when that is unset, in
// mongostore-example-screenshots in the system's temporary directory. The
// first call of a test run empties it, so it holds this run's only.
func screenshotDir(t *testing.T) string {
	t.Helper()
	root := cmp.Or(os.Getenv("SCREENSHOT_DIR"), filepath.Join(os.TempDir(), "mongostore-example-screenshots"))
	dir := filepath.Join(root, notFileChars.ReplaceAllString(t.Name(), "-"))
	screenshotDirs.Lock()
	defer screenshotDirs.Unlock()
	if !screenshotDirs.made[dir] {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		screenshotDirs.made[dir] = true
	}
	return dir
}

var (
	notFileChars   = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)
	screenshotDirs = struct {
		sync.Mutex
		made map[string]bool
	}{made: map[string]bool{}}
)

// login logs in at base as user, as a person would: typing in the form and
// clicking its button. It checks that the home page follows.
func (b *tab) login(base, user, password string) {
	b.t.Helper()
	b.do("open the login page", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.CSS("#password")))
	b.submitLogin(user, password)
	b.do("wait for the home page", chromedp.WaitVisible(chromedp.CSS("#current-user")))
	if got, want := b.location(), base+"/"; got != want {
		b.t.Errorf("location after login %s, want %s", got, want)
	}
	if got := b.text("#current-user"); got != user {
		b.t.Errorf("user on the page %q, want %s", got, user)
	}
}

// submitLogin fills in the login form of the tab's page and submits it.
func (b *tab) submitLogin(user, password string) {
	b.t.Helper()
	b.do("fill in the form",
		chromedp.SendKeys(chromedp.CSS("#username"), user),
		chromedp.SendKeys(chromedp.CSS("#password"), password),
	)
	b.clickAndLoad(`form[action="/login"] button[type=submit]`)
}

// cookies returns the cookies the tab's browser context keeps for base,
// by name.
func (b *tab) cookies(base string) map[string]*network.Cookie {
	b.t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base}})
	if err != nil {
		b.t.Fatalf("the cookies: %v", err)
	}
	out := map[string]*network.Cookie{}
	for _, c := range res.Cookies {
		out[c.Name] = c
	}
	return out
}

// tamperCookie changes one character of the cookie called name that the
// tab keeps for base, as an attacker would.
func (b *tab) tamperCookie(base, name string) {
	b.t.Helper()
	c := b.cookies(base)[name]
	if c == nil {
		b.t.Fatalf("no cookie %s to tamper with", name)
	}
	value := []byte(c.Value)
	if i := len(value) / 2; value[i] == 'A' {
		value[i] = 'B'
	} else {
		value[i] = 'A'
	}
	_, err := chromedp.Call(b.ctx, network.SetCookie, network.SetCookieParams{Name: name, Value: string(value),
		URL: base, Path: "/", HTTPOnly: &c.HTTPOnly, SameSite: c.SameSite})
	if err != nil {
		b.t.Fatalf("tamper with the cookie %s: %v", name, err)
	}
}

// TestBrowserLoginLogout logs in and out with headless Chromium, as a
// person would: typing in the form and clicking the buttons.
func TestBrowserLoginLogout(t *testing.T) {
	t.Parallel()
	chromiumPath(t) // before starting the app: skip (or fail) early
	app := startApp(t, nil)
	b := startChromium(t).firstTab()

	// Visiting the protected page first leads to the login form.
	b.do("open /", chromedp.Navigate(app.url+"/"), chromedp.WaitVisible(chromedp.CSS("#password")))
	if got, want := b.location(), app.url+"/login"; got != want {
		t.Fatalf("location %s, want %s", got, want)
	}
	b.screenshot("1-login.png")

	b.login(app.url, "demo", "demo")
	if got := b.text("main"); !strings.Contains(got, "Welcome, demo!") || !strings.Contains(got, "Expires if you stay idle") {
		t.Errorf("home page text:\n%s", got)
	}
	b.screenshot("2-home.png")

	b.clickAndLoad(`form[action="/logout"] button[type=submit]`)
	b.do("wait for the login page", chromedp.WaitVisible(chromedp.CSS("#password")))
	if got, want := b.location(), app.url+"/login"; got != want {
		t.Errorf("location after logout %s, want %s", got, want)
	}
	if got := b.text("main"); !strings.Contains(got, "You have been logged out.") {
		t.Errorf("login page after logout:\n%s", got)
	}
	b.screenshot("3-logged-out.png")

	// The session is gone: the protected page sends the browser back.
	b.do("open / again", chromedp.Navigate(app.url+"/"), chromedp.WaitVisible(chromedp.CSS("#password")))
	if got, want := b.location(), app.url+"/login"; got != want {
		t.Errorf("location of / after logout %s, want %s", got, want)
	}
	if n := app.countSessions(t); n != 0 {
		t.Errorf("%d session documents after logout, want 0", n)
	}
}

// TestBrowserSessions ends sessions from the page of sessions in headless
// Chromium. Two devices (tabs in browser contexts of their own, so with
// cookies of their own) log in as the same user; the first sees both
// sessions and ends the other one, whose next page is the login form.
// Then, with three devices, "Sign out all other sessions" does the same
// for two.
func TestBrowserSessions(t *testing.T) {
	t.Parallel()
	chromiumPath(t) // before starting the app: skip (or fail) early
	app := startApp(t, nil)
	browser := startChromium(t)
	first, second := browser.newDeviceTab(), browser.newDeviceTab()
	first.login(app.url, "demo", "demo")
	second.login(app.url, "demo", "demo")

	// openSessions follows the home page's link to the page of sessions.
	openSessions := func(b *tab) {
		t.Helper()
		b.do("open /", chromedp.Navigate(app.url+"/"), chromedp.WaitVisible(chromedp.CSS("#sessions-link")))
		b.clickAndLoad("#sessions-link")
		b.do("wait for the page of sessions", chromedp.WaitVisible(chromedp.CSS("#sessions")))
		if got, want := b.location(), app.url+"/sessions"; got != want {
			t.Fatalf("location %s, want %s", got, want)
		}
	}
	// wantSessions checks how many sessions the page lists, and that one
	// of them is marked as this device's.
	wantSessions := func(b *tab, n int) {
		t.Helper()
		if got := b.count("li.session"); got != n {
			t.Fatalf("%d sessions listed, want %d:\n%s", got, n, b.text("main"))
		}
		if got := b.count("li.session.current"); got != 1 {
			t.Errorf("%d sessions marked current, want 1", got)
		}
		if got := b.text("li.session.current .device"); !strings.HasSuffix(got, "(this device)") {
			t.Errorf("current session's heading %q, want it to end in (this device)", got)
		}
		if got := b.count(`li.session.current button`); got != 0 {
			t.Errorf("the current session has %d buttons, want none", got)
		}
	}
	// wantLoggedOut checks that b's next page is the login form.
	wantLoggedOut := func(b *tab, who string) {
		t.Helper()
		b.do("open / ("+who+")", chromedp.Navigate(app.url+"/"), chromedp.WaitVisible(chromedp.CSS("#password")))
		if got, want := b.location(), app.url+"/login"; got != want {
			t.Errorf("%s: location of / %s, want %s", who, got, want)
		}
	}

	openSessions(first)
	wantSessions(first, 2)
	device := first.text("li.session:not(.current) .device")
	if device == "" || strings.Contains(device, "Unknown") || strings.Contains(device, "Mozilla") {
		t.Errorf("the other session's device label is %q, want the kind of browser and system", device)
	}
	first.screenshot("sessions-1-two.png")

	first.clickAndLoad(`li.session:not(.current) form[action="/sessions/end"] button[type=submit]`)
	first.do("wait for the page of sessions", chromedp.WaitVisible(chromedp.CSS("#sessions")))
	if got, want := first.location(), app.url+"/sessions"; got != want {
		t.Errorf("location after ending a session %s, want %s", got, want)
	}
	if got := first.text("main"); !strings.Contains(got, "Signed out "+device+".") {
		t.Errorf("page after ending a session:\n%s", got)
	}
	wantSessions(first, 1)
	first.screenshot("sessions-2-ended.png")
	wantLoggedOut(second, "the device whose session was ended")

	// Three devices: the first signs out the two others.
	second.login(app.url, "demo", "demo")
	third := browser.newDeviceTab()
	third.login(app.url, "demo", "demo")
	openSessions(first)
	wantSessions(first, 3)
	first.clickAndLoad(`form[action="/sessions/end-others"] button[type=submit]`)
	first.do("wait for the page of sessions", chromedp.WaitVisible(chromedp.CSS("#sessions")))
	if got := first.text("main"); !strings.Contains(got, "Signed out 2 other sessions.") || !strings.Contains(got, "You are not logged in anywhere else.") {
		t.Errorf("page after ending the other sessions:\n%s", got)
	}
	wantSessions(first, 1)
	first.screenshot("sessions-3-others-ended.png")
	wantLoggedOut(second, "second device")
	wantLoggedOut(third, "third device")

	first.do("open / (first device)", chromedp.Navigate(app.url+"/"), chromedp.WaitVisible(chromedp.CSS("#current-user")))
	if n := app.countSessions(t); n != 1 {
		t.Errorf("%d session documents, want 1", n)
	}
}

// TestBrowserSessionNotices shows, in headless Chromium, the notice of
// each way a session can end without its browser's doing, on both screens
// of screens, and checks each page's layout (see checkLayout) and that the
// notice is a warning, amber (see checkNotices): a session ended from
// another device (the limit of one session per user ends it when another
// device logs in), a session cookie tampered with, found on /sessions (the
// login form returns there), and a session that expired
// (SESSION_MAX_AGE=2s: the browser has dropped the session cookie by
// then, and the hint alone tells). Each time the response that finds the
// session gone leaves neither the session cookie nor the hint behind, and
// the notice shows once.
func TestBrowserSessionNotices(t *testing.T) {
	t.Parallel()
	chromiumPath(t) // before starting the app: skip (or fail) early
	const maxAge = 2 * time.Second
	limited := startApp(t, func(c *config) { c.MaxSessionsPerUser = 1 })
	short := startApp(t, func(c *config) { c.MaxAge = maxAge })
	browser := startChromium(t)

	// The sessions that expire, one for each screen, all at once.
	expiring := make([]*tab, len(screens))
	for i := range screens {
		expiring[i] = browser.newDeviceTab()
		expiring[i].login(short.url, "demo", "demo")
	}
	idleSince := time.Now()

	for i := range screens {
		victim := browser.newDeviceTab()
		victim.setScreen(i)
		victim.login(limited.url, "demo", "demo")
		browser.newDeviceTab().login(limited.url, "demo", "demo") // beyond the limit: ends the victim's session
		victim.checkEndedNotice(limited.url, "/", i, "notice-ended-elsewhere", noticeElsewhere)

		tampered := browser.newDeviceTab()
		tampered.setScreen(i)
		tampered.login(limited.url, "demo", "demo")
		tampered.tamperCookie(limited.url, sessionName)
		tampered.checkEndedNotice(limited.url, "/sessions", i, "notice-unreadable", noticeUnreadable)
		tampered.submitLogin("demo", "demo")
		tampered.do("wait for the page of sessions", chromedp.WaitVisible(chromedp.CSS("#sessions")))
		if got, want := tampered.location(), limited.url+"/sessions"; got != want {
			t.Errorf("location after logging in again %s, want %s", got, want)
		}
	}

	time.Sleep(time.Until(idleSince.Add(maxAge + 500*time.Millisecond)))
	for i, b := range expiring {
		b.setScreen(i)
		cookies := b.cookies(short.url)
		if cookies[sessionName] != nil || cookies[hintName] == nil {
			t.Errorf("the browser keeps the cookies %v after the session expired, want the hint only", slices.Collect(maps.Keys(cookies)))
		}
		b.checkEndedNotice(short.url, "/", i, "notice-expired", "Your session expired after 2 seconds without activity. Please log in again.")
	}
}

// checkEndedNotice opens path at base on the tab, whose session has
// ended, on screen i of screens: it checks that the login form follows
// (returning to path), with the notice want, a warning, and no other
// message, checks the page's layout under the name name, and that the
// browser keeps neither the session cookie nor the hint. Then it opens the
// same login form again, which no longer says it.
func (b *tab) checkEndedNotice(base, path string, i int, name, want string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("#password")))
	login := base + "/login"
	if path != "/" {
		login += "?next=" + path
	}
	if got := b.location(); got != login {
		b.t.Errorf("%s: location %s, want %s", name, got, login)
	}
	notices := b.checkNotices(name)
	if len(notices) != 1 || notices[0].Text != want || notices[0].Class != "flash "+kindWarning {
		b.t.Errorf("%s: messages %+v, want the warning %q only", name, notices, want)
	}
	b.checkLayout(name, i)
	if cookies := b.cookies(base); cookies[sessionName] != nil || cookies[hintName] != nil {
		b.t.Errorf("%s: the browser keeps the cookies %v, want neither the session's nor the hint", name, slices.Collect(maps.Keys(cookies)))
	}
	b.do("open the login form again", chromedp.Navigate(login), chromedp.WaitVisible(chromedp.CSS("#password")))
	if n := b.count(".flash"); n != 0 {
		b.t.Errorf("%s: the login form opened again shows %d messages, want none:\n%s", name, n, b.text("main"))
	}
}

// screens are the window sizes the layout tests use: a phone's (labels
// above their values) and a desktop's (labels beside them).
var screens = []struct {
	name          string
	width, height int64
	mobile        bool // emulate a phone: the viewport meta tag counts, touch
	stacked       bool // labels (dt) above their values (dd)
}{
	{"phone", 390, 844, true, true},
	{"desktop", 1280, 800, false, false},
}

// layout is how a page is laid out, as measured in the browser by
// measureLayout.
type layout struct {
	// ScrollWidth is the page's width, InnerWidth the window's: the page
	// scrolls sideways when the first is larger.
	ScrollWidth int `json:"scrollWidth"`
	InnerWidth  int `json:"innerWidth"`
	// Wrapped are the times (<time>) that take more than one line.
	Wrapped []string `json:"wrapped"`
	// Broken are the words split across lines although they fit on one
	// line of the page's box (main): "12:09:2" above "1 UTC", "gorouti"
	// above "ne", in a column squeezed by its neighbour.
	Broken []string `json:"broken"`
	// Long are the words wider than the page's box, which may break
	// anywhere (a 64-character user name on a phone).
	Long []string `json:"long"`
	// Outside are the words whose text goes past the right edge of the
	// page's box (main), or of the window for text outside it.
	Outside []string `json:"outside"`
	// Stacked counts the labels (dt) with their value (dd) below them,
	// SideBySide those with their value on the same line, Pairs all of
	// them.
	Stacked    int `json:"stacked"`
	SideBySide int `json:"sideBySide"`
	Pairs      int `json:"pairs"`
}

// measureLayout measures the page of a tab. Every word of every text node
// is measured with a Range: its boxes say on how many lines it lies and
// where it ends; a canvas measures the width it would take on one line,
// to compare with the width of the page's box.
// (<wbr> splits a path into text nodes, so each of its parts is a word.)
const measureLayout = `(() => {
	const main = document.querySelector('main');
	const ms = getComputedStyle(main), mr = main.getBoundingClientRect();
	const mainRight = mr.right - parseFloat(ms.borderRightWidth) - parseFloat(ms.paddingRight);
	const r = {scrollWidth: document.scrollingElement.scrollWidth, innerWidth: window.innerWidth,
		wrapped: [], broken: [], long: [], outside: [], stacked: 0, sideBySide: 0, pairs: 0};
	const lineHeight = el => {
		const s = getComputedStyle(el), lh = parseFloat(s.lineHeight);
		return isNaN(lh) ? 1.2 * parseFloat(s.fontSize) : lh;
	};
	for (const t of document.querySelectorAll('time')) {
		if (t.getClientRects().length > 1 || t.getBoundingClientRect().height > 1.5 * lineHeight(t)) {
			r.wrapped.push(t.textContent);
		}
	}
	const mainWidth = mainRight - mr.left - parseFloat(ms.borderLeftWidth) - parseFloat(ms.paddingLeft);
	const canvas = document.createElement('canvas').getContext('2d');
	const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	for (let n = walker.nextNode(); n; n = walker.nextNode()) {
		const el = n.parentElement;
		if (!el || el.closest('script, style')) continue;
		const inMain = !!el.closest('main');
		const right = inMain ? mainRight : window.innerWidth;
		const room = inMain ? mainWidth : window.innerWidth;
		canvas.font = getComputedStyle(el).font;
		for (const m of n.data.matchAll(/\S+/g)) {
			const range = document.createRange();
			range.setStart(n, m.index);
			range.setEnd(n, m.index + m[0].length);
			const boxes = [...range.getClientRects()].filter(b => b.width > 0);
			if (boxes.some(b => b.right > right + 1)) r.outside.push(m[0]);
			const lines = new Set(boxes.map(b => Math.round(b.bottom))).size;
			if (canvas.measureText(m[0]).width > room + 1) r.long.push(m[0]);
			else if (lines > 1) r.broken.push(m[0]);
		}
	}
	for (const dt of document.querySelectorAll('.facts dt')) {
		const a = dt.getBoundingClientRect(), b = dt.nextElementSibling.getBoundingClientRect();
		r.pairs++;
		if (b.top >= a.bottom - 1) r.stacked++;
		else if (Math.abs(b.top - a.top) < 2) r.sideBySide++;
	}
	return r;
})()`

// setScreen sets the tab's window to the size of a screen of screens.
func (b *tab) setScreen(i int) {
	b.t.Helper()
	s := screens[i]
	var opts []chromedp.EmulateViewportOption
	if s.mobile {
		opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateTouch)
	}
	b.do("set the window to a "+s.name+"'s", chromedp.EmulateViewport(s.width, s.height, opts...))
}

// checkLayout measures the layout of the tab's page, on screen i of
// screens, takes its screenshot (name-WIDTH.png), and checks it: no
// sentence says again what another says (see repeatedSentences), the page
// does not scroll sideways, no text sticks out of the page's box, no time
// takes two lines, no word is split across lines unless it is wider than
// its box, and the lists of facts have their labels above their values on
// a phone, beside them on a desktop. It returns the measures.
func (b *tab) checkLayout(name string, i int) layout {
	b.t.Helper()
	s := screens[i]
	what := fmt.Sprintf("%s on a %s (%d px)", name, s.name, s.width)
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[layout](measureLayout))
	if err != nil {
		b.t.Fatalf("%s: measure the layout: %v", what, err)
	}
	b.screenshot(fmt.Sprintf("%s-%d.png", name, s.width))
	b.t.Logf("%s: %+v", what, got)
	text, err := chromedp.Run(b.ctx, chromedp.Evaluate[string]("document.body.innerText"))
	if err != nil {
		b.t.Fatalf("%s: the page's text: %v", what, err)
	}
	for _, r := range repeatedSentences(strings.Split(text, "\n")) {
		b.t.Errorf("%s: %s", what, r)
	}
	if got.ScrollWidth > got.InnerWidth {
		b.t.Errorf("%s: the page scrolls sideways: %d px wide in a %d px window", what, got.ScrollWidth, got.InnerWidth)
	}
	if len(got.Outside) > 0 {
		b.t.Errorf("%s: text sticks out of the page: %q", what, got.Outside)
	}
	if len(got.Wrapped) > 0 {
		b.t.Errorf("%s: times over more than one line: %q", what, got.Wrapped)
	}
	if len(got.Broken) > 0 {
		b.t.Errorf("%s: words split across lines although they fit on one: %q", what, got.Broken)
	}
	switch {
	case got.Pairs == 0:
	case s.stacked && got.Stacked != got.Pairs:
		b.t.Errorf("%s: %d of %d labels above their value, want all", what, got.Stacked, got.Pairs)
	case !s.stacked && got.SideBySide != got.Pairs:
		b.t.Errorf("%s: %d of %d labels beside their value, want all", what, got.SideBySide, got.Pairs)
	}
	return got
}

// buttonStyle is a button of a page: its label and its colours, as the
// browser computed them ("rgb(179, 38, 30)").
type buttonStyle struct {
	Label      string `json:"label"`
	Background string `json:"background"`
	Border     string `json:"border"`
}

const measureButtons = `[...document.querySelectorAll('button')].map(b => {
	const s = getComputedStyle(b);
	return {label: b.textContent.trim(), background: s.backgroundColor, border: s.borderTopColor};
})`

var (
	rgbRE  = regexp.MustCompile(`^rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)$`)
	srgbRE = regexp.MustCompile(`^color\(srgb ([\d.e-]+) ([\d.e-]+) ([\d.e-]+)(?: / ([\d.]+))?\)$`)
)

// rgba reads a CSS colour the browser computed: "rgb(179, 38, 30)",
// "rgba(0, 0, 0, 0)", or "color(srgb 0.86 0.95 0.9)" (a color-mix in
// srgb), as red, green and blue from 0 to 255 and alpha from 0 to 1.
func rgba(color string) (rgb [3]float64, alpha float64, ok bool) {
	scale, m := 1.0, rgbRE.FindStringSubmatch(color)
	if m == nil {
		scale, m = 255, srgbRE.FindStringSubmatch(color)
	}
	if m == nil {
		return rgb, 0, false
	}
	for i := range rgb {
		v, _ := strconv.ParseFloat(m[i+1], 64)
		rgb[i] = v * scale
	}
	alpha = 1
	if m[4] != "" {
		alpha, _ = strconv.ParseFloat(m[4], 64)
	}
	return rgb, alpha, true
}

// hue says what colour a CSS colour the browser computed is, by its hue
// (however light): "red", "amber", "green", "blue", "grey" (no hue),
// "transparent" or "other".
func hue(color string) string {
	c, alpha, ok := rgba(color)
	switch {
	case !ok:
		return "other"
	case alpha == 0:
		return "transparent"
	}
	hi, lo := max(c[0], c[1], c[2]), min(c[0], c[1], c[2])
	if hi-lo < 12 {
		return "grey"
	}
	var deg float64 // the hue, 0 to 360
	switch hi {
	case c[0]:
		deg = math.Mod(60*(c[1]-c[2])/(hi-lo)+360, 360)
	case c[1]:
		deg = 60*(c[2]-c[0])/(hi-lo) + 120
	default:
		deg = 60*(c[0]-c[1])/(hi-lo) + 240
	}
	switch {
	case deg < 20 || deg >= 330:
		return "red"
	case deg < 65:
		return "amber"
	case deg >= 80 && deg < 170:
		return "green"
	case deg >= 190 && deg < 260:
		return "blue"
	}
	return "other"
}

// TestHue checks hue on the colours of the style sheet as Chromium
// computes them: a color-mix() as color(srgb …).
func TestHue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ color, want string }{
		{"rgb(19, 170, 82)", "green"}, // #13aa52: Log in, a success's bar
		{"rgb(14, 138, 65)", "green"},
		{"rgb(179, 38, 30)", "red"},                     // #b3261e: Log out, Sign out
		{"rgb(221, 51, 51)", "red"},                     // #d33: an error's bar
		{"rgb(232, 162, 0)", "amber"},                   // #e8a200: a warning's bar
		{"rgb(26, 115, 232)", "blue"},                   // #1a73e8: an information's bar
		{"color(srgb 0.861176 0.95 0.898235)", "green"}, // their backgrounds, mixed with white
		{"color(srgb 0.98 0.88 0.88)", "red"},
		{"color(srgb 0.9838 0.9344 0.82)", "amber"},
		{"color(srgb 0.8833 0.9286 0.9883)", "blue"},
		{"rgba(0, 0, 0, 0)", "transparent"},
		{"color(srgb 1 1 1 / 0)", "transparent"},
		{"rgb(128, 128, 128)", "grey"},
		{"rgb(255, 255, 255)", "grey"},
		{"rgb(128, 0, 128)", "other"}, // purple
		{"canvas", "other"},
	} {
		if got := hue(tc.color); got != tc.want {
			t.Errorf("hue(%q) = %q, want %q", tc.color, got, tc.want)
		}
	}
}

// checkButtons checks the colours of the buttons of the tab's page: the
// ones that end a session (Log out, Sign out …) a red outline on no
// background, the others green.
func (b *tab) checkButtons(page string) {
	b.t.Helper()
	buttons, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]buttonStyle](measureButtons))
	if err != nil {
		b.t.Fatalf("%s: measure the buttons: %v", page, err)
	}
	for _, btn := range buttons {
		want := [2]string{"green", "green"}
		if strings.HasPrefix(btn.Label, "Log out") || strings.HasPrefix(btn.Label, "Sign out") {
			want = [2]string{"transparent", "red"}
		}
		if got := [2]string{hue(btn.Background), hue(btn.Border)}; got != want {
			b.t.Errorf("%s: button %q: background %s (%s), border %s (%s); want %s and %s",
				page, btn.Label, btn.Background, got[0], btn.Border, got[1], want[0], want[1])
		}
	}
}

// shownNotice is a message of a page (.flash, .error): its classes, its
// text and its colours, as the browser computed them.
type shownNotice struct {
	Class      string `json:"class"`
	Text       string `json:"text"`
	Background string `json:"background"`
	Bar        string `json:"bar"`
}

const measureNotices = `[...document.querySelectorAll('.flash, .error')].map(n => {
	const s = getComputedStyle(n);
	return {class: n.className, text: n.textContent.trim(), background: s.backgroundColor, bar: s.borderLeftColor};
})`

// noticeHues are the colours of the kinds of messages, by the class that
// gives the kind: of their background and of their bar.
var noticeHues = map[string]string{kindSuccess: "green", kindInfo: "blue", kindWarning: "amber", "error": "red"}

// checkNotices checks the colours of the messages of the tab's page: each
// has a kind, whose colour (see noticeHues) its background and its bar
// have. It returns the messages.
func (b *tab) checkNotices(page string) []shownNotice {
	b.t.Helper()
	notices, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]shownNotice](measureNotices))
	if err != nil {
		b.t.Fatalf("%s: measure the messages: %v", page, err)
	}
	for _, n := range notices {
		i := slices.IndexFunc(strings.Fields(n.Class), func(c string) bool { return noticeHues[c] != "" })
		if i < 0 {
			b.t.Errorf("%s: message %q has the classes %q: no kind", page, n.Text, n.Class)
			continue
		}
		want := noticeHues[strings.Fields(n.Class)[i]]
		if got := [2]string{hue(n.Background), hue(n.Bar)}; got != [2]string{want, want} {
			b.t.Errorf("%s: message %q (%s): background %s (%s), bar %s (%s); want both %s",
				page, n.Text, n.Class, n.Background, got[0], n.Bar, got[1], want)
		}
	}
	return notices
}

// wantFocus checks that the element with the focus on the tab's page is
// the one whose id is id.
func (b *tab) wantFocus(page, id string) {
	b.t.Helper()
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.activeElement ? document.activeElement.id : ""`))
	if err != nil {
		b.t.Fatalf("%s: the focused element: %v", page, err)
	}
	if got != id {
		b.t.Errorf("%s: the focus is on #%s, want #%s", page, got, id)
	}
}

// TestBrowserScreenWidths lays out every page of the app in headless
// Chromium on a phone's screen (390×844) and on a desktop's (1280×800),
// takes a screenshot of each (see screenshotDir) and checks the layout
// (see checkLayout): the login form, the form after a wrong password, the
// 404 page, the 405 page (GET /logout, typed in), the home page, the page
// of sessions with its activity log, that page with the notice of a
// device signed out for the limit of sessions per user (2: at each width
// another user logs in on a third device), and the login form that
// /sessions leads to, which returns there (bob logs in on a new device at
// each width); the colours of their buttons (see checkButtons) and of
// their messages (see checkNotices); and which field of the login form
// has the focus: the user name's, the password's after a wrong password.
func TestBrowserScreenWidths(t *testing.T) {
	t.Parallel()
	chromiumPath(t) // before starting the app: skip (or fail) early
	app := startApp(t, func(c *config) {
		c.MaxSessionsPerUser = 2
		c.Users = append(c.Users, credential{Name: "alice", Password: "alice-pw"}, credential{Name: "bob", Password: "bob-pw"})
	})
	browser := startChromium(t)
	anon, other, b := browser.newDeviceTab(), browser.newDeviceTab(), browser.newDeviceTab()
	other.login(app.url, "demo", "demo") // so that /sessions lists another session
	b.login(app.url, "demo", "demo")
	browser.newDeviceTab().login(app.url, "alice", "alice-pw")
	browser.newDeviceTab().login(app.url, "alice", "alice-pw")

	for i := range screens {
		checkAnonymousPages(anon, app.url, i)
		b.setScreen(i)
		for _, page := range []struct{ name, path, ready string }{
			{"home", "/", "#current-user"},
			{"sessions", "/sessions", "#sessions"},
		} {
			b.do("open "+page.path, chromedp.Navigate(app.url+page.path), chromedp.WaitVisible(chromedp.CSS(page.ready)))
			if got := b.checkLayout(page.name, i); got.Pairs == 0 {
				t.Errorf("%s page: no labels and values found", page.name)
			}
			b.checkButtons(page.name)
			b.checkNotices(page.name)
		}
		checkLimitPage(t, browser.newDeviceTab(), app.url, i)
		checkReturnToPage(t, browser.newDeviceTab(), app.url, i)
	}
}

// checkAnonymousPages checks the layout of the pages of a visitor who is
// not logged in, on the tab, on screen i of screens: the login form, its
// buttons and focus, before and after a wrong password (and the colour of
// the error), the 404 page, and the 405 page of GET /logout.
func checkAnonymousPages(anon *tab, base string, i int) {
	anon.t.Helper()
	anon.setScreen(i)
	anon.do("open /login", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.CSS("#password")))
	anon.checkLayout("login", i)
	anon.checkButtons("login")
	anon.wantFocus("the login form", "username")
	anon.do("fill in a wrong password",
		chromedp.SendKeys(chromedp.CSS("#username"), "demo"),
		chromedp.SendKeys(chromedp.CSS("#password"), "wrong"),
	)
	anon.clickAndLoad(`form[action="/login"] button[type=submit]`)
	anon.do("wait for the error", chromedp.WaitVisible(chromedp.CSS(".error")))
	anon.checkLayout("login-error", i)
	anon.wantFocus("the login form after a wrong password", "password")
	if n := anon.checkNotices("login-error"); len(n) != 1 || n[0].Text != "Wrong username or password." {
		anon.t.Errorf("login form after a wrong password: messages %+v, want the error", n)
	}
	anon.do("open a page that does not exist", chromedp.Navigate(base+"/no-such-page"), chromedp.WaitVisible(chromedp.CSS("#home-link")))
	anon.checkLayout("not-found", i)
	anon.do("type /logout in the address bar", chromedp.Navigate(base+"/logout"), chromedp.WaitVisible(chromedp.CSS("#home-link")))
	if got, want := anon.text("h1"), "Not available this way"; got != want {
		anon.t.Errorf("GET /logout: heading %q, want %q", got, want)
	}
	anon.checkLayout("method-not-allowed", i)
}

// checkReturnToPage opens /sessions on the tab, a new device, on screen i
// of screens: it leads to the login form, whose layout it checks, and
// logging in there as bob returns to /sessions.
func checkReturnToPage(t *testing.T, b *tab, base string, i int) {
	t.Helper()
	b.setScreen(i)
	b.do("open /sessions", chromedp.Navigate(base+"/sessions"), chromedp.WaitVisible(chromedp.CSS("#password")))
	if got, want := b.location(), base+"/login?next=/sessions"; got != want {
		t.Errorf("location of /sessions before login %s, want %s", got, want)
	}
	if got, want := b.text("#next-note"), "Once logged in, you go on to the page you asked for."; got != want {
		t.Errorf("the login form says %q, want %q", got, want)
	}
	b.checkLayout("login-next", i)
	b.submitLogin("bob", "bob-pw")
	b.do("wait for the page of sessions", chromedp.WaitVisible(chromedp.CSS("#sessions")))
	if got, want := b.location(), base+"/sessions"; got != want {
		t.Errorf("location after the login %s, want %s", got, want)
	}
	if got := b.text("#current-user"); got != "bob" {
		t.Errorf("user on the page %q, want bob", got)
	}
}

// checkLimitPage logs alice in on the tab, a new device beyond her limit
// of sessions, on screen i of screens, and checks the layout and the
// buttons of her page of sessions, with its notice of the device signed
// out and its activity log.
func checkLimitPage(t *testing.T, b *tab, base string, i int) {
	t.Helper()
	b.setScreen(i)
	b.login(base, "alice", "alice-pw")
	b.do("open /sessions", chromedp.Navigate(base+"/sessions"), chromedp.WaitVisible(chromedp.CSS("#limit-notice")))
	const want = "Your least recently used session (Chrome on Linux) was signed out when you signed in here: at most 2 sessions per user."
	if got := b.text("#limit-notice"); got != want {
		t.Errorf("limit notice %q, want %q", got, want)
	}
	if n := b.count("#activity li .limit"); n != i+1 {
		t.Errorf("%d sign-ins ended by the limit in the activity log, want %d:\n%s", n, i+1, b.text("main"))
	}
	b.checkLayout("sessions-limit", i)
	b.checkButtons("sessions-limit")
	if n := b.checkNotices("sessions-limit"); len(n) != 1 || !strings.Contains(n[0].Class, kindWarning) {
		t.Errorf("messages %+v, want the limit notice, a warning", n)
	}
}

// longContentServer serves the app's pages, rendered by its templates,
// with the longest content they can show, for user longName and the
// embedded server's data directory dataDir, until the test ends: /login
// (with the longest notice, a warning, and the error), / (with a success
// message), /sessions (with a success message), and /sessions/no-activity
// (with an information message).
func longContentServer(t *testing.T, longName, dataDir string) *httptest.Server {
	t.Helper()
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	a := &app{pages: pages, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	now := time.Now().Truncate(time.Second)
	mode, how := describeExpiry(mongostore.ExpiryGC)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		a.render(w, http.StatusUnprocessableEntity, "login", loginPage{
			Flashes:  []flash{{kindWarning, fmt.Sprintf(noticeIdle, spellDuration(sessionLifetime-time.Second))}},
			Username: longName, Error: "Wrong username or password.", Next: "/sessions",
		})
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		a.render(w, http.StatusOK, "home", homePage{
			Flashes: []flash{{kindSuccess, "Welcome, " + longName + "!"}}, Username: longName,
			Times: timesAged(now, 0), AbsoluteExpiresAt: now.Add(sessionLifetime),
			Expiry: mode, ExpiryHow: how, Server: "embedded FerretDB (SQLite) in " + dataDir,
		})
	})
	mux.HandleFunc("GET /sessions", func(w http.ResponseWriter, r *http.Request) {
		a.render(w, http.StatusOK, "sessions", longSessionsPage(longName, now))
	})
	mux.HandleFunc("GET /sessions/no-activity", func(w http.ResponseWriter, r *http.Request) {
		page := longSessionsPage(longName, now)
		page.Activity, page.LimitNotice = nil, ""
		page.Flashes = []flash{{kindInfo, "That session had already ended."}}
		a.render(w, http.StatusOK, "sessions", page)
	})
	mux.HandleFunc("GET /static/style.css", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, staticFS, "static/style.css")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// timesAged returns the times of a session that started age before now,
// was last used half-way since, and expires defaultMaxAge after that.
func timesAged(now time.Time, age time.Duration) mongostore.SessionTimes {
	return mongostore.SessionTimes{CreatedAt: now.Add(-age), UpdatedAt: now.Add(-age / 2), ExpiresAt: now.Add(defaultMaxAge - age/2)}
}

// longSessionsPage returns the page of sessions of user with the most it
// can show at now: three sessions, a flash, a limit notice naming two
// devices and a full activity log.
func longSessionsPage(user string, now time.Time) sessionsPage {
	return sessionsPage{
		Flashes: []flash{{kindSuccess, "Signed out Firefox on Android."}}, Username: user, Others: 2, Current: "a",
		Sessions: []mongostore.OwnedSession{
			{Handle: "a", Current: true, Device: "Chrome on Linux", SessionTimes: timesAged(now, time.Hour)},
			{Handle: "b", Device: "Firefox on Android", SessionTimes: timesAged(now, 3*time.Hour)},
			{Handle: "c", Device: noDevice, SessionTimes: timesAged(now, 50*time.Hour)},
		},
		LimitNotice:  limitNotice([]string{"Unknown browser on unknown device", "Samsung Internet on Android"}, 3),
		Activity:     longActivity(now),
		ActivityKept: activityPerUser,
	}
}

// longActivity returns a full activity log of sign-ins before now, each
// kind of ending among them, with the longest device labels; the first,
// "a", is the current session's.
func longActivity(now time.Time) []signIn {
	endings := []string{"", endedHere, endedElsewhere, endedByLimit, endedExpired}
	devices := []string{"Unknown browser on unknown device", "Samsung Internet on Android", "Yandex Browser on ChromeOS"}
	var out []signIn
	for i := range activityPerUser {
		s := signIn{Handle: string(rune('a' + i)), Device: devices[i%len(devices)], At: now.Add(-time.Duration(i+1) * time.Hour)}
		if s.Ended = endings[i%len(endings)]; s.Ended != "" {
			s.EndedAt = s.At.Add(30 * time.Minute)
		}
		out = append(out, s)
	}
	return out
}

// TestBrowserLongContent lays out the app's pages, rendered by the app's
// templates with its style sheet, with the longest content they can show,
// on both screens of screens: a user name of 64 characters, the data
// directory of the embedded server (a long path), three sessions, flashes
// and errors, a full activity log and a limit notice naming two devices;
// and the page of sessions with no activity yet (after a restart). A path
// breaks after a slash, where it must break; a user name wider than the
// screen may break anywhere, but nothing sticks out.
func TestBrowserLongContent(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	longName := strings.Repeat("long.user_name.", 5)[:maxNameLen] // no hyphen: no place to break
	dataDir := "/home/someone/src/github.com/mongostore/mongostore/example/.data"
	srv := longContentServer(t, longName, dataDir)

	b := startChromium(t).firstTab()
	for i := range screens {
		b.setScreen(i)
		for _, page := range []struct{ name, path, ready string }{
			{"login", "/login", "#password"},
			{"home", "/", "#current-user"},
			{"sessions", "/sessions", "#sessions"},
			{"sessions-no-activity", "/sessions/no-activity", "#sessions"},
		} {
			b.do("open "+page.path, chromedp.Navigate(srv.URL+page.path), chromedp.WaitVisible(chromedp.CSS(page.ready)))
			got := b.checkLayout("long-"+page.name, i)
			b.checkNotices("long-" + page.name)
			if page.name != "home" {
				continue
			}
			if slices.ContainsFunc(got.Long, func(w string) bool { return strings.Contains(w, "/") }) {
				t.Errorf("home page on a %s: a part of the data path is wider than its box: %q", screens[i].name, got.Long)
			}
			if got := b.text("#server"); got != "embedded FerretDB (SQLite) in "+dataDir {
				t.Errorf("the server's line reads %q", got)
			}
		}
	}
}
