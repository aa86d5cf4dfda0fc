package mongostore

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// testProfile is a custom type stored in sessions, registered with gob as
// gorilla applications do.
type testProfile struct {
	ID    int64
	Name  string
	Roles []string
	Seen  time.Time
}

func init() {
	gob.Register(testProfile{})
	gob.Register(map[string]int{})
	gob.Register(time.Time{})
}

// saveNew saves a new session holding values and returns the browser that
// holds its cookie and the session ID.
func saveNew(t *testing.T, f *storeFixture, values map[any]any) (*browser, string) {
	t.Helper()
	b := newBrowser()
	var id string
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err := f.store.Get(r, testSessionName)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		for k, v := range values {
			s.Values[k] = v
		}
		if err := s.Save(r, w); err != nil {
			t.Fatalf("Save: %v", err)
		}
		id = s.ID
	})
	if len(b.cookies) != 1 {
		t.Fatalf("after Save the browser holds %d cookies, want 1", len(b.cookies))
	}
	return b, id
}

// load runs one request from b and returns the session the store loads.
func load(t *testing.T, f *storeFixture, b *browser) (*sessions.Session, error) {
	t.Helper()
	var s *sessions.Session
	var err error
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err = f.store.Get(r, testSessionName)
	})
	if s == nil {
		t.Fatal("Get returned a nil session")
	}
	return s, err
}

func TestRoundTripValues(t *testing.T) {
	seen := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	gobValues := map[any]any{
		"string":  "héllo",
		"int":     42,
		"int64":   int64(-1) << 40,
		"uint8":   uint8(7),
		"float":   3.25,
		"bool":    true,
		"bytes":   []byte{0, 1, 2, 255},
		"strings": []string{"a", "b"},
		"map":     map[string]int{"x": 1, "y": 2},
		"time":    seen,
		"struct":  testProfile{ID: 7, Name: "Ada", Roles: []string{"admin"}, Seen: seen},
		42:        "non-string key",
		"empty":   "",
	}
	jsonValues := map[any]any{
		"string": "héllo",
		"number": float64(42),
		"bool":   true,
		"list":   []any{"a", float64(1)},
		"object": map[string]any{"k": "v"},
		"null":   nil,
	}
	for _, tt := range []struct {
		name   string
		codec  Codec
		values map[any]any
	}{
		{"gob", GobCodec{}, gobValues},
		{"json", JSONCodec{}, jsonValues},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{Codec: tt.codec})
			b, id := saveNew(t, f, tt.values)
			s, err := load(t, f, b)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if s.IsNew || s.ID != id {
				t.Fatalf("loaded IsNew=%v ID match=%v, want a stored session with the same ID", s.IsNew, s.ID == id)
			}
			if !reflect.DeepEqual(s.Values, tt.values) {
				t.Fatalf("values did not round-trip:\n got %#v\nwant %#v", s.Values, tt.values)
			}
		})
	}
}

func TestFlashes(t *testing.T) {
	f := newFixture(t, Config{})
	b := newBrowser()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.AddFlash("saved")
		s.AddFlash("twice", "warnings")
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if got := s.Flashes(); !reflect.DeepEqual(got, []any{"saved"}) {
			t.Fatalf("Flashes() = %v", got)
		}
		if got := s.Flashes("warnings"); !reflect.DeepEqual(got, []any{"twice"}) {
			t.Fatalf("Flashes(warnings) = %v", got)
		}
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if got := s.Flashes(); len(got) != 0 {
			t.Fatalf("flashes shown twice: %v", got)
		}
	})
}

func TestSeveralNamedSessionsInOneRequest(t *testing.T) {
	f := newFixture(t, Config{})
	b := newBrowser()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		a, _ := f.store.Get(r, "a")
		c, _ := f.store.Get(r, "c")
		a.Values["which"] = "a"
		c.Values["which"] = "c"
		if err := sessions.Save(r, w); err != nil {
			t.Fatal(err)
		}
		if a.ID == c.ID {
			t.Fatal("two sessions got the same ID")
		}
	})
	if len(b.cookies) != 2 || f.count(t) != 2 {
		t.Fatalf("cookies %d, documents %d; want 2 and 2", len(b.cookies), f.count(t))
	}
	b.do(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range []string{"a", "c"} {
			s, err := f.store.Get(r, name)
			if err != nil || s.IsNew || s.Values["which"] != name {
				t.Fatalf("session %q: IsNew=%v values=%v err=%v", name, s.IsNew, s.Values, err)
			}
		}
	})
}

