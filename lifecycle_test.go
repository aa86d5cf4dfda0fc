package mongostore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// eventLog subscribes to a store's events.
type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (l *eventLog) add(_ context.Context, e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// take returns the events so far as "kind" or "kind/reason", and forgets
// them.
func (l *eventLog) take() ([]string, []Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for _, e := range l.events {
		names = append(names, strings.TrimSuffix(string(e.Kind)+"/"+string(e.Reason), "/"))
	}
	events := l.events
	l.events = nil
	return names, events
}

// wantEvents checks that the events since the last call are want.
func (l *eventLog) wantEvents(t *testing.T, step string, want ...string) []Event {
	t.Helper()
	got, events := l.take()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: events %q, want %q", step, got, want)
	}
	return events
}

// loaded returns b's session as a request loads it, with the request.
func loaded(t *testing.T, f *storeFixture, b *browser) (*http.Request, *sessions.Session) {
	t.Helper()
	r := b.request()
	s, err := f.store.Get(r, testSessionName)
	if err != nil || s.IsNew {
		t.Fatalf("load: new %v, %v", s.IsNew, err)
	}
	return r, s
}

// isLive reports whether b's cookies name a live session.
func isLive(t *testing.T, f *storeFixture, b *browser) bool {
	t.Helper()
	s, err := loadSession(t, f, b)
	if err != nil && !errors.Is(err, ErrInvalidCookie) {
		t.Fatal(err)
	}
	return !s.IsNew
}

// TestEvents checks that every transition of a session reaches
// Config.OnEvent once, with the chain's handle, the owner, the device and
// the times, and never the session ID, the cookie or a value.
func TestEvents(t *testing.T) {
	events := &eventLog{}
	clock := newFakeClock()
	f := newFixture(t, Config{OnEvent: events.add, Now: clock.Now, Expiry: ExpiryNone})
	laptop, laptopID := loginAs(t, f, "ada", "laptop")
	created := events.wantEvents(t, "login", "created")
	if e := created[0]; e.Owner != "ada" || e.Device != "laptop" || e.Handle == "" || e.CreatedAt.IsZero() || !e.ExpiresAt.After(e.UpdatedAt) {
		t.Fatalf("created event %+v", e)
	}
	laptop.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	if e := events.wantEvents(t, "RegenerateID", "regenerated")[0]; e.Handle != created[0].Handle || e.Owner != "ada" {
		t.Fatalf("regenerated event %+v, want the handle %q of the chain", e, created[0].Handle)
	}
	phone, _ := loginAs(t, f, "ada", "phone")
	tablet, _ := loginAs(t, f, "ada", "tablet")
	events.wantEvents(t, "two more logins", "created", "created")
	list := listFrom(t, f, laptop, "ada")
	i := slices.IndexFunc(list, func(o OwnedSession) bool { return o.Device == "tablet" })
	if _, ended, err := f.store.EndSession(context.Background(), "ada", list[i].Handle, nil); err != nil || !ended {
		t.Fatalf("EndSession = %v, %v", ended, err)
	}
	events.wantEvents(t, "EndSession", "ended/ended_by_handle")
	if n, err := f.store.EndOtherSessions(context.Background(), "ada", sessionOf(t, f, laptop)); err != nil || n != 1 {
		t.Fatalf("EndOtherSessions = %d, %v", n, err)
	}
	events.wantEvents(t, "EndOtherSessions", "ended/signed_out_everywhere")
	if isLive(t, f, phone) || isLive(t, f, tablet) {
		t.Fatal("phone or tablet still signed in")
	}
	logout(t, f, laptop)
	if e := events.wantEvents(t, "logout", "ended/logout")[0]; e.Handle != created[0].Handle || e.Device != "laptop" {
		t.Fatalf("logout event %+v", e)
	}
	// Restart, and expiry met by a load: reported once.
	b, _ := loginAs(t, f, "bob", "")
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.Restart(r, s); err != nil {
			t.Fatal(err)
		}
	})
	events.wantEvents(t, "login, Restart", "created", "ended/restart")
	b, _ = loginAs(t, f, "bob", "")
	clock.Advance(25 * time.Hour)
	for range 2 {
		if isLive(t, f, b) {
			t.Fatal("an expired session loaded")
		}
	}
	if e := events.wantEvents(t, "login, expiry", "created", "expired")[1]; e.Owner != "bob" {
		t.Fatalf("expired event %+v", e)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents left, want none", n)
	}
	_ = laptopID
}

