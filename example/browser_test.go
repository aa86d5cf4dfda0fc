package main

import (
	"cmp"
	"context"
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

// TestBrowserLoginLogout logs in and out with headless Chromium, as a
// person would: typing in the form and clicking the buttons.
func TestBrowserLoginLogout(t *testing.T) {
	t.Parallel()
	execPath := chromiumPath(t)
	app := startApp(t, nil)

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
	defer func() {
		// Closing the browser waits for its processes: never forever.
		closed := make(chan struct{})
		go func() {
			cancelCtx()
			cancelAlloc()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Errorf("the browser did not close within 30s")
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	location := func() string {
		t.Helper()
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatalf("location: %v", err)
		}
		return loc
	}
	// clickAndLoad clicks sel and waits for the page it leads to.
	clickAndLoad := func(sel string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel)))); err != nil {
			t.Fatalf("click %s: %v", sel, err)
		}
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		file := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		if dir := os.Getenv("SCREENSHOT_DIR"); dir != "" { // to look at them
			_ = os.WriteFile(filepath.Join(dir, name), png, 0o644)
		}
		t.Logf("screenshot %s: %d bytes", file, len(png))
	}

	// Visiting the protected page first leads to the login form.
	do("open /", chromedp.Navigate(app.url+"/"), chromedp.WaitVisible(chromedp.CSS("#password")))
	if got, want := location(), app.url+"/login"; got != want {
		t.Fatalf("location %s, want %s", got, want)
	}
	screenshot("1-login.png")

	do("fill in the form",
		chromedp.SendKeys(chromedp.CSS("#username"), "demo"),
		chromedp.SendKeys(chromedp.CSS("#password"), "demo"),
	)
	clickAndLoad(`form[action="/login"] button[type=submit]`)
	do("wait for the home page", chromedp.WaitVisible(chromedp.CSS("#current-user")))
	if got, want := location(), app.url+"/"; got != want {
		t.Errorf("location after login %s, want %s", got, want)
	}
	if got := text("#current-user"); got != "demo" {
		t.Errorf("user on the page %q, want demo", got)
	}
	if got := text("main"); !strings.Contains(got, "Welcome, demo! You are logged in.") || !strings.Contains(got, "Expires if you stay idle") {
		t.Errorf("home page text:\n%s", got)
	}
	screenshot("2-home.png")

	clickAndLoad(`form[action="/logout"] button[type=submit]`)
	do("wait for the login page", chromedp.WaitVisible(chromedp.CSS("#password")))
	if got, want := location(), app.url+"/login"; got != want {
		t.Errorf("location after logout %s, want %s", got, want)
	}
	if got := text("main"); !strings.Contains(got, "You have been logged out.") {
		t.Errorf("login page after logout:\n%s", got)
	}
	screenshot("3-logged-out.png")

	// The session is gone: the protected page sends the browser back.
	do("open / again", chromedp.Navigate(app.url+"/"), chromedp.WaitVisible(chromedp.CSS("#password")))
	if got, want := location(), app.url+"/login"; got != want {
		t.Errorf("location of / after logout %s, want %s", got, want)
	}
	if n := app.countSessions(t); n != 0 {
		t.Errorf("%d session documents after logout, want 0", n)
	}
}