func TestNegativeMaxAgeDeletes(t *testing.T) {
	f := newFixture(t, Config{})
	b, _ := saveNew(t, f, map[any]any{"user": "ada"})
	rec := b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
		if s.ID != "" {
			t.Fatal("deleted session kept its ID")
		}
	})
	var expired *http.Cookie
	for _, c := range (&http.Response{Header: rec.Header()}).Cookies() {
		if c.Name == testSessionName {
			expired = c
		}
	}
	if expired == nil || expired.MaxAge >= 0 || expired.Value != "" {
		t.Fatalf("response cookie = %+v, want an expired, empty cookie", expired)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents left, want 0", n)
	}
}

func TestRegenerateID(t *testing.T) {
	f := newFixture(t, Config{})
	b, oldID := saveNew(t, f, map[any]any{"cart": []string{"book"}})
	oldCookies := map[string]*http.Cookie{testSessionName: b.cookies[testSessionName]}
	var newID string
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["user"] = "ada"
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatalf("RegenerateID: %v", err)
		}
		newID = s.ID
	})
	if newID == oldID || !validSessionID(newID) {
		t.Fatal("RegenerateID did not give a fresh ID")
	}
	if n := f.count(t); n != 1 {
		t.Fatalf("%d documents, want 1 (old one deleted)", n)
	}
	s, err := load(t, f, b)
	if err != nil || s.IsNew || s.ID != newID || s.Values["user"] != "ada" || !reflect.DeepEqual(s.Values["cart"], []string{"book"}) {
		t.Fatalf("new cookie: IsNew=%v values=%v err=%v", s.IsNew, s.Values, err)
	}
	old := &browser{cookies: oldCookies}
	if s, _ := load(t, f, old); !s.IsNew {
		t.Fatal("the old session ID still works after RegenerateID")
	}

	t.Run("unsaved session", func(t *testing.T) {
		b := newBrowser()
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			s.Values["k"] = 1
			if err := f.store.RegenerateID(r, w, s); err != nil || !validSessionID(s.ID) {
				t.Fatalf("RegenerateID of a new session: %v", err)
			}
		})
		if s, _ := load(t, f, b); s.IsNew {
			t.Fatal("regenerated new session not stored")
		}
	})
	t.Run("old document gone meanwhile", func(t *testing.T) {
		clock := newFakeClock()
		f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
		f.store.MaxAge(60)
		for _, end := range []struct {
			name string
			do   func(r *http.Request, s *sessions.Session)
		}{
			{"logged out", func(r *http.Request, s *sessions.Session) {
				if _, err := f.coll.DeleteOne(r.Context(), bson.D{{Key: fieldID, Value: f.store.hasher.docID(s.ID)}}); err != nil {
					t.Fatal(err)
				}
			}},
			{"expired", func(*http.Request, *sessions.Session) { clock.Advance(61 * time.Second) }},
		} {
			b, _ := saveNew(t, f, map[any]any{"user": "ada"})
			rec := b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				end.do(r, s)
				if err := f.store.RegenerateID(r, w, s); !errors.Is(err, ErrSessionGone) {
					t.Fatalf("%s: RegenerateID = %v, want ErrSessionGone", end.name, err)
				}
				s.Values["more"] = 1
				if err := s.Save(r, w); !errors.Is(err, ErrSessionGone) {
					t.Fatalf("%s: Save after a refused RegenerateID = %v, want ErrSessionGone", end.name, err)
				}
			})
			if len(rec.Header().Values("Set-Cookie")) != 0 {
				t.Fatalf("%s: a cookie was set for a gone session", end.name)
			}
			if n, _ := f.coll.CountDocuments(context.Background(), bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$gt", Value: clock.Now()}}}}); n != 0 {
				t.Fatalf("%s: %d live documents, want 0: the session came back", end.name, n)
			}
		}
	})
	t.Run("failure never saves under the old ID", func(t *testing.T) {
		b, oldID := saveNew(t, f, map[any]any{"role": "anonymous"})
		r := b.request()
		s, _ := f.store.Get(r, testSessionName)
		s.Values["role"] = "admin"
		s.Values["big"] = strings.Repeat("x", DefaultMaxSize+1) // RegenerateID fails: too large
		if err := f.store.RegenerateID(r, httptest.NewRecorder(), s); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("RegenerateID = %v, want ErrTooLarge", err)
		}
		delete(s.Values, "big")
		if err := s.Save(r, httptest.NewRecorder()); err != nil { // as the middleware would
			t.Fatal(err)
		}
		if s.ID == oldID {
			t.Fatal("the session was saved under its old ID after a failed RegenerateID")
		}
		old, _ := load(t, f, b)
		if old.Values["role"] != "anonymous" {
			t.Fatalf("old ID now holds %v: privileges reached a possibly planted ID", old.Values)
		}
	})
	t.Run("changing the ID by hand rotates it", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, oldID := saveNew(t, f, map[any]any{"k": "v"})
		old := &browser{cookies: map[string]*http.Cookie{testSessionName: b.cookies[testSessionName]}}
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			s.ID = "" // the redistore idiom
			if err := s.Save(r, w); err != nil || s.ID == oldID || !validSessionID(s.ID) {
				t.Fatalf("Save: %v (new ID %v)", err, s.ID != oldID)
			}
		})
		if s, _ := load(t, f, old); !s.IsNew {
			t.Fatal("the old cookie still works")
		}
		if s, _ := load(t, f, b); s.IsNew || s.Values["k"] != "v" {
			t.Fatal("the rotated session lost its values")
		}
		if f.count(t) != 1 {
			t.Fatalf("%d documents, want 1", f.count(t))
		}
	})
}

