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
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	gob.Register(map[string]int{}) // time.Time the store registers
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
		{"default (compact, gob for the rest)", nil, gobValues},
		{"json", JSONCodec{}, jsonValues},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{Codec: tt.codec})
			b, id := saveNewSession(t, f, tt.values)
			s, err := loadSession(t, f, b)
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
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
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
	b, oldID := saveNewSession(t, f, map[any]any{"cart": []string{"book"}})
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
	if newID == oldID || !validToken(newID) {
		t.Fatal("RegenerateID did not give a fresh ID")
	}
	if n := f.count(t); n != 1 {
		t.Fatalf("%d documents, want 1 (old one deleted)", n)
	}
	s, err := loadSession(t, f, b)
	if err != nil || s.IsNew || s.ID != newID || s.Values["user"] != "ada" || !reflect.DeepEqual(s.Values["cart"], []string{"book"}) {
		t.Fatalf("new cookie: IsNew=%v values=%v err=%v", s.IsNew, s.Values, err)
	}
	old := &browser{cookies: oldCookies}
	if s, _ := loadSession(t, f, old); !s.IsNew {
		t.Fatal("the old session ID still works after RegenerateID")
	}

	t.Run("unsaved session", func(t *testing.T) {
		b := newBrowser()
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			s.Values["k"] = 1
			if err := f.store.RegenerateID(r, w, s); err != nil || !validToken(s.ID) {
				t.Fatalf("RegenerateID of a new session: %v", err)
			}
		})
		if s, _ := loadSession(t, f, b); s.IsNew {
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
				if _, err := f.coll.DeleteOne(r.Context(), bson.D{{Key: fieldID, Value: docID(s.ID)}}); err != nil {
					t.Fatal(err)
				}
			}},
			{"expired", func(*http.Request, *sessions.Session) { clock.Advance(61 * time.Second) }},
		} {
			b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
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
		before := f.count(t)
		b, oldID := saveNewSession(t, f, map[any]any{"role": "anonymous"})
		r := b.request()
		s, _ := f.store.Get(r, testSessionName)
		s.Values["role"] = "admin"
		s.Values["big"] = strings.Repeat("x", defaultMaxSize+1) // RegenerateID fails: too large
		if err := f.store.RegenerateID(r, httptest.NewRecorder(), s); !errors.Is(err, ErrEncode) || !strings.Contains(err.Error(), "more than MaxSize") {
			t.Fatalf("RegenerateID = %v, want ErrEncode (more than MaxSize)", err)
		}
		delete(s.Values, "big")
		if err := s.Save(r, httptest.NewRecorder()); err != nil { // as the middleware would
			t.Fatal(err)
		}
		if s.ID == oldID {
			t.Fatal("the session was saved under its old ID after a failed RegenerateID")
		}
		// The failed RegenerateID kept the session's state, so this save
		// completed the rotation: the old ID is dead, and never holds the
		// new privileges. (Before the rewrite the session was detached,
		// the save inserted it afresh, and the old ID kept "anonymous".)
		old, _ := loadSession(t, f, b)
		if old.Values["role"] == "admin" || !old.IsNew {
			t.Fatalf("old ID now holds %v (IsNew=%v): privileges reached a possibly planted ID, or it still works", old.Values, old.IsNew)
		}
		if n := f.count(t); n != before+1 {
			t.Fatalf("%d documents, want %d: the new one, and the old one deleted", n, before+1)
		}
	})
	t.Run("changing the ID by hand rotates it", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, oldID := saveNewSession(t, f, map[any]any{"k": "v"})
		old := &browser{cookies: map[string]*http.Cookie{testSessionName: b.cookies[testSessionName]}}
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			s.ID = "" // the redistore idiom
			if err := s.Save(r, w); err != nil || s.ID == oldID || !validToken(s.ID) {
				t.Fatalf("Save: %v (new ID %v)", err, s.ID != oldID)
			}
		})
		if s, _ := loadSession(t, f, old); !s.IsNew {
			t.Fatal("the old cookie still works")
		}
		if s, _ := loadSession(t, f, b); s.IsNew || s.Values["k"] != "v" {
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
			if _, err := f.coll.DeleteOne(r.Context(), bson.D{{Key: fieldID, Value: docID(s.ID)}}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, oldID := saveNewSession(t, f, map[any]any{"user": "eve", "cart": "book"})
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
			if newID == oldID || !validToken(newID) {
				t.Fatal("Restart did not lead to a fresh ID")
			}
			if got := f.count(t); got != before {
				t.Fatalf("%d documents, want %d: the old one deleted, the new one inserted", got, before)
			}
			s, err := loadSession(t, f, b)
			if err != nil || s.IsNew || s.Values["user"] != "ada" || s.Values["cart"] != nil {
				t.Fatalf("new cookie: IsNew=%v values=%v err=%v; want only user ada", s.IsNew, s.Values, err)
			}
			if s, _ := loadSession(t, f, old); !s.IsNew {
				t.Fatal("the old session ID still works after Restart")
			}
		})
	}
	t.Run("cancelled request", func(t *testing.T) {
		b, _ := saveNewSession(t, f, map[any]any{"user": "eve"})
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
		if got, _ := loadSession(t, f, b); !got.IsNew {
			t.Fatal("the old session survives Restart")
		}
	})
}