// TestSaveMeetingExpiryIsReported checks that a save finding its session
// expired (another request shortened it) fails with ErrSessionGone and
// leaves the expiry to be reported once, on every server: FerretDB v1's
// write, which replaces the document before it can tell, puts it back.
func TestSaveMeetingExpiryIsReported(t *testing.T) {
	events := &eventLog{}
	clock := newFakeClock()
	f := newFixture(t, Config{OnEvent: events.add, Now: clock.Now, Expiry: ExpiryNone})
	b, _ := loginAs(t, f, "ada", "laptop")
	r, stale := loaded(t, f, b)
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Options.MaxAge = 10
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	clock.Advance(time.Minute)
	stale.Values["k"] = "v"
	if err := stale.Save(r, httptest.NewRecorder()); !errors.Is(err, ErrSessionGone) {
		t.Fatalf("the save of an expired session = %v, want ErrSessionGone", err)
	}
	for range 2 {
		if isLive(t, f, b) {
			t.Fatal("an expired session loaded")
		}
	}
	if e := events.wantEvents(t, "login, expiry met by a save", "created", "expired")[1]; e.Owner != "ada" || e.Device != "laptop" {
		t.Fatalf("expired event %+v", e)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents left, want none", n)
	}
}

// logout ends b's session as a logout handler does.
func logout(t *testing.T, f *storeFixture, b *browser) {
	t.Helper()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
}

// TestEventsOfGCSweeps checks that a sweep reports each session it deletes
// when a subscriber is set, and that a subscriber that panics breaks
// nothing.
func TestEventsOfGCSweeps(t *testing.T) {
	events := &eventLog{}
	clock := newFakeClock()
	panicky := func(ctx context.Context, e Event) {
		events.add(ctx, e)
		panic("subscriber bug")
	}
	f := newFixture(t, Config{OnEvent: panicky, Now: clock.Now, Expiry: ExpiryNone})
	for i := range 3 {
		loginAs(t, f, "ada", fmt.Sprint("device ", i))
	}
	saveNewSession(t, f, map[any]any{"anonymous": true})
	events.wantEvents(t, "logins", "created", "created", "created", "created")
	if !strings.Contains(f.logs.String(), "subscriber panicked") {
		t.Fatalf("the panic was not logged:\n%s", f.logs)
	}
	clock.Advance(25 * time.Hour)
	n, err := f.store.DeleteExpired(context.Background())
	if err != nil || n != 4 {
		t.Fatalf("DeleteExpired = %d, %v; want 4", n, err)
	}
	_, swept := events.take()
	var owners []string
	for _, e := range swept {
		if e.Kind != EventExpired {
			t.Fatalf("sweep event %+v", e)
		}
		owners = append(owners, e.Device)
	}
	slices.Sort(owners)
	if want := []string{"", "device 0", "device 1", "device 2"}; !slices.Equal(owners, want) {
		t.Fatalf("swept devices %q, want %q", owners, want)
	}
	if c := f.count(t); c != 0 {
		t.Fatalf("%d documents left", c)
	}
}

// TestEventsHoldNoSecrets checks that no event holds the session ID, the
// cookie, the _id or a value.
func TestEventsHoldNoSecrets(t *testing.T) {
	events := &eventLog{}
	f := newFixture(t, Config{OnEvent: events.add, Expiry: ExpiryNone})
	b, id := loginAs(t, f, "ada", "laptop")
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["secret"] = "hunter2"
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	cookie := b.cookies[testSessionName].Value
	logout(t, f, b)
	_, all := events.take()
	text := fmt.Sprintf("%+v", all)
	for _, secret := range []string{id, docID(id), cookie, "hunter2"} {
		if strings.Contains(text, secret) {
			t.Fatalf("an event holds %q: %s", secret, text)
		}
	}
}