func TestRestart(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	for _, tc := range []struct {
		name string
		// end, if not nil, ends the stored session while the request runs
		// (a logout in another tab).
		end func(r *http.Request, s *sessions.Session)
	}{
		{"live session", nil},
		{"logged out meanwhile", func(r *http.Request, s *sessions.Session) {
			if _, err := f.coll.DeleteOne(r.Context(), bson.D{{Key: fieldID, Value: f.store.hasher.docID(s.ID)}}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, oldID := saveNew(t, f, map[any]any{"user": "eve", "cart": "book"})
			old := &browser{cookies: map[string]*http.Cookie{testSessionName: b.cookies[testSessionName]}}
			before := f.count(t)
			var newID string
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				if tc.end != nil {
					tc.end(r, s)
				}
				if err := f.store.Restart(r, s); err != nil {
					t.Fatalf("Restart: %v", err)
				}
				if !s.IsNew || s.ID != "" || len(s.Values) != 0 {
					t.Fatalf("after Restart: IsNew=%v, ID set=%v, values %v; want a new, empty session", s.IsNew, s.ID != "", s.Values)
				}
				s.Values["user"] = "ada"
				if err := s.Save(r, w); err != nil {
					t.Fatalf("Save after Restart: %v", err)
				}
				newID = s.ID
			})
			if newID == oldID || !validSessionID(newID) {
				t.Fatal("Restart did not lead to a fresh ID")
			}
			if got := f.count(t); got != before {
				t.Fatalf("%d documents, want %d: the old one deleted, the new one inserted", got, before)
			}
			s, err := load(t, f, b)
			if err != nil || s.IsNew || s.Values["user"] != "ada" || s.Values["cart"] != nil {
				t.Fatalf("new cookie: IsNew=%v values=%v err=%v; want only user ada", s.IsNew, s.Values, err)
			}
			if s, _ := load(t, f, old); !s.IsNew {
				t.Fatal("the old session ID still works after Restart")
			}
		})
	}
	t.Run("cancelled request", func(t *testing.T) {
		b, _ := saveNew(t, f, map[any]any{"user": "eve"})
		r := b.request()
		s, _ := f.store.Get(r, testSessionName)
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		// A cancelled request does not stop Restart (it is bounded by
		// Config.Timeout): the old document is deleted all the same.
		if err := f.store.Restart(r.WithContext(ctx), s); err != nil {
			t.Fatalf("Restart with a cancelled request = %v, want nil", err)
		}
		if s.ID != "" || len(s.Values) != 0 {
			t.Fatal("Restart left the ID or values")
		}
		if got, _ := load(t, f, b); !got.IsNew {
			t.Fatal("the old session survives Restart")
		}
	})
}