func TestSaveNearExpiryIsGuarded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		advance time.Duration // from the load to the save; the session lives 60s
		saved   bool
	}{
		{"far from expiry", 30 * time.Second, true},
		{"within Timeout of expiry", 58 * time.Second, true},
		{"expired while the request ran", 61 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, Timeout: 5 * time.Second})
			f.store.MaxAge(60)
			b, id := saveNewSession(t, f, map[any]any{"k": "v"})
			expiryOf := func() (time.Time, bool) {
				raw, err := f.coll.FindOne(context.Background(), bson.D{{Key: fieldID, Value: docID(id)}}).Raw()
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
			// The filter's rev names the version loaded, whose expiry the
			// store knows: an expired one is not written to at all.
			writes := 1
			if !tc.saved {
				writes = 0
			}
			filters := commandFilters(t, f.cmds)["update"]
			if len(filters) != writes {
				t.Fatalf("%d update commands, want %d", len(filters), writes)
			}
			for _, filter := range filters {
				if filter.Lookup(fieldExpiresAt, "$gt").Type != 0 {
					t.Fatalf("save filter %s: want {_id, rev} alone", filter)
				}
			}
			after, found := expiryOf()
			switch {
			case tc.saved && (!found || !after.After(loaded)):
				t.Fatalf("the save did not slide the expiry: %v -> %v", loaded, after)
			case !tc.saved && found && after.After(loaded):
				t.Fatalf("an expired session was extended: %v -> %v", loaded, after)
			}
			if s, _ := loadSession(t, f, b); s.IsNew == tc.saved {
				t.Fatalf("after the save, the session loads: %v; want %v", !s.IsNew, tc.saved)
			}
		})
	}
}

// TestSaveOfAnExpiredVersionMerges: a request whose loaded version has
// expired, while another request's save kept the session live, saves over
// that save's changes: only the session's own expiry ends it.
func TestSaveOfAnExpiredVersionMerges(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	r, stale := loaded(t, f, b)
	clock.Advance(50 * time.Second)
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["theirs"] = 1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	clock.Advance(20 * time.Second) // past the stale version's expiry, not the other's
	stale.Values["mine"] = 2
	if err := stale.Save(r, httptest.NewRecorder()); err != nil {
		t.Fatalf("Save of a session another save kept live = %v", err)
	}
	s, err := loadSession(t, f, b)
	if err != nil || s.IsNew || s.Values["theirs"] != 1 || s.Values["mine"] != 2 || s.Values["k"] != "v" {
		t.Fatalf("after both saves: new %v, values %v, %v", s.IsNew, s.Values, err)
	}
}