// TestLogoutOverlappingSaves checks that a logout that overlaps saves of
// the same session ends it, whatever the order the server commits them in:
// DocumentDB can answer the logout's delete with n=0 while a concurrent
// update commits, which left the session live (1 to 10 of 60 trials).
func TestLogoutOverlappingSaves(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	for trial := range 60 {
		b, _ := saveNewSession(t, f, map[any]any{"n": 0})
		r1, s1 := loaded(t, f, b)
		r2, s2 := loaded(t, f, b)
		var wg sync.WaitGroup
		var saveErr, logoutErr error
		wg.Go(func() {
			s1.Values["n"] = 1
			saveErr = s1.Save(r1, httptest.NewRecorder())
		})
		wg.Go(func() {
			s2.Options.MaxAge = -1
			logoutErr = s2.Save(r2, httptest.NewRecorder())
		})
		wg.Wait()
		if logoutErr != nil || (saveErr != nil && !errors.Is(saveErr, ErrSessionGone)) {
			t.Fatalf("trial %d: logout %v, save %v", trial, logoutErr, saveErr)
		}
		if isLive(t, f, b) {
			t.Fatalf("trial %d: the session is live after its logout returned nil", trial)
		}
	}
}

// TestEndingsFollowRegenerateID checks that logout, Restart, EndSession and
// EndOtherSessions end a session that a concurrent RegenerateID moved after
// they loaded or listed it: each used to delete the old _id, find nothing,
// and leave the new one live with the user's values.
func TestEndingsFollowRegenerateID(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	// moved logs in on a browser, lists it from elsewhere, loads it in a
	// request (r, s), then regenerates it in another request.
	moved := func(t *testing.T) (b *browser, r *http.Request, s *sessions.Session, listed OwnedSession) {
		b, _ = loginAs(t, f, "ada", "laptop")
		list, err := f.store.ListSessions(context.Background(), "ada", nil)
		if err != nil || len(list) != 1 {
			t.Fatalf("ListSessions = %v, %v", list, err)
		}
		r, s = loaded(t, f, b)
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			if err := f.store.RegenerateID(r, w, s); err != nil {
				t.Fatal(err)
			}
		})
		return b, r, s, list[0]
	}
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, r *http.Request, s *sessions.Session, listed OwnedSession) error
	}{
		{"logout", func(t *testing.T, r *http.Request, s *sessions.Session, _ OwnedSession) error {
			s.Options.MaxAge = -1
			return s.Save(r, httptest.NewRecorder())
		}},
		{"Restart", func(t *testing.T, r *http.Request, s *sessions.Session, _ OwnedSession) error {
			return f.store.Restart(r, s)
		}},
		{"EndSession", func(t *testing.T, r *http.Request, s *sessions.Session, listed OwnedSession) error {
			if _, ended, err := f.store.EndSession(context.Background(), "ada", listed.Handle, nil); err != nil || !ended {
				return fmt.Errorf("EndSession = %v, %v; want ended", ended, err)
			}
			return nil
		}},
		{"EndOtherSessions", func(t *testing.T, r *http.Request, s *sessions.Session, listed OwnedSession) error {
			if n, err := f.store.EndOtherSessions(context.Background(), "ada", nil); err != nil || n != 1 {
				return fmt.Errorf("EndOtherSessions = %d, %v; want 1", n, err)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, r, s, listed := moved(t)
			if err := tc.end(t, r, s, listed); err != nil {
				t.Fatal(err)
			}
			if isLive(t, f, b) {
				t.Fatal("the regenerated session is still live")
			}
			if list, err := f.store.ListSessions(context.Background(), "ada", nil); err != nil || len(list) != 0 {
				t.Fatalf("listed after the ending: %+v, %v", list, err)
			}
		})
	}
}

// TestRestartGivesFreshOptions checks that the session after Restart has
// the store's Options: a "remember me" of 30 days is not inherited by the
// next login on the same browser.
func TestRestartGivesFreshOptions(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b := newBrowser()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["user"] = "ada"
		s.Options.MaxAge = 30 * 24 * 3600
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	var id string
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.Restart(r, s); err != nil {
			t.Fatal(err)
		}
		s.Values["user"] = "bob"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
		id = s.ID
	})
	if got, want := storedDocument(t, f, id).Lookup(fieldMaxAge).AsInt64(), int64(f.store.Options.MaxAge); got != want {
		t.Fatalf("maxAge %d after Restart, want the store's %d", got, want)
	}
}

