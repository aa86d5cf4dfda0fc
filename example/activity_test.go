package main

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mongostore/mongostore"
)

// fakeClock is a clock that tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// testActivityLog returns a log with the bounds given and a fake clock.
func testActivityLog(perUser, maxUsers int) (*activityLog, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)}
	l := newActivityLog(perUser, maxUsers)
	l.now = clock.now
	return l, clock
}

// ev returns an event of kind (for reason) of owner's sign-in handle
// on device, created at created.
func ev(kind mongostore.EventKind, reason mongostore.EndReason, owner, handle, device string, created time.Time) mongostore.Event {
	return mongostore.Event{Kind: kind, Reason: reason, Owner: owner, Handle: handle, Device: device,
		SessionTimes: mongostore.SessionTimes{CreatedAt: created, UpdatedAt: created, ExpiresAt: created.Add(time.Hour)}}
}

// describe returns the sign-ins of a log as "handle device: ending", in
// order ("signed in" for those that last).
func describe(signIns []signIn) []string {
	var out []string
	for _, s := range signIns {
		out = append(out, fmt.Sprintf("%s %s: %s", s.Handle, s.Device, cmpOr(s.Ended, "signed in")))
	}
	return out
}

// recordEachKind records, in l, a sign-in of demo created at t0 for each
// kind of ending (h1…h7, after h0 that lasts), each regenerated once; an
// ending of a sign-in the log did not see, twice; and an event without an
// owner.
func recordEachKind(l *activityLog, t0 time.Time) {
	ctx := context.Background()
	l.record(ctx, ev(mongostore.EventCreated, "", "", "anon", "", t0)) // no owner: ignored
	for i, reason := range []mongostore.EndReason{"", mongostore.EndLogout, mongostore.EndRestart, mongostore.EndByHandle,
		mongostore.EndEverywhere, mongostore.EndLimit, "", "something new"} {
		h := fmt.Sprintf("h%d", i)
		l.record(ctx, ev(mongostore.EventCreated, "", "demo", h, "Firefox on Linux", t0))
		l.record(ctx, ev(mongostore.EventRegenerated, "", "demo", h, "Firefox on Linux", t0)) // the same sign-in
		switch {
		case i == 6:
			l.record(ctx, ev(mongostore.EventExpired, "", "demo", h, "Firefox on Linux", t0))
		case reason != "":
			l.record(ctx, ev(mongostore.EventEnded, reason, "demo", h, "Firefox on Linux", t0))
		}
	}
	// A sign-in the log did not see (before the app started), without a
	// device label, ended twice: once counts.
	l.record(ctx, ev(mongostore.EventEnded, mongostore.EndLogout, "demo", "old", "", t0))
	l.record(ctx, ev(mongostore.EventEnded, mongostore.EndByHandle, "demo", "old", "", t0))
}

func TestActivityLogRecords(t *testing.T) {
	l, clock := testActivityLog(activityPerUser, activityMaxUsers)
	t0 := clock.t.Add(-time.Hour)
	recordEachKind(l, t0)
	got, limited := l.forPage("demo", "h0")
	want := []string{"old Unknown device: Signed out there", "h7 Firefox on Linux: Ended", "h6 Firefox on Linux: Expired",
		"h5 Firefox on Linux: Signed out because of the session limit", "h4 Firefox on Linux: Signed out from another device",
		"h3 Firefox on Linux: Signed out from another device", "h2 Firefox on Linux: Signed out there",
		"h1 Firefox on Linux: Signed out there", "h0 Firefox on Linux: signed in"}
	if !slices.Equal(describe(got), want) {
		t.Errorf("log:\n\t%s\nwant:\n\t%s", strings.Join(describe(got), "\n\t"), strings.Join(want, "\n\t"))
	}
	for _, s := range got {
		wantEnd := clock.t
		switch s.Ended {
		case "":
			wantEnd = time.Time{}
		case endedExpired:
			wantEnd = t0.Add(time.Hour) // the session's expiry, not when it was found expired
		}
		if !s.At.Equal(t0) || !s.EndedAt.Equal(wantEnd) || s.ByLimit() != (s.Ended == endedByLimit) {
			t.Errorf("%s: signed in at %v, ended at %v (by the limit %v); want %v, %v", s.Handle, s.At, s.EndedAt, s.ByLimit(), t0, wantEnd)
		}
	}
	if len(limited) != 0 {
		t.Errorf("limit notice %q without a login that caused it", limited)
	}
	if got, _ := l.forPage("nobody", ""); got != nil {
		t.Errorf("a user without activity has %q", describe(got))
	}
}