func TestSaveRefusesBadValues(t *testing.T) {
	f := newFixture(t, Config{MaxSize: 1024})
	for _, tt := range []struct {
		name  string
		value any
		want  string // in the error message, which wraps ErrEncode
	}{
		{"oversize", strings.Repeat("x", 2000), "more than MaxSize"},
		{"function", func() {}, ""},
		{"channel", make(chan int), ""},
		{"unregistered type", struct{ Secret string }{"s"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBrowser()
			rec := b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["v"] = tt.value
				if err := s.Save(r, w); !errors.Is(err, ErrEncode) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Save error = %v, want ErrEncode (%q)", err, tt.want)
				}
			})
			if len(rec.Header().Values("Set-Cookie")) != 0 || f.count(t) != 0 {
				t.Fatal("a refused save wrote a cookie or a document")
			}
		})
	}
	t.Run("oversize update of a stored session", func(t *testing.T) {
		b, id := saveNewSession(t, f, map[any]any{"v": "small"})
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			s.Values["v"] = strings.Repeat("x", 2000)
			if err := s.Save(r, w); !errors.Is(err, ErrEncode) || !strings.Contains(err.Error(), "more than MaxSize") {
				t.Fatalf("Save error = %v, want ErrEncode (more than MaxSize)", err)
			}
		})
		data := storedDocument(t, f, id).Lookup(fieldData)
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
		b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
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
		b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
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
			b, id := saveNewSession(t, f, map[any]any{"k": "v"})
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
			if newID == id || !validToken(newID) {
				t.Fatal("saved under the old ID")
			}
			if s, err := loadSession(t, f, b); err != nil || s.Values["k"] != "again" {
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
	shared, _ := saveNewSession(t, f, map[any]any{"n": 0})
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
	b, _ := saveNewSession(t, f, map[any]any{"n": 1})
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
		if s, err := loadSession(t, f, b); err != nil || s.Values["n"] == 1 {
			t.Fatalf("after %s: %v, %v; want the change kept", step.name, s.Values, err)
		}
	}
	t.Run("through the middleware", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, _ := saveNewSession(t, f, map[any]any{"cart": 0})
		r := b.request()
		ctx, cancel := context.WithCancel(r.Context())
		rec := httptest.NewRecorder()
		strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			s.Values["cart"] = 1
			cancel() // the client hangs up
		}).ServeHTTP(rec, r.WithContext(ctx))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d, want 200", rec.Code)
		}
		if s, err := loadSession(t, f, b); err != nil || s.Values["cart"] != 1 {
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
			r.AddCookie(&http.Cookie{Name: testSessionName, Value: signedCookie(t, store)})
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

// TestStateIsReleasedWithSessions checks that the store's table of session
// states does not keep loaded sessions alive. (From state_test.go.)
func TestStateIsReleasedWithSessions(t *testing.T) {
	f := newFixture(t, Config{})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	for range 200 {
		if s, err := loadSession(t, f, b); err != nil || s.IsNew {
			t.Fatal("not loaded")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.store.states.len() > 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d session states still held after GC: the table leaks", f.store.states.len())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSessionTableStaysBounded checks that entries of reclaimed sessions do
// not pile up in a busy table: set sweeps them out as the table grows.
// (From state_test.go.)
func TestSessionTableStaysBounded(t *testing.T) {
	table := newSessionTable()
	for i := range 20 * minSweep {
		table.set(&sessions.Session{ID: "x"}, sessionState{version: version{rev: int64(i)}})
		if i%minSweep == 0 {
			runtime.GC()
		}
	}
	table.mu.Lock()
	n := len(table.m)
	table.mu.Unlock()
	if n > 4*minSweep {
		t.Fatalf("%d entries held for sessions that are all unreachable, want at most %d", n, 4*minSweep)
	}
}

// TestRegenerateIDRacingSignOutEverywhere runs "sign out everywhere"
// (EndOtherSessions with a nil current, from another instance) just before
// the k-th write command of RegenerateID: the rotated session must not
// survive it.
func TestRegenerateIDRacingSignOutEverywhere(t *testing.T) {
	for _, tc := range []struct {
		name string
		// login: the session is anonymous, and the request ties it to
		// its owner (SetOwner) before RegenerateID, as a login handler
		// does; otherwise it is owned already (a rotation on privilege
		// change).
		login bool
		k     int // the sign-out runs just before the k-th write
	}{
		// RegenerateID is one write now, an update of the one document:
		// a sign-out before it leaves it nothing to match. (Format 2
		// inserted a new document and deleted the old one, and a sign-out
		// between the two missed the new one.) At a login, a sign-out
		// before the write precedes the login itself: no race.
		{"owned, before the write", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var armed atomic.Bool
			var writes atomic.Int64
			var signOut func()
			client := hookedClient(t, func(name string) {
				if armed.Load() && isWrite(name) && writes.Add(1) == int64(tc.k) {
					signOut()
				}
			})
			coll := testCollection(t, client)
			store := storeOn(t, coll, Config{Expiry: ExpiryNone})
			// Another instance of the application, with its own client.
			other := storeOn(t, testClient(t, nil).Database(testDatabase).Collection(coll.Name()), Config{Expiry: ExpiryNone})
			var signedOut atomic.Int64
			var signOutErr error
			signOut = func() {
				n, err := other.EndOtherSessions(context.Background(), "ada", nil)
				signedOut.Store(n + 1) // 1 + how many it ended: it ran
				signOutErr = err
			}

			b := newBrowser()
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := store.Get(r, testSessionName)
				s.Values["cart"] = "book"
				if !tc.login {
					SetOwner(s, "ada", "laptop")
				}
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
			})
			var regenErr error
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, err := store.Get(r, testSessionName)
				if err != nil || s.IsNew {
					t.Fatalf("load: IsNew=%v err=%v", s.IsNew, err)
				}
				if tc.login {
					SetOwner(s, "ada", "laptop")
				}
				armed.Store(true)
				regenErr = store.RegenerateID(r, w, s)
				armed.Store(false)
			})
			if signedOut.Load() == 0 {
				t.Fatalf("RegenerateID sent %d write commands: the sign-out before write %d never ran", writes.Load(), tc.k)
			}
			if signOutErr != nil {
				t.Fatalf("EndOtherSessions: %v", signOutErr)
			}
			if writes.Load() != 1 {
				t.Errorf("RegenerateID sent %d write commands, want 1 (an update)", writes.Load())
			}
			if regenErr != nil && !errors.Is(regenErr, ErrSessionGone) {
				t.Fatalf("RegenerateID = %v, want nil or ErrSessionGone", regenErr)
			}
			s, err := loadSession(t, &storeFixture{store: store}, b)
			if err != nil || !s.IsNew {
				t.Errorf("after the sign-out, the browser's cookie loads IsNew=%v values %v (err %v): the rotated session survived (RegenerateID = %v)",
					s.IsNew, s.Values, err, regenErr)
			}
			if n, err := coll.CountDocuments(context.Background(), bson.D{{Key: fieldOwner, Value: bson.D{{Key: "$exists", Value: true}}}}); err != nil || n != 0 {
				t.Errorf("%d documents of the owner left after the sign-out (err %v), want 0", n, err)
			}
			if list, err := other.ListSessions(context.Background(), "ada", nil); err != nil || len(list) != 0 {
				t.Errorf("ListSessions after the sign-out = %d sessions (err %v), want none", len(list), err)
			}
		})
	}
}