// TestFailedRegenerateLeavesNothing checks that a RegenerateID whose merge
// fails (the merged values exceed MaxSize) leaves no document that no
// cookie names: it used to leave the new one live, listed among the
// owner's devices, with no cookie naming it. The other request's save
// stands: the browser's session, with its value.
func TestFailedRegenerateLeavesNothing(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, MaxSize: 4096})
	b, id := loginAs(t, f, "ada", "laptop")
	err1, err2 := overlap(t, f, b, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Values["theirs"] = strings.Repeat("x", 2500)
		return s.Save(r, w)
	}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Values["mine"] = strings.Repeat("y", 2500)
		return f.store.RegenerateID(r, w, s)
	})
	if err1 != nil || !errors.Is(err2, ErrEncode) {
		t.Fatalf("save %v, RegenerateID %v; want nil and ErrEncode", err1, err2)
	}
	if n := f.count(t); n != 1 {
		t.Fatalf("%d documents left after a failed RegenerateID, want the browser's one", n)
	}
	if s, err := loadSession(t, f, b); err != nil || s.ID != id || s.Values["theirs"] == nil || s.Values["mine"] != nil {
		t.Fatalf("the browser's session: %v, %v; want the other request's save", s.Values, err)
	}
	if list, err := f.store.ListSessions(context.Background(), "ada", nil); err != nil || len(list) != 1 {
		t.Fatalf("listed: %+v, %v", list, err)
	}
}

// TestEndingsOutliveTheRequest checks that sign-out-everywhere and
// EndSession finish when the request's context is canceled (the client
// hung up): they used to stop with sessions left.
func TestEndingsOutliveTheRequest(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	for i := range 3 {
		loginAs(t, f, "ada", fmt.Sprint("device ", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := f.store.EndOtherSessions(ctx, "ada", nil); err != nil || n != 3 {
		t.Fatalf("EndOtherSessions on a canceled request = %d, %v; want 3", n, err)
	}
}

// TestMergeNeverCrossesOwners checks that the changes of a request of the
// previous owner never reach the session of the next one, whichever saves
// first: the in-place switch replaces the values whole, and a request that
// meets the switch finds its session gone.
func TestMergeNeverCrossesOwners(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	draft := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Values["draft"] = "alice's private draft"
		return s.Save(r, w)
	}
	switchUser := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		SetOwner(s, "bob", "")
		s.Values["user"] = "bob"
		return s.Save(r, w)
	}
	for _, tc := range []struct {
		name          string
		first, second func(http.ResponseWriter, *http.Request, *sessions.Session) error
		gone          int // which returns ErrSessionGone: 0 none, 1 first, 2 second
	}{
		{"draft saved first", draft, switchUser, 0},
		{"switch saved first", switchUser, draft, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := loginAs(t, f, "alice", "")
			err1, err2 := overlap(t, f, b, tc.first, tc.second)
			for i, err := range []error{err1, err2} {
				if want := tc.gone == i+1; errors.Is(err, ErrSessionGone) != want || (!want && err != nil) {
					t.Fatalf("save %d: %v (want ErrSessionGone: %v)", i+1, err, want)
				}
			}
			s, err := loadSession(t, f, b)
			if err != nil || s.Values[ownerKey] != "bob" || s.Values["draft"] != nil {
				t.Fatalf("bob's session: %v, %v; want bob's, without alice's draft", s.Values, err)
			}
		})
	}
}

// TestLongListsMergeEndToEnd checks two overlapping saves of a session with
// a long list: one reads (removes) 128 items, the other adds one; both land
// (lists over 256 items used to be replaced whole, losing one of them).
func TestLongListsMergeEndToEnd(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	long := make([]any, 20_000)
	for i := range long {
		long[i] = fmt.Sprint(i)
	}
	b, _ := saveNewSession(t, f, map[any]any{"l": long})
	err1, err2 := overlap(t, f, b, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Values["l"] = append(slices.Clone(s.Values["l"].([]any)), "added")
		return s.Save(r, w)
	}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Values["l"] = slices.Clone(s.Values["l"].([]any)[128:])
		return s.Save(r, w)
	})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	s, err := loadSession(t, f, b)
	got, _ := s.Values["l"].([]any)
	if err != nil || len(got) != len(long)-128+1 || got[0] != "128" || got[len(got)-1] != "added" {
		t.Fatalf("merged list of %d items (%v), want %d from \"128\" to \"added\"", len(got), err, len(long)-127)
	}
}

