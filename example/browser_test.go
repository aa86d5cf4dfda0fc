package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
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

// screenshot takes a screenshot of the page into the test's temporary
// directory, and into SCREENSHOT_DIR if set.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	file := filepath.Join(b.t.TempDir(), name)
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	if dir := os.Getenv("SCREENSHOT_DIR"); dir != "" { // to look at them
		_ = os.WriteFile(filepath.Join(dir, name), png, 0o644)
	}
	b.t.Logf("screenshot %s: %d bytes", file, len(png))
}

// login logs in at base as user, as a person would: typing in the form and
// clicking its button. It checks that the home page follows.
func (b *tab) login(base, user, password string) {
	b.t.Helper()
	b.do("open the login page", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.CSS("#password")))
	b.do("fill in the form",
		chromedp.SendKeys(chromedp.CSS("#username"), user),
		chromedp.SendKeys(chromedp.CSS("#password"), password),
	)
	b.clickAndLoad(`form[action="/login"] button[type=submit]`)
	b.do("wait for the home page", chromedp.WaitVisible(chromedp.CSS("#current-user")))
	if got, want := b.location(), base+"/"; got != want {
		b.t.Errorf("location after login %s, want %s", got, want)
	}
	if got := b.text("#current-user"); got != user {
		b.t.Errorf("user on the page %q, want %s", got, user)
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
	if got := b.text("main"); !strings.Contains(got, "Welcome, demo! You are logged in.") || !strings.Contains(got, "Expires if you stay idle") {
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

// layout is how a page lays out its lists of facts (dl.facts), as
// measured in the browser.
type layout struct {
	// Overflow says the page is wider than the window: it scrolls
	// sideways.
	Overflow bool `json:"overflow"`
	// Wrapped are the times that break across lines.
	Wrapped []string `json:"wrapped"`
	// Clipped are the values whose text is wider than their box.
	Clipped []string `json:"clipped"`
	// Stacked counts the labels (dt) with their value (dd) below them,
	// SideBySide those with their value on the same line, Pairs all of
	// them.
	Stacked    int `json:"stacked"`
	SideBySide int `json:"sideBySide"`
	Pairs      int `json:"pairs"`
}

// measureLayout measures the lists of facts of the tab's page.
const measureLayout = `(() => {
	const r = {overflow: document.documentElement.scrollWidth > window.innerWidth,
		wrapped: [], clipped: [], stacked: 0, sideBySide: 0, pairs: 0};
	for (const t of document.querySelectorAll('.facts time')) {
		if (t.getClientRects().length > 1) r.wrapped.push(t.textContent);
	}
	for (const dd of document.querySelectorAll('.facts dd')) {
		if (dd.scrollWidth > dd.clientWidth + 1) r.clipped.push(dd.textContent);
	}
	for (const dt of document.querySelectorAll('.facts dt')) {
		const dd = dt.nextElementSibling;
		const a = dt.getBoundingClientRect(), b = dd.getBoundingClientRect();
		r.pairs++;
		if (b.top >= a.bottom - 1) r.stacked++;
		else if (Math.abs(b.top - a.top) < 2) r.sideBySide++;
	}
	return r;
})()`

// TestBrowserScreenWidths lays out the home page and the page of sessions
// in headless Chromium on a phone's screen (390 px wide) and on a
// desktop's (1280 px): on the phone each label is above its value, on the
// desktop beside it; on both the page does not scroll sideways and no time
// breaks across lines.
func TestBrowserScreenWidths(t *testing.T) {
	t.Parallel()
	chromiumPath(t) // before starting the app: skip (or fail) early
	app := startApp(t, nil)
	browser := startChromium(t)
	other, b := browser.newDeviceTab(), browser.newDeviceTab()
	other.login(app.url, "demo", "demo") // so that /sessions lists another session
	b.login(app.url, "demo", "demo")

	for _, screen := range []struct {
		name          string
		width, height int64
		stacked       bool // labels above values
	}{
		{"phone", 390, 844, true},
		{"desktop", 1280, 800, false},
	} {
		b.do("set the window to "+screen.name, chromedp.EmulateViewport(screen.width, screen.height))
		for _, page := range []struct{ name, path, ready string }{
			{"home", "/", "#current-user"},
			{"sessions", "/sessions", "#sessions"},
		} {
			what := fmt.Sprintf("%s page on a %s (%d px)", page.name, screen.name, screen.width)
			b.do("open "+page.path, chromedp.Navigate(app.url+page.path), chromedp.WaitVisible(chromedp.CSS(page.ready)))
			got, err := chromedp.Run(b.ctx, chromedp.Evaluate[layout](measureLayout))
			if err != nil {
				t.Fatalf("%s: measure the layout: %v", what, err)
			}
			b.screenshot(fmt.Sprintf("width-%s-%d.png", page.name, screen.width))
			t.Logf("%s: %+v", what, got)
			if got.Overflow {
				t.Errorf("%s: the page scrolls sideways", what)
			}
			if len(got.Wrapped) > 0 {
				t.Errorf("%s: times broken across lines: %q", what, got.Wrapped)
			}
			if len(got.Clipped) > 0 {
				t.Errorf("%s: values wider than their box: %q", what, got.Clipped)
			}
			if got.Pairs == 0 {
				t.Fatalf("%s: no labels and values found", what)
			}
			if want := got.Pairs; screen.stacked && got.Stacked != want {
				t.Errorf("%s: %d of %d labels above their value, want all", what, got.Stacked, want)
			}
			if want := got.Pairs; !screen.stacked && got.SideBySide != want {
				t.Errorf("%s: %d of %d labels beside their value, want all", what, got.SideBySide, want)
			}
		}
	}
}