// TestLowerAbsoluteTimeoutAppliesOnLoad checks that a store whose
// AbsoluteTimeout is lower than the one a session was saved with does not
// serve it past its own limit, even to a request that does not save.
func TestLowerAbsoluteTimeoutAppliesOnLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		// request runs one request of b against store and returns the
		// session it got.
		request func(t *testing.T, store *Store, b *browser) *sessions.Session
	}{
		// Before: load checked only expiresAt (creation + 2h, from the saving store), so a read-only request served the session.
		{"Get, read only", func(t *testing.T, store *Store, b *browser) *sessions.Session {
			s, _ := loadSession(t, &storeFixture{store: store}, b)
			return s
		}},
		// Before: the same, and the middleware saved nothing for an unchanged session.
		{"middleware, read only", func(t *testing.T, store *Store, b *browser) *sessions.Session {
			var got *sessions.Session
			rec := b.do(strictSessionHandler(t, store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				got = s
				fmt.Fprintln(w, "user:", s.Values["user"])
			}).ServeHTTP)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, want 200", rec.Code)
			}
			return got
		}},
		// Before: the session loaded (not new), and only its save failed, with ErrSessionGone.
		{"Save", func(t *testing.T, store *Store, b *browser) *sessions.Session {
			var got *sessions.Session
			b.do(func(w http.ResponseWriter, r *http.Request) {
				got, _ = store.Get(r, testSessionName)
				if !got.IsNew {
					t.Fatalf("the 1h store served a session created 90 minutes ago: values %v", got.Values)
				}
				got.Values["k"] = "w"
				if err := got.Save(r, w); err != nil { // inserted under a fresh ID
					t.Fatalf("Save: %v", err)
				}
			})
			return got
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: 2 * time.Hour})
			short := storeOn(t, f.coll, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: time.Hour})
			// The store's MaxAge (a day) keeps the session within its
			// idle timeout throughout.
			b, id := saveNewSession(t, f, map[any]any{"user": "ada"})
			expiresAt := documentDate(t, storedDocument(t, f, id), fieldExpiresAt)
			if want := clock.Now().Add(2 * time.Hour); !expiresAt.Equal(want) {
				t.Fatalf("expiresAt = %v, want creation + 2h (%v)", expiresAt, want)
			}
			clock.Advance(90 * time.Minute)
			if s, err := loadSession(t, f, b); err != nil || s.IsNew {
				t.Fatalf("the 2h store does not load the session at 90 minutes: IsNew=%v err=%v", s.IsNew, err)
			}
			s := tc.request(t, short, b)
			if !s.IsNew || s.Values["user"] != nil {
				t.Fatalf("the 1h store served a session created 90 minutes ago: IsNew=%v values %v", s.IsNew, s.Values)
			}
			if s.ID == id {
				t.Fatal("the 1h store adopted the old session ID")
			}
			if got := documentDate(t, storedDocument(t, f, id), fieldExpiresAt); !got.Equal(expiresAt) {
				t.Fatalf("the old document's expiresAt moved: %v -> %v", expiresAt, got)
			}
		})
	}
}