func TestSaveNearExpiryIsGuarded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		advance time.Duration // from the load to the save; the session lives 60s
		guarded bool          // the save filters on {_id, expiresAt: {$gt: now}}
		saved   bool
	}{
		{"far from expiry", 30 * time.Second, false, true},
		{"within Timeout of expiry", 58 * time.Second, true, true},
		{"expired while the request ran", 61 * time.Second, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, Timeout: 5 * time.Second})
			f.store.MaxAge(60)
			b, id := saveNew(t, f, map[any]any{"k": "v"})
			docID := f.store.hasher.docID(id)
			expiryOf := func() (time.Time, bool) {
				raw, err := f.coll.FindOne(context.Background(), bson.D{{Key: fieldID, Value: docID}}).Raw()
				if err != nil {
					return time.Time{}, false
				}
				return raw.Lookup(fieldExpiresAt).Time(), true
			}
			loaded, _ := expiryOf()
			f.cmds.reset()
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				clock.Advance(tc.advance)
				s.Values["k"] = "w"
				err := s.Save(r, w)
				if tc.saved && err != nil || !tc.saved && !errors.Is(err, ErrSessionGone) {
					t.Fatalf("Save = %v, want saved %v (else ErrSessionGone)", err, tc.saved)
				}
			})
			filters := commandFilters(t, f.cmds)["findAndModify"]
			if len(filters) != 1 {
				t.Fatalf("%d findAndModify commands, want 1", len(filters))
			}
			if guarded := !isIDOnly(filters[0]); guarded != tc.guarded {
				t.Fatalf("save filter %s: guarded %v, want %v", filters[0], guarded, tc.guarded)
			}
			after, found := expiryOf()
			switch {
			case tc.saved && (!found || !after.After(loaded)):
				t.Fatalf("the save did not slide the expiry: %v -> %v", loaded, after)
			case !tc.saved && found && after.After(loaded):
				t.Fatalf("an expired session was extended: %v -> %v", loaded, after)
			}
			if s, _ := load(t, f, b); s.IsNew == tc.saved {
				t.Fatalf("after the save, the session loads: %v; want %v", !s.IsNew, tc.saved)
			}
		})
	}
}

func TestSaveRefusesBadValues(t *testing.T) {
	f := newFixture(t, Config{MaxSize: 1024})
	for _, tt := range []struct {
		name  string
		value any
		want  error
	}{
		{"oversize", strings.Repeat("x", 2000), ErrTooLarge},
		{"function", func() {}, ErrEncode},
		{"channel", make(chan int), ErrEncode},
		{"unregistered type", struct{ Secret string }{"s"}, ErrEncode},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBrowser()
			rec := b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["v"] = tt.value
				if err := s.Save(r, w); !errors.Is(err, tt.want) {
					t.Fatalf("Save error = %v, want %v", err, tt.want)
				}
			})
			if len(rec.Header().Values("Set-Cookie")) != 0 || f.count(t) != 0 {
				t.Fatal("a refused save wrote a cookie or a document")
			}
		})
	}
	t.Run("oversize update of a stored session", func(t *testing.T) {
		b, id := saveNew(t, f, map[any]any{"v": "small"})
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			s.Values["v"] = strings.Repeat("x", 2000)
			if err := s.Save(r, w); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Save error = %v, want ErrTooLarge", err)
			}
		})
		data := readDocument(t, f, id).Lookup(fieldData)
		if _, bin := data.Binary(); len(bin) > 1024 {
			t.Fatal("the oversize values were written")
		}
	})
}