func TestActivityLogBounds(t *testing.T) {
	l, _ := testActivityLog(3, 2)
	ctx := context.Background()
	created := time.Now()
	for i := range 5 {
		l.record(ctx, ev(mongostore.EventCreated, "", "alice", fmt.Sprint("a", i), "Safari on iPhone", created))
	}
	l.record(ctx, ev(mongostore.EventCreated, "", "bob", "b0", "Chrome on Android", created))
	// An ending moves a sign-in first; one the log dropped comes back.
	l.record(ctx, ev(mongostore.EventEnded, mongostore.EndLogout, "alice", "a3", "Safari on iPhone", created))
	l.record(ctx, ev(mongostore.EventEnded, mongostore.EndLogout, "alice", "a0", "Safari on iPhone", created))
	got, _ := l.forPage("alice", "")
	if want := []string{"a0 Safari on iPhone: Signed out there", "a3 Safari on iPhone: Signed out there", "a4 Safari on iPhone: signed in"}; !slices.Equal(describe(got), want) {
		t.Errorf("alice's log %q, want %q (the last 3 changed)", describe(got), want)
	}
	// A third user: bob, the least recently active, is forgotten.
	l.record(ctx, ev(mongostore.EventCreated, "", "carol", "c0", "Firefox on Linux", created))
	for user, n := range map[string]int{"alice": 3, "bob": 0, "carol": 1} {
		if got, _ := l.forPage(user, ""); len(got) != n {
			t.Errorf("%s: %d sign-ins kept, want %d", user, len(got), n)
		}
	}
	if len(l.users) != 2 || l.recent.Len() != 2 {
		t.Errorf("%d users in the map, %d in the list; want 2", len(l.users), l.recent.Len())
	}
}

// TestActivityLogLimit checks that the sign-ins the session limit ends
// during a login's save are tied to that login, whose page tells of them
// once, and to no other.
func TestActivityLogLimit(t *testing.T) {
	l, _ := testActivityLog(activityPerUser, activityMaxUsers)
	created := time.Now()
	for _, h := range []string{"a", "b"} {
		l.record(context.Background(), ev(mongostore.EventCreated, "", "demo", h, "Device "+h, created))
	}
	// The login of c, in a request with its eventScope, ends a and b.
	ctx := context.WithValue(context.Background(), eventScopeKey{}, &eventScope{})
	l.record(ctx, ev(mongostore.EventCreated, "", "demo", "c", "Device c", created))
	l.record(ctx, ev(mongostore.EventEnded, mongostore.EndLimit, "demo", "a", "Device a", created))
	l.record(ctx, ev(mongostore.EventEnded, mongostore.EndLimit, "demo", "b", "Device b", created))
	// Without a scope (no login to tie it to): in the log, no notice.
	l.record(context.Background(), ev(mongostore.EventCreated, "", "demo", "d", "Device d", created))
	l.record(context.Background(), ev(mongostore.EventEnded, mongostore.EndLimit, "demo", "c", "Device c", created))

	for _, step := range []struct {
		current string
		want    []string
	}{{"a", nil}, {"d", nil}, {"c", []string{"Device b", "Device a"}}, {"c", nil}} {
		signIns, limited := l.forPage("demo", step.current)
		if !slices.Equal(limited, step.want) {
			t.Errorf("page of %s: limit notice for %q, want %q", step.current, limited, step.want)
		}
		if n := len(signIns); n != 4 {
			t.Errorf("page of %s: %d sign-ins, want 4", step.current, n)
		}
	}
}

