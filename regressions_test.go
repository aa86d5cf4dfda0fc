package mongostore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Regressions a review of format 3 and its exclusive sections found: each
// failed before its fix.

// A cookie whose secret RegenerateID replaced must not end the regenerated
// session: the old secret authorizes nothing on the chain.
func TestStaleSecretCannotEnd(t *testing.T) {
	for _, how := range []string{"logout", "restart"} {
		t.Run(how, func(t *testing.T) {
			events := &eventLog{}
			f := newFixture(t, Config{Expiry: ExpiryNone, OnEvent: events.add})
			b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
			old := *b.cookies[testSessionName]
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["login"] = "ada"
				if err := f.store.RegenerateID(r, w, s); err != nil {
					t.Fatal(err)
				}
			})
			events.take()
			stale := newBrowser()
			stale.cookies[testSessionName] = &old
			stale.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				if !s.IsNew {
					t.Fatal("old secret loaded")
				}
				if how == "restart" {
					_ = f.store.Restart(r, s)
					return
				}
				s.Options.MaxAge = -1
				_ = s.Save(r, w)
			})
			got, _ := events.take()
			if !isLive(t, f, b) {
				t.Fatalf("the old secret's %s ended the regenerated session (events %q)", how, got)
			}
		})
	}
}

// Lock on a session whose Options the application set to nil: Save
// tolerates it, Lock should too.
func TestLockNilOptions(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"n": 1})
	r, s := loaded(t, f, b)
	s.Options = nil
	defer func() {
		if v := recover(); v != nil {
			t.Fatalf("Lock panicked: %v", v)
		}
	}()
	unlock, err := f.store.Lock(r, s)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// A handler that saves (a cookie goes out) and then takes the lock: the
// response carries Set-Cookie, so it must be kept out of shared caches.
func TestLockAfterSaveKeepsNoStore(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"n": 1})
	rec := httptest.NewRecorder()
	strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
		unlock, err := f.store.Lock(r, s)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		fmt.Fprintln(w, "ok")
	}).ServeHTTP(rec, b.request())
	if rec.Header().Get("Set-Cookie") == "" {
		t.Fatal("no cookie set")
	}
	if cc := rec.Header().Get("Cache-Control"); cc == "" {
		t.Fatalf("a response setting the session cookie has no Cache-Control (shared caches may store it)")
	}
}

// A logout of a session whose values name an owner that the stored
// document did not have runs no per-owner limit: it ends the session.
func TestLogoutRunsNoLimit(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: 2})
	b, _ := saveNewSession(t, f, map[any]any{"n": 1})
	f.cmds.reset()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		SetOwner(s, "ada", "")
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	if got := strings.Join(commandNames(f.cmds), " "); got != "find delete" {
		t.Fatalf("commands %q, want a load and a delete: no owner listing", got)
	}
}

// A format 2 document moved by RegenerateID (lineage != _id) loads, saves in
// place, regenerates and ends.
func TestFormat2WithLineage(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	bare := secretEncoding.EncodeToString(randomBytes(idBytes))
	now := time.Now()
	d := document{id: hashHex(bare), format: format2, lineage: hashHex("origin"), rev: 3, createdAt: now.Add(-time.Hour).Truncate(time.Millisecond),
		updatedAt: now.Truncate(time.Millisecond), expiresAt: now.Add(time.Hour).Truncate(time.Millisecond), maxAge: 3600}
	data, _ := f.store.encode(map[any]any{"user": "ada"}, nil)
	d.data = f.store.sealer.wrap(d.id, data)
	f.store.sealer.seal(&d)
	raw := bson.D{{Key: "_id", Value: d.id}, {Key: "v", Value: int32(2)}, {Key: "lineage", Value: d.lineage}, {Key: "rev", Value: d.rev},
		{Key: "data", Value: bson.Binary{Data: d.data}}, {Key: "mac", Value: bson.Binary{Data: d.mac}},
		{Key: "createdAt", Value: d.createdAt}, {Key: "updatedAt", Value: d.updatedAt}, {Key: "expiresAt", Value: d.expiresAt},
		{Key: "maxAge", Value: int64(3600)}}
	if _, err := f.coll.InsertOne(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	b := cookieFor(t, f.store, bare)
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err := f.store.Get(r, testSessionName)
		if err != nil || s.IsNew || s.Values["user"] != "ada" {
			t.Fatalf("load: %v %v %v", s.IsNew, s.Values, err)
		}
		s.Values["n"] = 1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	got := storedDocument(t, f, bare)
	if _, err := got.LookupErr("lineage"); err == nil || got.Lookup("v").Int32() != 3 {
		t.Fatalf("after save: %v", got)
	}
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err := f.store.Get(r, testSessionName)
		if err != nil || s.IsNew || s.Values["n"] != 1 {
			t.Fatalf("reload: %v %v %v", s.IsNew, s.Values, err)
		}
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	if !isLive(t, f, b) || f.count(t) != 1 {
		t.Fatal("not live after regenerate")
	}
}

// A cookie with an old secret must not wait for, or take, the lock of the
// chain it no longer opens: it gets a new session at once.
func TestStaleSecretAndTheLock(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, LockWait: 300 * time.Millisecond})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	old := *b.cookies[testSessionName]
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	// The legitimate session holds its lock.
	r, s := loaded(t, f, b)
	if _, err := f.store.Lock(r, s); err != nil {
		t.Fatal(err)
	}
	stale := newBrowser()
	stale.cookies[testSessionName] = &old
	start := time.Now()
	rec := httptest.NewRecorder()
	exclusiveHandler(f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		fmt.Fprint(w, "new=", s.IsNew)
	}).ServeHTTP(rec, stale.request())
	if rec.Code != 200 || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("stale cookie on an exclusive route: %d %q after %v (waited for a lock it cannot open)", rec.Code, rec.Body.String(), time.Since(start))
	}
}

// Under the plain middleware, Lock's deferred unlock runs when the handler
// returns, before the middleware's save of changes made after the first
// write: the next section can load the values before them.
func TestLockUnderPlainMiddlewareReleasesAfterSave(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"token": "t"})
	f.cmds.reset()
	rec := httptest.NewRecorder()
	strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		unlock, err := f.store.Lock(r, s)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		fmt.Fprintln(w, "accepted")
		delete(s.Values, "token")
	}).ServeHTTP(rec, b.request())
	var order []string
	f.cmds.mu.Lock()
	for _, c := range f.cmds.commands {
		if c.Index(0).Key() != "update" {
			continue
		}
		u := c.Lookup("updates").Array().Index(0).Document().Lookup("u").Document()
		if _, err := u.LookupErr("$unset", "lock"); err == nil {
			order = append(order, "release")
		} else {
			order = append(order, "save")
		}
	}
	f.cmds.mu.Unlock()
	if len(order) != 2 || order[0] != "save" {
		t.Fatalf("updates %q: the lock is released before the section's change is saved", order)
	}
}