// TestRegenerateIDKeepsAbsoluteLifetime checks that rotating the ID does
// not restart the absolute timeout.
// Before: RegenerateID inserted the new document as created now, so each rotation gave the session another AbsoluteTimeout.
func TestRegenerateIDKeepsAbsoluteLifetime(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: time.Hour})
	created := clock.Now()
	end := created.Add(time.Hour)
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	// Rotate at 50 minutes, then again a second before the hour is up.
	for _, at := range []time.Duration{50 * time.Minute, time.Hour - time.Second} {
		clock.Advance(at - clock.Now().Sub(created))
		var newID string
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, err := f.store.Get(r, testSessionName)
			if err != nil || s.IsNew {
				t.Fatalf("at %v: not loaded: IsNew=%v err=%v", at, s.IsNew, err)
			}
			before, _ := f.store.Times(s)
			oldID := s.ID
			if err := f.store.RegenerateID(r, w, s); err != nil {
				t.Fatalf("at %v: RegenerateID: %v", at, err)
			}
			after, ok := f.store.Times(s)
			if !ok || s.ID == oldID || !after.CreatedAt.Equal(before.CreatedAt) || !after.CreatedAt.Equal(created) {
				t.Fatalf("at %v: CreatedAt %v -> %v (stored %v, new ID %v), want %v unchanged", at, before.CreatedAt, after.CreatedAt, ok, s.ID != oldID, created)
			}
			if !after.ExpiresAt.Equal(end) {
				t.Fatalf("at %v: ExpiresAt = %v, want %v (creation + AbsoluteTimeout)", at, after.ExpiresAt, end)
			}
			newID = s.ID
		})
		doc := storedDocument(t, f, newID)
		if got := documentDate(t, doc, fieldCreatedAt); !got.Equal(created) {
			t.Fatalf("at %v: the new document's createdAt = %v, want %v", at, got, created)
		}
		if got := documentDate(t, doc, fieldExpiresAt); !got.Equal(end) {
			t.Fatalf("at %v: the new document's expiresAt = %v, want %v", at, got, end)
		}
	}
	clock.Advance(time.Second) // an hour after creation
	if s, err := loadSession(t, f, b); err != nil || !s.IsNew {
		t.Fatalf("an hour after creation the session still loads (IsNew=%v, err %v): rotations extended its absolute lifetime", s.IsNew, err)
	}
}

// TestEndingEndsEverySessionCookie checks that a logout, or Restart, of a
// request carrying two valid cookies with the session's name (one tossed
// in by a sibling domain, sent first) ends both sessions.
func TestEndingEndsEverySessionCookie(t *testing.T) {
	for _, tc := range []struct {
		name string
		// end ends the session of a request carrying both cookies.
		end func(t *testing.T, f *storeFixture, r *http.Request) *httptest.ResponseRecorder
	}{
		// Before: the logout deleted the document of the loaded (first) cookie only; the other session stayed live.
		{"logout", func(t *testing.T, f *storeFixture, r *http.Request) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			s, _ := f.store.Get(r, testSessionName)
			s.Options.MaxAge = -1
			if err := s.Save(r, rec); err != nil {
				t.Fatalf("logout: %v", err)
			}
			return rec
		}},
		// Before: the same, through the middleware's save.
		{"logout through the middleware", func(t *testing.T, f *storeFixture, r *http.Request) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				s.Options.MaxAge = -1
				fmt.Fprintln(w, "bye")
			}).ServeHTTP(rec, r)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, want 200", rec.Code)
			}
			return rec
		}},
		// Before: Restart deleted the document of the loaded (first) cookie only.
		{"Restart", func(t *testing.T, f *storeFixture, r *http.Request) *httptest.ResponseRecorder {
			s, _ := f.store.Get(r, testSessionName)
			if err := f.store.Restart(r, s); err != nil {
				t.Fatalf("Restart: %v", err)
			}
			if n := f.count(t); n != 0 {
				t.Fatalf("%d documents after Restart, want 0", n)
			}
			// The login goes on: the restarted session is stored afresh.
			rec := httptest.NewRecorder()
			s.Values["user"] = "ada"
			if err := s.Save(r, rec); err != nil {
				t.Fatalf("Save after Restart: %v", err)
			}
			return rec
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := &eventLog{}
			f := newFixture(t, Config{Expiry: ExpiryNone, OnEvent: events.add})
			ours, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
			tossed, _ := saveNewSession(t, f, map[any]any{"user": "mallory"})
			events.take()
			if n := f.count(t); n != 2 {
				t.Fatalf("%d documents, want 2", n)
			}
			// A request carrying both cookies, the tossed one first.
			request := func() *http.Request {
				r := httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
				r.AddCookie(&http.Cookie{Name: testSessionName, Value: tossed.cookies[testSessionName].Value})
				r.AddCookie(&http.Cookie{Name: testSessionName, Value: ours.cookies[testSessionName].Value})
				return r
			}
			if s, err := f.store.Get(request(), testSessionName); err != nil || s.IsNew || s.Values["user"] != "mallory" {
				t.Fatalf("the request loads IsNew=%v values %v (err %v), want the first cookie's session", s.IsNew, s.Values, err)
			}
			rec := tc.end(t, f, request())
			want := int64(0)
			if tc.name == "Restart" {
				want = 1 // the new session saved after Restart
			}
			if n := f.count(t); n != want {
				t.Fatalf("%d documents left, want %d: ending the session left the other cookie's session", n, want)
			}
			// Both endings are reported (before: the other cookie's silently).
			ended := "ended/logout"
			if tc.name == "Restart" {
				ended = "ended/restart"
			}
			events.wantEvents(t, tc.name, append([]string{ended, ended}, []string{"created"}[:want]...)...)
			for name, b := range map[string]*browser{"ours": ours, "tossed": tossed} {
				if s, err := loadSession(t, f, b); err != nil || !s.IsNew {
					t.Errorf("the %s cookie still loads a session: IsNew=%v values %v err %v", name, s.IsNew, s.Values, err)
				}
			}
			if tc.name != "Restart" {
				if c := responseCookie(rec.Header(), testSessionName); c == nil || c.MaxAge >= 0 {
					t.Errorf("response cookie %v, want the session cookie expired", c)
				}
			}
		})
	}
}