func TestLimitNotice(t *testing.T) {
	for _, tc := range []struct {
		devices []string
		limit   int
		want    string
	}{
		{nil, 2, ""},
		{[]string{"Firefox on Linux"}, 2, "Your least recently used session (Firefox on Linux) was signed out when you signed in here: at most 2 sessions per user."},
		{[]string{"Firefox on Linux"}, 1, "Your least recently used session (Firefox on Linux) was signed out when you signed in here: at most 1 session per user."},
		{[]string{"Firefox on Linux", "Safari on iPhone"}, 1, "Your 2 least recently used sessions (Firefox on Linux, Safari on iPhone) were signed out when you signed in here: at most 1 session per user."},
	} {
		if got := limitNotice(tc.devices, tc.limit); got != tc.want {
			t.Errorf("limitNotice(%q, %d) = %q, want %q", tc.devices, tc.limit, got, tc.want)
		}
	}
}

// TestActivityLogConcurrent records and reads from many goroutines, for
// the race detector.
func TestActivityLogConcurrent(t *testing.T) {
	l, _ := testActivityLog(activityPerUser, 5)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			ctx := context.WithValue(context.Background(), eventScopeKey{}, &eventScope{})
			for i := range 200 {
				owner, h := fmt.Sprint("user", (g+i)%7), fmt.Sprint(g, "-", i)
				l.record(ctx, ev(mongostore.EventCreated, "", owner, h, "Firefox on Linux", time.Now()))
				l.record(ctx, ev(mongostore.EventEnded, mongostore.EndLimit, owner, h, "Firefox on Linux", time.Now()))
				l.forPage(owner, h)
			}
		})
	}
	wg.Wait()
	if len(l.users) > 5 || l.recent.Len() != len(l.users) {
		t.Errorf("%d users in the map, %d in the list; want at most 5, the same", len(l.users), l.recent.Len())
	}
}

// shownSignIn is a sign-in as the activity log of the page of sessions
// shows it.
type shownSignIn struct {
	device, ending string // ending "" while it lasts
	at, endedAt    time.Time
	current        bool // marked (this device)
}

// String returns "device: ending", or "device: signed in".
func (s shownSignIn) String() string { return s.device + ": " + cmpOr(s.ending, "signed in") }

var (
	activityList  = regexp.MustCompile(`(?s)<ol class="activity" id="activity"[^>]*>(.*?)</ol>`)
	activityEntry = regexp.MustCompile(`(?s)<li(?: class="ended")?>(.*?)</li>`)
	activitySpan  = regexp.MustCompile(`<span class="(signed-in|ending|ending limit)">(.*?) at <time datetime="([^"]+)">([^<]*)</time></span>`)
)

// parse fills in s from a line of its entry: of class class, saying text
// (HTML) at the time datetime, shown as shown.
func (s *shownSignIn) parse(t *testing.T, class, text, datetime, shown string) {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, datetime)
	if err != nil {
		t.Fatalf("activity time %q: %v", datetime, err)
	}
	if want := tm.Local().Format("Mon 2 Jan 2006 15:04:05 MST"); html.UnescapeString(shown) != want {
		t.Errorf("activity time shown as %q, want %q (local time)", shown, want)
	}
	text = html.UnescapeString(tagRE.ReplaceAllString(text, ""))
	if class == "signed-in" {
		text, s.current = strings.CutSuffix(text, " (this device)")
		s.device, s.at = strings.TrimPrefix(text, "Signed in on "), tm
	} else {
		s.ending, s.endedAt = text, tm
	}
	if (class == "ending limit") != (text == endedByLimit) {
		t.Errorf("activity %q has the class %q", text, class)
	}
}