func TestNoResurrection(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)

	t.Run("deleted by a logout while the request ran", func(t *testing.T) {
		b, _ := saveNew(t, f, map[any]any{"user": "ada"})
		slow := b.request()
		s, err := f.store.Get(slow, testSessionName)
		if err != nil || s.IsNew {
			t.Fatal("not loaded")
		}
		b.do(func(w http.ResponseWriter, r *http.Request) { // logout in another tab
			s, _ := f.store.Get(r, testSessionName)
			s.Options.MaxAge = -1
			if err := s.Save(r, w); err != nil {
				t.Fatal(err)
			}
		})
		s.Values["cart"] = "late write"
		rec := httptest.NewRecorder()
		if err := s.Save(slow, rec); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("late Save error = %v, want ErrSessionGone", err)
		}
		if f.count(t) != 0 || len(rec.Header().Values("Set-Cookie")) != 0 {
			t.Fatal("the late save recreated the session or set a cookie")
		}
	})
	t.Run("expired while the request ran", func(t *testing.T) {
		b, _ := saveNew(t, f, map[any]any{"user": "ada"})
		r := b.request()
		s, _ := f.store.Get(r, testSessionName)
		clock.Advance(61 * time.Second)
		s.Values["k"] = 1
		if err := s.Save(r, httptest.NewRecorder()); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("Save after expiry = %v, want ErrSessionGone", err)
		}
	})
}

func TestMissingOrExpiredDocumentGetsFreshID(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  func(t *testing.T, f *storeFixture, clock *fakeClock)
	}{
		{"deleted", func(t *testing.T, f *storeFixture, _ *fakeClock) {
			if _, err := f.coll.DeleteMany(context.Background(), bson.D{}); err != nil {
				t.Fatal(err)
			}
		}},
		// No TTL monitor or GC has removed the document yet.
		{"expired, still in the collection", func(_ *testing.T, _ *storeFixture, clock *fakeClock) {
			clock.Advance(61 * time.Second)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
			f.store.MaxAge(60)
			b, id := saveNew(t, f, map[any]any{"k": "v"})
			tt.end(t, f, clock)
			var newID string
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, err := f.store.Get(r, testSessionName)
				if err != nil || !s.IsNew || len(s.Values) != 0 || s.ID != "" {
					t.Fatalf("IsNew=%v values=%v ID adopted=%v err=%v", s.IsNew, s.Values, s.ID == id, err)
				}
				s.Values["k"] = "again"
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
				newID = s.ID
			})
			if newID == id || !validSessionID(newID) {
				t.Fatal("saved under the old ID")
			}
			if s, err := load(t, f, b); err != nil || s.Values["k"] != "again" {
				t.Fatalf("re-saved session not loaded: %v %v", s.Values, err)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	f := newFixture(t, Config{})
	const clients, rounds = 24, 5
	var wg sync.WaitGroup
	errs := make(chan error, clients*rounds)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := newBrowser()
			for round := range rounds {
				b.do(func(w http.ResponseWriter, r *http.Request) {
					s, err := f.store.Get(r, testSessionName)
					if err != nil {
						errs <- err
						return
					}
					if round > 0 && (s.IsNew || s.Values["client"] != i || s.Values["round"] != round-1) {
						errs <- fmt.Errorf("client %d round %d: got %v (IsNew=%v)", i, round, s.Values, s.IsNew)
						return
					}
					s.Values["client"], s.Values["round"] = i, round
					if err := s.Save(r, w); err != nil {
						errs <- err
					}
				})
			}
		}()
	}
	// Many writers on one shared session: every save lands, none errors.
	shared, _ := saveNew(t, f, map[any]any{"n": 0})
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := &browser{cookies: map[string]*http.Cookie{testSessionName: shared.cookies[testSessionName]}}
			r := b.request()
			s, err := f.store.Get(r, testSessionName)
			if err != nil || s.IsNew {
				errs <- fmt.Errorf("shared load: IsNew=%v err=%v", s.IsNew, err)
				return
			}
			s.Values["n"] = i
			if err := s.Save(r, httptest.NewRecorder()); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := f.count(t); n != clients+1 {
		t.Fatalf("%d documents, want %d", n, clients+1)
	}
}