// TestOwnMaxAgeIsKept checks that a session saved with its own
// Options.MaxAge ("remember me", 30 days) keeps it when loaded, while the
// store's default is one day.
func TestOwnMaxAgeIsKept(t *testing.T) {
	const day = 24 * time.Hour
	const remember = 30 * 24 * 60 * 60 // seconds
	for _, tc := range []struct {
		name string
		// touch runs the request at day 2.5, which must keep the session
		// alive for another 30 days.
		touch func(t *testing.T, f *storeFixture, b *browser)
	}{
		// Before: load gave the session the store's MaxAge (1 day), so the save at day 0.5 set expiresAt to day 1.5, and at day 2.5 the session was gone.
		{"Save", func(t *testing.T, f *storeFixture, b *browser) {
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, err := f.store.Get(r, testSessionName)
				if err != nil || s.IsNew {
					t.Fatalf("at day 2.5: IsNew=%v err=%v, want the remembered session", s.IsNew, err)
				}
				if s.Options.MaxAge != remember {
					t.Fatalf("at day 2.5: loaded Options.MaxAge = %d, want %d", s.Options.MaxAge, remember)
				}
				s.Values["visits"] = 2
				if err := s.Save(r, w); err != nil {
					t.Fatalf("Save at day 2.5: %v", err)
				}
			})
		}},
		// Before: the same; the middleware's touch never came.
		{"middleware touch", func(t *testing.T, f *storeFixture, b *browser) {
			rec := b.do(strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if s.IsNew || s.Options.MaxAge != remember {
					t.Errorf("at day 2.5: IsNew=%v Options.MaxAge=%d, want the remembered session with MaxAge %d", s.IsNew, s.Options.MaxAge, remember)
				}
				fmt.Fprintln(w, "user:", s.Values["user"]) // read only
			}).ServeHTTP)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, want 200", rec.Code)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			// An AbsoluteTimeout above 30 days: by default a session lives
			// at most its own MaxAge from its creation.
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: 90 * day})
			if f.store.Options.MaxAge != 24*60*60 {
				t.Fatalf("the store's default MaxAge is %d, want a day", f.store.Options.MaxAge)
			}
			b := newBrowser()
			var id string
			b.do(func(w http.ResponseWriter, r *http.Request) { // login with "remember me"
				s, _ := f.store.Get(r, testSessionName)
				s.Values["user"] = "ada"
				s.Options.MaxAge = remember
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
				id = s.ID
			})
			if got, _ := storedDocument(t, f, id).Lookup(fieldMaxAge).AsInt64OK(); got != remember {
				t.Fatalf("the document's maxAge = %d, want %d", got, remember)
			}
			clock.Advance(day / 2)
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, err := f.store.Get(r, testSessionName)
				if err != nil || s.IsNew {
					t.Fatalf("at day 0.5: IsNew=%v err=%v", s.IsNew, err)
				}
				if s.Options.MaxAge != remember {
					t.Fatalf("at day 0.5: loaded Options.MaxAge = %d, want %d", s.Options.MaxAge, remember)
				}
				s.Values["visits"] = 1
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
				if times, _ := f.store.Times(s); !times.ExpiresAt.Equal(clock.Now().Add(remember * time.Second)) {
					t.Fatalf("at day 0.5: ExpiresAt = %v, want 30 days on", times.ExpiresAt)
				}
			})
			clock.Advance(2 * day) // two idle days: more than the store's default MaxAge
			tc.touch(t, f, b)
			doc := storedDocument(t, f, id)
			if got, want := documentDate(t, doc, fieldExpiresAt), clock.Now().Add(remember*time.Second); !got.Equal(want) {
				t.Fatalf("after the request at day 2.5, expiresAt = %v, want %v (30 days after it)", got, want)
			}
			if got := documentDate(t, doc, fieldUpdatedAt); !got.Equal(clock.Now()) {
				t.Fatalf("updatedAt = %v, want %v", got, clock.Now())
			}
			if got, _ := doc.Lookup(fieldMaxAge).AsInt64OK(); got != remember {
				t.Fatalf("the document's maxAge = %d, want %d", got, remember)
			}
			if c := b.cookies[testSessionName]; c == nil || c.MaxAge != remember {
				t.Fatalf("the browser's cookie %v, want Max-Age %d", c, remember)
			}
			if s, err := loadSession(t, f, b); err != nil || s.IsNew || s.Options.MaxAge != remember {
				t.Fatalf("after day 2.5: IsNew=%v MaxAge=%d err=%v", s.IsNew, s.Options.MaxAge, err)
			}
		})
	}
}