// activityOf returns the activity log of a page of sessions, in order,
// and checks that it shows its times in local time for people.
func activityOf(t *testing.T, body string) []shownSignIn {
	t.Helper()
	m := activityList.FindStringSubmatch(body)
	if m == nil {
		if !strings.Contains(body, `<p class="hint" id="activity">Nothing yet`) {
			t.Fatalf("page of sessions without an activity log:\n%s", body)
		}
		return nil
	}
	var out []shownSignIn
	for _, item := range activityEntry.FindAllStringSubmatch(m[1], -1) {
		var s shownSignIn
		for _, sp := range activitySpan.FindAllStringSubmatch(item[1], -1) {
			s.parse(t, sp[1], sp[2], sp[3], sp[4])
		}
		if s.device == "" || (s.ending != "") != strings.Contains(item[0], `class="ended"`) || s.endedAt.Before(s.at) && s.ending != "" {
			t.Fatalf("activity entry %+v from:\n%s", s, item[0])
		}
		if s.current && (s.ending != "" || slices.ContainsFunc(out, func(o shownSignIn) bool { return o.current })) {
			t.Errorf("activity entry %+v marked (this device): want one, still signed in", s)
		}
		out = append(out, s)
	}
	return out
}

// wantActivity fails the test unless the activity log of the page of
// sessions that b fetches shows the sign-ins want ("device: ending", see
// shownSignIn.String) in any order, the first first of them first (in any
// order); it returns the page and the log.
func wantActivity(t *testing.T, what string, b *browser, first int, want ...string) (response, []shownSignIn) {
	t.Helper()
	r, _ := sessionsOf(t, b)
	log := activityOf(t, r.body)
	var got []string
	for _, s := range log {
		got = append(got, s.String())
	}
	if !sameSet(got, want) || !sameSet(got[:first], want[:first]) {
		t.Fatalf("%s: activity\n\t%s\nwant\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	return r, log
}

// TestActivityLogPage follows the activity log of the page of sessions
// through a login, a logout on another device, a sign-out of one device
// and one of all the others; another user's log is their own.
func TestActivityLogPage(t *testing.T) {
	t.Parallel()
	app := startApp(t, func(c *config) { c.Users = append(c.Users, credential{Name: "alice", Password: "alice-pw"}) })
	b1, b2, b3 := newBrowser(t, app.url), newBrowser(t, app.url), newBrowser(t, app.url)
	b1.loginAs("demo", "demo", firefoxLinux)
	_, log := wantActivity(t, "after a login", b1, 1, "Firefox on Linux: signed in")
	if _, list := sessionsOf(t, b1); !log[0].at.Equal(list[0].created) || !log[0].current {
		t.Errorf("activity says the login was at %v (this device: %v), the list that the session started at %v", log[0].at, log[0].current, list[0].created)
	}

	b2.loginAs("demo", "demo", chromeAndroid)
	wantStatus(t, "POST /logout (browser 2)", b2.post("/logout", nil), http.StatusSeeOther, "/login")
	wantActivity(t, "after a logout on another device", b1, 1, "Chrome on Android: "+endedHere, "Firefox on Linux: signed in")

	b2.loginAs("demo", "demo", chromeAndroid)
	_, list := sessionsOf(t, b1)
	wantStatus(t, "POST /sessions/end", b1.post("/sessions/end", url.Values{"handle": {other(t, list).handle}}), http.StatusSeeOther, "/sessions")
	wantActivity(t, "after ending a device", b1, 1,
		"Chrome on Android: "+endedElsewhere, "Chrome on Android: "+endedHere, "Firefox on Linux: signed in")

	b2.loginAs("demo", "demo", chromeAndroid)
	b3.loginAs("demo", "demo", safariIPhone)
	wantStatus(t, "POST /sessions/end-others", b1.post("/sessions/end-others", nil), http.StatusSeeOther, "/sessions")
	r, _ := wantActivity(t, "after signing out everywhere else", b1, 2, "Chrome on Android: "+endedElsewhere, "Safari on iPhone: "+endedElsewhere,
		"Chrome on Android: "+endedElsewhere, "Chrome on Android: "+endedHere, "Firefox on Linux: signed in")
	if strings.Contains(r.body, `id="limit-notice"`) {
		t.Errorf("a limit notice without a limit:\n%s", r.body)
	}

	alice := newBrowser(t, app.url)
	alice.loginAs("alice", "alice-pw", safariIPhone)
	wantActivity(t, "another user", alice, 1, "Safari on iPhone: signed in")
	if strings.Contains(app.logs.String(), "level=ERROR") {
		t.Errorf("errors in the log:\n%s", app.logs)
	}
	for _, userData := range []string{"alice", "Firefox", "Safari", "iPhone"} {
		if strings.Contains(app.logs.String(), userData) {
			t.Errorf("the log holds user data (%q):\n%s", userData, app.logs)
		}
	}
}

// limitNoticeRE finds the limit notice of a page of sessions.
var limitNoticeRE = regexp.MustCompile(`<p class="flash warning" id="limit-notice" role="status">([^<]*)</p>`)

// TestSessionLimit logs in three times with a limit of two sessions per
// user: the first device is signed out, and the page of sessions of the
// third, whose login did it, says so once; the activity log keeps it.
func TestSessionLimit(t *testing.T) {
	t.Parallel()
	app := startApp(t, func(c *config) { c.MaxSessionsPerUser = 2 })
	b1, b2, b3 := newBrowser(t, app.url), newBrowser(t, app.url), newBrowser(t, app.url)
	b1.loginAs("demo", "demo", firefoxLinux)
	b2.loginAs("demo", "demo", chromeAndroid)
	if r, _ := sessionsOf(t, b2); limitNoticeRE.MatchString(r.body) {
		t.Errorf("a limit notice within the limit:\n%s", r.body)
	}
	b3.loginAs("demo", "demo", safariIPhone)

	wantStatus(t, "GET / (browser 1, beyond the limit)", b1.get("/"), http.StatusSeeOther, "/login")
	if n := app.countSessions(t); n != 2 {
		t.Errorf("%d session documents, want 2", n)
	}
	r, list := sessionsOf(t, b3)
	wantSessions(t, "browser 3", list, labelSafari, labelSafari, labelChrome)
	const notice = "Your least recently used session (" + labelFirefox + ") was signed out when you signed in here: at most 2 sessions per user."
	if m := limitNoticeRE.FindStringSubmatch(r.body); m == nil || html.UnescapeString(m[1]) != notice {
		t.Errorf("page of sessions after the login beyond the limit: notice %q, want %q\n%s", m, notice, r.body)
	}
	want := []string{"Firefox on Linux: " + endedByLimit, "Safari on iPhone: signed in", "Chrome on Android: signed in"}
	got := activityOf(t, r.body)
	if len(got) != 3 || !sameSet([]string{got[0].String(), got[1].String(), got[2].String()}, want) {
		t.Fatalf("activity %v, want %q", got, want)
	}
	if i := slices.IndexFunc(got, func(s shownSignIn) bool { return s.current }); i < 0 || got[i].device != labelSafari {
		t.Errorf("activity %v: want the sign-in on %s marked (this device)", got, labelSafari)
	}

	// Once: the log still says it, the notice no more; nor on the other
	// device, whose login did not do it.
	for name, b := range map[string]*browser{"browser 3, again": b3, "browser 2": b2} {
		r, _ := sessionsOf(t, b)
		if limitNoticeRE.MatchString(r.body) {
			t.Errorf("%s: the limit notice again:\n%s", name, r.body)
		}
		wantActivity(t, name, b, 0, "Firefox on Linux: "+endedByLimit, "Safari on iPhone: signed in", "Chrome on Android: signed in")
	}
}