// TestMaxSessionsPerOwner checks the limit: a login beyond it ends the
// least recently saved others (EventEnded, EndLimit), never the new one;
// concurrent logins leave at most the limit, each listed session live.
func TestMaxSessionsPerOwner(t *testing.T) {
	events := &eventLog{}
	clock := newFakeClock()
	f := newFixture(t, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: 2, OnEvent: events.add, Now: clock.Now})
	var browsers []*browser
	for i := range 3 {
		clock.Advance(time.Second)
		b, _ := loginAs(t, f, "ada", fmt.Sprint("device ", i))
		browsers = append(browsers, b)
	}
	if e := events.wantEvents(t, "three logins", "created", "created", "created", "ended/limit")[3]; e.Device != "device 0" {
		t.Fatalf("the limit ended %q, want the least recently saved, device 0", e.Device)
	}
	if isLive(t, f, browsers[0]) || !isLive(t, f, browsers[1]) || !isLive(t, f, browsers[2]) {
		t.Fatal("want device 0 signed out, devices 1 and 2 signed in")
	}
	// Saving an owned session again ends nothing.
	browsers[1].do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["n"] = 1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	events.wantEvents(t, "a save")

	const logins = 8
	var wg sync.WaitGroup
	for i := range logins {
		wg.Go(func() {
			b := newBrowser()
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				SetOwner(s, "bob", fmt.Sprint("tab ", i))
				if err := s.Save(r, w); err != nil {
					t.Error(err)
				}
			})
		})
	}
	wg.Wait()
	list, err := f.store.ListSessions(context.Background(), "bob", nil)
	if err != nil || len(list) == 0 || len(list) > 2 {
		t.Fatalf("after %d concurrent logins: %d listed (%v), want 1 or 2", logins, len(list), err)
	}
	cur, err := f.coll.CountDocuments(context.Background(), bson.D{{Key: fieldOwner, Value: f.store.sealer.ownerDigest("bob")}})
	if err != nil || cur != int64(len(list)) {
		t.Fatalf("%d documents of bob's, %d listed (%v): every one listed must be live, and no other left", cur, len(list), err)
	}
}

// TestCookieNames checks that a cookie name browsers would not send back
// is refused where it is given: Get and New return a usable session with
// ErrInvalidConfig, Save stores nothing, and Middleware panics.
func TestCookieNames(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	for _, name := range []string{"my session", "", "a;b", "sess=1", "caf\u00e9", "tab\tbed"} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			s, err := f.store.Get(r, name)
			if s == nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Get = %v, %v; want a session and ErrInvalidConfig", s, err)
			}
			s.Values["k"] = "v"
			w := httptest.NewRecorder()
			if err := s.Save(r, w); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Save = %v, want ErrInvalidConfig", err)
			}
			if n := f.count(t); n != 0 || w.Header().Get("Set-Cookie") != "" {
				t.Fatalf("%d documents stored, Set-Cookie %q", n, w.Header().Get("Set-Cookie"))
			}
			defer func() {
				if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "cookie name") {
					t.Fatalf("Middleware(%q) did not panic with a clear message: %v", name, v)
				}
			}()
			f.store.Middleware(name, nil)
		})
	}
	for _, name := range []string{"session", "__Host-sid", "a!#$%&'*+-.^_`|~9"} {
		if err := checkCookieName(name); err != nil {
			t.Errorf("%q refused: %v", name, err)
		}
	}
}

// TestEventsOfTheGCGoroutine checks that the GC goroutine (ExpiryGC, what
// ExpiryAuto picks on a server without TTL indexes) reports each session
// it sweeps.
func TestEventsOfTheGCGoroutine(t *testing.T) {
	events := &eventLog{}
	clock := newFakeClock()
	swept := make(chan struct{}, 100)
	f := newFixture(t, Config{OnEvent: events.add, Now: clock.Now, Expiry: ExpiryGC, GCInterval: 100 * time.Millisecond,
		afterSweep: func() {
			select {
			case swept <- struct{}{}:
			default: // never hold the goroutine up
			}
		}})
	loginAs(t, f, "ada", "laptop")
	events.wantEvents(t, "login", "created")
	clock.Advance(25 * time.Hour)
	for range 2 { // a whole sweep after the clock moved
		select {
		case <-swept:
		case <-time.After(30 * time.Second):
			t.Fatal("no GC sweep within 30s")
		}
	}
	if e := events.wantEvents(t, "sweep", "expired")[0]; e.Owner != "ada" || e.Device != "laptop" {
		t.Fatalf("swept event %+v", e)
	}
}