// TestEndingAfterLowerAbsoluteTimeoutDeletesDocument checks that ending a
// session through a store whose lower AbsoluteTimeout no longer serves it
// (another instance, during a configuration rollout) deletes its document,
// which an instance with the higher AbsoluteTimeout would otherwise still
// serve to the cookie the user logged out of.
//
// Fails at e3496e5 (library bug): Store.load keeps no state for a document
// it finds but judges ended (s.live false), and the session is new, so
// Store.end / Store.Restart (deleteAll) delete nothing.
func TestEndingAfterLowerAbsoluteTimeoutDeletesDocument(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, store *Store, b *browser)
	}{
		{"logout", func(t *testing.T, store *Store, b *browser) {
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := store.Get(r, testSessionName)
				s.Options.MaxAge = -1
				if err := s.Save(r, w); err != nil {
					t.Fatalf("logout: %v", err)
				}
			})
		}},
		{"logout through the middleware", func(t *testing.T, store *Store, b *browser) {
			b.do(strictSessionHandler(t, store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				s.Options.MaxAge = -1
			}).ServeHTTP)
		}},
		{"Restart", func(t *testing.T, store *Store, b *browser) {
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := store.Get(r, testSessionName)
				if err := store.Restart(r, s); err != nil {
					t.Fatalf("Restart: %v", err)
				}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: 2 * time.Hour})
			short := storeOn(t, f.coll, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: time.Hour})
			b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
			copied := &browser{cookies: map[string]*http.Cookie{testSessionName: b.cookies[testSessionName]}}
			clock.Advance(90 * time.Minute)
			tc.end(t, short, b)
			if n := f.count(t); n != 0 {
				t.Errorf("%d documents after the session was ended, want 0", n)
			}
			if s, _ := loadSession(t, f, copied); !s.IsNew {
				t.Errorf("the 2h store still serves the ended session's cookie: values %v", s.Values)
			}
		})
	}
}

// TestLoadSkipsDeadCookies checks that a dead cookie ahead of a live one (a
// sibling domain may toss one in; signed cookies of ended sessions verify
// for ever) does not hide the live session, and that a logout then ends
// the live one. Before: only the first cookie was loaded, so the user got a
// new session at every request and could never stay logged in.
func TestLoadSkipsDeadCookies(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	live, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	dead, _ := saveNewSession(t, f, map[any]any{"user": "mallory"})
	deadCookie := dead.cookies[testSessionName].Value
	dead.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatalf("ending the tossed session: %v", err)
		}
	})
	r := httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
	r.AddCookie(&http.Cookie{Name: testSessionName, Value: deadCookie})
	r.AddCookie(&http.Cookie{Name: testSessionName, Value: live.cookies[testSessionName].Value})
	s, err := f.store.Get(r, testSessionName)
	if err != nil || s.IsNew || s.Values["user"] != "ada" {
		t.Fatalf("Get = new %v, values %v, %v; want ada's session, behind the dead cookie", s.IsNew, s.Values, err)
	}
	s.Options.MaxAge = -1
	if err := s.Save(r, httptest.NewRecorder()); err != nil {
		t.Fatalf("logout: %v", err)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents after the logout, want 0", n)
	}
}

// TestLogoutAfterFailedLoadEndsTheSession checks that a logout still ends
// the cookie's session when the load failed (a database error gives a new
// session). Before: the store knew nothing of the cookie's document, so the
// logout deleted nothing, returned nil, and a stolen cookie kept working.
func TestLogoutAfterFailedLoadEndsTheSession(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the load fails; the logout's save outlives the request's context
	r := b.request().WithContext(ctx)
	s, err := f.store.Get(r, testSessionName)
	if !errors.Is(err, ErrDatabase) || !s.IsNew {
		t.Fatalf("Get with a cancelled context = new %v, %v; want a new session and ErrDatabase", s.IsNew, err)
	}
	s.Options.MaxAge = -1
	if err := s.Save(r, httptest.NewRecorder()); err != nil {
		t.Fatalf("logout: %v", err)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents after the logout, want 0: the session stayed live", n)
	}
}