// TestSaveOutlivesTheRequest checks that a client hanging up (or a request
// deadline passing) before Save does not lose the change.
func TestSaveOutlivesTheRequest(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNew(t, f, map[any]any{"n": 1})
	for _, step := range []struct {
		name string
		save func(r *http.Request, w http.ResponseWriter, s *sessions.Session) error
	}{
		{"Save", func(r *http.Request, w http.ResponseWriter, s *sessions.Session) error { return s.Save(r, w) }},
		{"RegenerateID", func(r *http.Request, w http.ResponseWriter, s *sessions.Session) error {
			return f.store.RegenerateID(r, w, s)
		}},
		{"logout", func(r *http.Request, w http.ResponseWriter, s *sessions.Session) error {
			s.Options.MaxAge = -1
			return s.Save(r, w)
		}},
	} {
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, err := f.store.Get(r, testSessionName)
			if err != nil || s.IsNew {
				t.Fatalf("%s: load: %v", step.name, err)
			}
			ctx, cancel := context.WithCancel(r.Context())
			cancel() // the client hung up
			s.Values["n"] = s.Values["n"].(int) + 1
			if err := step.save(r.WithContext(ctx), w, s); err != nil {
				t.Fatalf("%s with a cancelled request context: %v", step.name, err)
			}
		})
		if step.name == "logout" {
			if f.count(t) != 0 {
				t.Fatal("logout with a cancelled request context left the session")
			}
			continue
		}
		if s, err := load(t, f, b); err != nil || s.Values["n"] == 1 {
			t.Fatalf("after %s: %v, %v; want the change kept", step.name, s.Values, err)
		}
	}
	t.Run("through the middleware", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, _ := saveNew(t, f, map[any]any{"cart": 0})
		r := b.request()
		ctx, cancel := context.WithCancel(r.Context())
		rec := httptest.NewRecorder()
		mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			s.Values["cart"] = 1
			cancel() // the client hangs up
		}).ServeHTTP(rec, r.WithContext(ctx))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d, want 200", rec.Code)
		}
		if s, err := load(t, f, b); err != nil || s.Values["cart"] != 1 {
			t.Fatalf("the change was lost: %v, %v", s.Values, err)
		}
	})
}

// TestOutageIsBoundedByTimeout checks that with the database down, every
// store operation fails within Config.Timeout, not the driver's 30-second
// server selection.
func TestOutageIsBoundedByTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a stopped server: nothing listens there any more
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + addr + "/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	coll := client.Database(testDatabase).Collection("down")
	const timeout = 300 * time.Millisecond
	const bound = 3 * time.Second // the timeout, plus room for a loaded machine

	start := time.Now()
	_, err = NewStore(context.Background(), coll, Config{Timeout: timeout}, testHashKey)
	if !errors.Is(err, ErrDatabase) || time.Since(start) > bound {
		t.Fatalf("NewStore with the database down: %v after %v; want ErrDatabase within %v", err, time.Since(start), bound)
	}
	// A sweep's delete is bounded by the longer of Timeout and GCInterval.
	store, err := NewStore(context.Background(), coll, Config{Timeout: timeout, GCInterval: timeout, Expiry: ExpiryNone}, testHashKey)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"load", func() error {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.AddCookie(&http.Cookie{Name: testSessionName, Value: mwCookieFor(t, store)})
			_, err := store.New(r, testSessionName)
			return err
		}},
		{"save", func() error {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			s, _ := store.New(r, testSessionName)
			s.Values["k"] = "v"
			return s.Save(r, httptest.NewRecorder())
		}},
		{"delete expired", func() error { _, err := store.DeleteExpired(context.Background()); return err }},
	} {
		start := time.Now()
		err := op.run()
		if d := time.Since(start); !errors.Is(err, ErrDatabase) || !errors.Is(err, context.DeadlineExceeded) || d > bound {
			t.Errorf("%s with the database down: %v after %v; want ErrDatabase and DeadlineExceeded within %v", op.name, err, d, bound)
		}
	}
}