// TestLoginByRegenerateIDNamesTheOwner: a login as the README shows it
// (the user's values and SetOwner, then RegenerateID) gives an event that
// names the owner: EventCreated for a visitor with no stored session,
// EventRegenerated for one with an anonymous session.
func TestLoginByRegenerateIDNamesTheOwner(t *testing.T) {
	events := &eventLog{}
	f := newFixture(t, Config{Expiry: ExpiryNone, OnEvent: events.add})
	anonymous, _ := saveNewSession(t, f, map[any]any{"cart": "3 books"})
	events.wantEvents(t, "anonymous visit", "created")
	for _, tc := range []struct {
		b    *browser
		kind EventKind
	}{{newBrowser(), EventCreated}, {anonymous, EventRegenerated}} {
		tc.b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			s.Values["user"] = "ada"
			SetOwner(s, "ada", "laptop")
			if err := f.store.RegenerateID(r, w, s); err != nil {
				t.Fatal(err)
			}
		})
		if e := events.wantEvents(t, "login", string(tc.kind))[0]; e.Owner != "ada" || e.Device != "laptop" {
			t.Errorf("%s event %+v, want owner ada on laptop", tc.kind, e)
		}
	}
}

// TestSubscriberMayEndARegeneratedSession: EventRegenerated comes once the
// session's chain lock is released, so a subscriber can end the session
// (it waited for the lock until Config.Timeout, and failed).
func TestSubscriberMayEndARegeneratedSession(t *testing.T) {
	var store *Store
	var ended bool
	var endErr error
	f := newFixture(t, Config{Expiry: ExpiryNone, Timeout: 2 * time.Second, OnEvent: func(_ context.Context, e Event) {
		if e.Kind == EventRegenerated {
			_, ended, endErr = store.EndSession(context.Background(), e.Owner, e.Handle, nil)
		}
	}})
	store = f.store
	b, _ := loginAs(t, f, "ada", "laptop")
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	if !ended || endErr != nil || f.count(t) != 0 {
		t.Fatalf("the subscriber's EndSession: ended %v, %v; %d documents left", ended, endErr, f.count(t))
	}
}

// TestLogoutReportsTheSessionAsStored: a logout reports the session as the
// document it deleted stood, not as the request loaded it: another request
// may have saved it since (before, the request's copy decided the event).
// Request A loads the session, request B saves it, then A logs out.
func TestLogoutReportsTheSessionAsStored(t *testing.T) {
	for _, tc := range []struct {
		name          string
		b             func(s *sessions.Session)
		before, after time.Duration // the clock moves before and after B's save
		want          string
		owner         string
	}{
		{"B shortened it, and it expired", func(s *sessions.Session) { s.Options.MaxAge = 10 }, 0, time.Minute, "expired", "ada"},
		{"B kept it live past A's view", func(s *sessions.Session) { s.Values["k"] = "v" }, 20 * time.Hour, 5 * time.Hour, "ended/logout", "ada"},
		{"B tied it to bob", func(s *sessions.Session) { SetOwner(s, "bob", "phone") }, 0, 0, "ended/logout", "bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := &eventLog{}
			clock := newFakeClock()
			f := newFixture(t, Config{OnEvent: events.add, Now: clock.Now, Expiry: ExpiryNone})
			b, _ := loginAs(t, f, "ada", "laptop")
			events.take()
			r, stale := loaded(t, f, b)
			clock.Advance(tc.before)
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				tc.b(s)
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
			})
			events.take()
			clock.Advance(tc.after)
			stale.Options.MaxAge = -1
			if err := stale.Save(r, httptest.NewRecorder()); err != nil {
				t.Fatal(err)
			}
			if e := events.wantEvents(t, "A's logout", tc.want)[0]; e.Owner != tc.owner {
				t.Fatalf("the event names owner %q, want %q: the stored session's", e.Owner, tc.owner)
			}
		})
	}
}