// TestNoNewSessionAfterAFailedLoad: a session whose load failed on a
// database error (a blip) is not saved as a new one, by Save or
// RegenerateID: its cookie would take the place of the stored session's,
// signing its user out, as an application that ignores Get's error (as
// gorilla's README does) would. Restart starts anew.
func TestNoNewSessionAfterAFailedLoad(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, id := saveNewSession(t, f, map[any]any{"user": "ada"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the load fails; the save outlives the request's context
	r := b.request().WithContext(ctx)
	s, err := f.store.Get(r, testSessionName)
	if !errors.Is(err, ErrDatabase) || !s.IsNew {
		t.Fatalf("Get with a cancelled context = new %v, %v; want a new session and ErrDatabase", s.IsNew, err)
	}
	s.Values["visits"] = 1
	for name, save := range map[string]func(w http.ResponseWriter) error{
		"Save":         func(w http.ResponseWriter) error { return s.Save(r, w) },
		"RegenerateID": func(w http.ResponseWriter) error { return f.store.RegenerateID(r, w, s) },
	} {
		rec := httptest.NewRecorder()
		if err := save(rec); !errors.Is(err, ErrDatabase) || rec.Header().Get("Set-Cookie") != "" || f.count(t) != 1 {
			t.Errorf("%s after a failed load: %v, Set-Cookie %q, %d documents; want ErrDatabase, no cookie, the stored session alone",
				name, err, rec.Header().Get("Set-Cookie"), f.count(t))
		}
	}
	if loaded, err := loadSession(t, f, b); err != nil || loaded.ID != id {
		t.Fatalf("the stored session after the refused saves: %v, %v", loaded.ID, err)
	}
	if err := f.store.Restart(b.request(), s); err != nil {
		t.Fatal(err)
	}
	s.Values["user"] = "bob"
	if err := s.Save(b.request(), httptest.NewRecorder()); err != nil {
		t.Fatalf("Save after Restart: %v", err)
	}
}

// TestLogoutAfterFailedLoadWithAStaleCookieAhead: a logout after a load
// that failed on a database error ends the session even when the request
// carries its cookie from before a RegenerateID ahead of its live one (a
// fixation attempt's planted cookie). Before: one secret was kept per
// chain, the first cookie's, so the delete matched nothing, the logout
// reported success, and the live cookie kept working.
func TestLogoutAfterFailedLoadWithAStaleCookieAhead(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	stale := b.cookies[testSessionName].Value
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatalf("RegenerateID: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the load fails; the logout's save outlives the request's context
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://example.test/", nil)
	r.AddCookie(&http.Cookie{Name: testSessionName, Value: stale})
	r.AddCookie(&http.Cookie{Name: testSessionName, Value: b.cookies[testSessionName].Value})
	s, err := f.store.Get(r, testSessionName)
	if !errors.Is(err, ErrDatabase) {
		t.Fatalf("Get with a cancelled context: %v, want ErrDatabase", err)
	}
	s.Options.MaxAge = -1
	if err := s.Save(r, httptest.NewRecorder()); err != nil {
		t.Fatalf("logout: %v", err)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents after the logout, want 0: the session stayed live", n)
	}
}

// TestLogoutDespiteCookiePrefixOptions checks that a logout deletes the
// session even when the cookie's options no longer suit its __Host- name
// (deleting needs no cookie). Before: Save refused with ErrInvalidConfig
// and the session stayed live.
func TestLogoutDespiteCookiePrefixOptions(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	const name = "__Host-sid"
	f.store.Options.Secure = true
	b := newBrowser()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, name)
		s.Values["user"] = "ada"
		if err := s.Save(r, w); err != nil {
			t.Fatalf("Save: %v", err)
		}
	})
	f.store.Options.Secure = false // a later deployment lost Secure
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, name)
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatalf("logout: %v", err)
		}
	})
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents after the logout, want 0", n)
	}
}

// TestChainsOfTheLoadedCookie: a request's one cookie, the loaded
// session's, leaves no other cookie to end, and costs a load no allocation
// (the hash of its secret is not made); two cookies of one chain with
// different secrets are both kept, one of the same secret once.
func TestChainsOfTheLoadedCookie(t *testing.T) {
	live, stale := newCookieToken(freshToken(), "v"), newCookieToken(freshToken(), "w")
	stale.chain = live.chain // from before a RegenerateID
	tokens := []cookieToken{live}
	if n := testing.AllocsPerRun(100, func() { _ = chainsOf(tokens, live.chain) }); n != 0 || len(chainsOf(tokens, live.chain)) != 0 {
		t.Fatalf("chainsOf of the loaded cookie alone: %v allocations, %v; want none", n, chainsOf(tokens, live.chain))
	}
	if got := chainsOf([]cookieToken{stale, live, stale}, ""); len(got) != 2 || got[0].sid == got[1].sid {
		t.Fatalf("chainsOf of two secrets of one chain: %v, want both, each once", got)
	}
}
