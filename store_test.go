package mongostore

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/securecookie"
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

func TestNewStoreRejectsInvalidConfig(t *testing.T) {
	client := testClient(t, nil)
	coll := testCollection(t, client)
	tests := []struct {
		name string
		cfg  Config
		keys [][]byte
	}{
		{"no keys", Config{}, nil},
		{"empty hash key", Config{}, [][]byte{{}}},
		{"short hash key", Config{}, [][]byte{[]byte("too short")}},
		{"block key of 10 bytes", Config{}, [][]byte{testHashKey, make([]byte, 10)}},
		{"bad second pair", Config{}, [][]byte{testHashKey, nil, []byte("short")}},
		{"unknown expiry mode", Config{Expiry: ExpiryMode(42)}, [][]byte{testHashKey}},
		{"GC interval too short", Config{GCInterval: time.Millisecond}, [][]byte{testHashKey}},
		{"negative timeout", Config{Timeout: -1}, [][]byte{testHashKey}},
		{"idle timeout under a second", Config{DefaultIdleTimeout: time.Millisecond}, [][]byte{testHashKey}},
		{"absolute timeout under a second", Config{AbsoluteTimeout: time.Millisecond}, [][]byte{testHashKey}},
		{"negative max size", Config{MaxSize: -1}, [][]byte{testHashKey}},
		{"max size over 15 MiB", Config{MaxSize: 16 << 20}, [][]byte{testHashKey}},
		{"short ID hash key", Config{IDHashKey: []byte("short")}, [][]byte{testHashKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = testLogger(&syncBuffer{})
			s, err := NewStore(context.Background(), coll, tt.cfg, tt.keys...)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewStore error = %v, want ErrInvalidConfig", err)
			}
			if s != nil {
				t.Fatal("NewStore returned a store with an error")
			}
		})
	}
	t.Run("nil collection", func(t *testing.T) {
		if _, err := NewStore(context.Background(), nil, Config{}, testHashKey); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("error = %v, want ErrInvalidConfig", err)
		}
	})
	t.Run("valid pairs with and without block keys", func(t *testing.T) {
		for _, keys := range [][][]byte{
			{testHashKey},
			{testHashKey, nil},
			{testHashKey, make([]byte, 16)},
			{testHashKey, make([]byte, 24), otherHashKey, make([]byte, 32)},
		} {
			s, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone}, keys...)
			if err != nil {
				t.Fatalf("NewStore with %d keys: %v", len(keys), err)
			}
			s.Close()
		}
	})
}

func TestNewSessionDefaults(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone}) // no GC sweeps among the counted commands
	want := sessions.Options{Path: "/", MaxAge: DefaultMaxAge, HttpOnly: true, SameSite: http.SameSiteLaxMode}
	if *f.store.Options != want {
		t.Fatalf("store.Options = %+v, want %+v", *f.store.Options, want)
	}
	f.store.Options.Domain = "example.test" // a user's change is copied verbatim
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	s, err := f.store.New(r, testSessionName)
	if err != nil || s == nil {
		t.Fatalf("New = %v, %v", s, err)
	}
	if !s.IsNew || s.ID != "" || len(s.Values) != 0 || s.Name() != testSessionName || s.Store() != f.store {
		t.Fatalf("new session = %+v", s)
	}
	if s.Options == f.store.Options {
		t.Fatal("session shares the store's Options instead of a copy")
	}
	if *s.Options != *f.store.Options {
		t.Fatalf("session options %+v differ from the store's %+v", *s.Options, *f.store.Options)
	}
	s2, _ := f.store.Get(r, testSessionName)
	s3, _ := f.store.Get(r, testSessionName)
	if s2 != s3 {
		t.Fatal("Get returned different sessions for one request and name (no registry)")
	}
	if got := f.cmds.count.Load(); got != 0 {
		t.Fatalf("a request without cookie sent %d commands, want 0", got)
	}
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

func TestExpiredSessionIsNotLoaded(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, id := saveNew(t, f, map[any]any{"user": "ada"})

	clock.Advance(59 * time.Second)
	if s, err := load(t, f, b); err != nil || s.IsNew {
		t.Fatalf("before expiry: IsNew=%v err=%v, want the stored session", s.IsNew, err)
	}
	clock.Advance(2 * time.Second)
	s, err := load(t, f, b)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !s.IsNew || len(s.Values) != 0 || s.ID == id {
		t.Fatalf("expired session loaded: IsNew=%v values=%v", s.IsNew, s.Values)
	}
	// Nothing deleted it: the read filter alone kept it out.
	if n := f.count(t); n != 1 {
		t.Fatalf("%d documents, want the expired one still there", n)
	}
}

func TestExpiryWithRealClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.store.MaxAge(1)
	b, _ := saveNew(t, f, map[any]any{"user": "ada"})
	if s, err := load(t, f, b); err != nil || s.IsNew {
		t.Fatalf("fresh session not loaded: IsNew=%v err=%v", s.IsNew, err)
	}
	time.Sleep(2100 * time.Millisecond) // securecookie timestamps have one-second resolution
	s, err := load(t, f, b)
	if !s.IsNew || len(s.Values) != 0 {
		t.Fatalf("session loaded after its max age: values=%v err=%v", s.Values, err)
	}
}

func TestIdleAndAbsoluteTimeouts(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	f := newFixture(t, Config{Now: clock.Now, AbsoluteTimeout: 150 * time.Second, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, id := saveNew(t, f, map[any]any{"n": 0})

	// touch loads the session, saves it and returns its expiry and the
	// response cookie's Max-Age.
	touch := func() (time.Time, int, error) {
		t.Helper()
		var exp time.Time
		var saveErr error
		rec := b.do(func(w http.ResponseWriter, r *http.Request) {
			s, err := f.store.Get(r, testSessionName)
			if err != nil || s.IsNew {
				saveErr = fmt.Errorf("load: IsNew=%v err=%v", s.IsNew, err)
				return
			}
			s.Values["n"] = s.Values["n"].(int) + 1
			if saveErr = s.Save(r, w); saveErr == nil {
				exp, _ = f.store.ExpiresAt(s)
			}
		})
		maxAge := 0
		for _, c := range (&http.Response{Header: rec.Header()}).Cookies() {
			maxAge = c.MaxAge
		}
		return exp, maxAge, saveErr
	}

	clock.Advance(50 * time.Second)
	exp, maxAge, err := touch()
	if err != nil || !exp.Equal(start.Add(110*time.Second)) || maxAge != 60 {
		t.Fatalf("at +50s: expiresAt=+%v maxAge=%d err=%v; want +110s (sliding), 60", exp.Sub(start), maxAge, err)
	}
	clock.Advance(50 * time.Second)
	exp, maxAge, err = touch()
	if err != nil || !exp.Equal(start.Add(150*time.Second)) || maxAge != 50 {
		t.Fatalf("at +100s: expiresAt=+%v maxAge=%d err=%v; want +150s (absolute cap), cookie 50", exp.Sub(start), maxAge, err)
	}
	stored := readDocument(t, f, id)
	if got := stored.Lookup(fieldExpiresAt).Time(); !got.Equal(start.Add(150 * time.Second)) {
		t.Fatalf("document expiresAt = +%v, want +150s", got.Sub(start))
	}
	clock.Advance(49 * time.Second)
	if _, _, err := touch(); err != nil {
		t.Fatalf("at +149s: %v", err)
	}
	clock.Advance(2 * time.Second)
	if s, _ := load(t, f, b); !s.IsNew {
		t.Fatal("session loaded past its absolute timeout")
	}

	// Idle timeout: a session left alone for longer than MaxAge is gone.
	b2, _ := saveNew(t, f, map[any]any{"n": 0})
	clock.Advance(61 * time.Second)
	if s, _ := load(t, f, b2); !s.IsNew {
		t.Fatal("session loaded after its idle timeout")
	}
}

func TestBrowserSessionCookieStillExpiresOnServer(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	f := newFixture(t, Config{Now: clock.Now, DefaultIdleTimeout: time.Hour, Expiry: ExpiryNone})
	f.store.MaxAge(0)
	b := newBrowser()
	rec := b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["k"] = "v"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
		if exp, _ := f.store.ExpiresAt(s); !exp.Equal(start.Add(time.Hour)) {
			t.Fatalf("expiresAt = +%v, want +1h", exp.Sub(start))
		}
	})
	if c := rec.Result().Cookies()[0]; c.MaxAge != 0 || !c.Expires.IsZero() {
		t.Fatalf("cookie MaxAge=%d Expires=%v, want a browser-session cookie", c.MaxAge, c.Expires)
	}
	clock.Advance(time.Hour + time.Second)
	if s, _ := load(t, f, b); !s.IsNew {
		t.Fatal("browser-session cookie kept the session past DefaultIdleTimeout")
	}
}

// readDocument returns the stored document of session ID id.
func readDocument(t *testing.T, f *storeFixture, id string) bson.Raw {
	t.Helper()
	raw, err := f.coll.FindOne(context.Background(), bson.D{{Key: fieldID, Value: f.store.hasher.docID(id)}}).Raw()
	if err != nil {
		t.Fatalf("read document: %v", err)
	}
	return raw
}

func TestDocumentLayout(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	_, id := saveNew(t, f, map[any]any{"k": "v"})
	doc := readDocument(t, f, id)
	for field, typ := range map[string]bson.Type{
		fieldID: bson.TypeString, fieldData: bson.TypeBinary,
		fieldCreatedAt: bson.TypeDateTime, fieldUpdatedAt: bson.TypeDateTime, fieldExpiresAt: bson.TypeDateTime,
	} {
		v, err := doc.LookupErr(field)
		if err != nil || v.Type != typ {
			t.Errorf("field %s: type %v, err %v; want %v", field, v.Type, err, typ)
		}
	}
	if got := doc.Lookup(fieldExpiresAt).Time(); !got.Equal(clock.Now().Add(DefaultMaxAge * time.Second)) {
		t.Errorf("expiresAt = %v, want now + MaxAge", got)
	}
}

func TestDatabaseNeverHoldsRawSessionID(t *testing.T) {
	for _, tt := range []struct {
		name string
		key  []byte
	}{{"sha256", nil}, {"hmac", bytes.Repeat([]byte{0x44}, 32)}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{IDHashKey: tt.key})
			_, id := saveNew(t, f, map[any]any{"k": "v"})
			raw, _ := idEncoding.DecodeString(id)

			var want string
			if tt.key == nil {
				sum := sha256.Sum256([]byte(id))
				want = hex.EncodeToString(sum[:])
			} else {
				m := hmac.New(sha256.New, tt.key)
				m.Write([]byte(id))
				want = hex.EncodeToString(m.Sum(nil))
			}
			cur, err := f.coll.Find(context.Background(), bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			var docs []bson.Raw
			if err := cur.All(context.Background(), &docs); err != nil || len(docs) != 1 {
				t.Fatalf("documents: %d, %v", len(docs), err)
			}
			if got := docs[0].Lookup(fieldID).StringValue(); got != want {
				t.Fatalf("_id = %s, want %s", got, want)
			}
			if bytes.Contains(docs[0], []byte(id)) || bytes.Contains(docs[0], raw) || strings.Contains(docs[0].String(), id) {
				t.Fatal("the document contains the raw session ID")
			}
		})
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
}

func TestUnusableCookies(t *testing.T) {
	f := newFixture(t, Config{})
	f.store.MaxAge(3600)
	b, _ := saveNew(t, f, map[any]any{"k": "v"})
	good := b.cookies[testSessionName].Value

	foreign := securecookie.New(otherHashKey, nil)
	foreign.SetSerializer(securecookie.NopEncoder{})
	foreignValue, _ := foreign.Encode(testSessionName, []byte(newSessionID()))
	own := f.store.codecs[0]
	badID, _ := own.Encode(testSessionName, []byte("not-a-session-id"))
	otherName, _ := own.Encode("other", []byte(newSessionID()))
	flipped := []byte(good)
	flipped[len(flipped)/2] ^= 0x01
	if flipped[len(flipped)/2] == good[len(good)/2] {
		t.Fatal("flip failed")
	}

	for _, tt := range []struct{ name, value string }{
		{"tampered", string(flipped)},
		{"truncated", good[:len(good)-5]},
		{"empty", ""},
		{"garbage", "%%%not base64%%%"},
		{"huge", strings.Repeat("A", 5000)},
		{"foreign key", foreignValue},
		{"malformed ID", badID},
		{"signed for another name", otherName},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.cmds.reset()
			b := &browser{cookies: map[string]*http.Cookie{testSessionName: {Name: testSessionName, Value: tt.value}}}
			rec := httptest.NewRecorder()
			r := b.request()
			s, err := f.store.Get(r, testSessionName)
			if s == nil || !s.IsNew || s.ID != "" || len(s.Values) != 0 {
				t.Fatalf("Get gave %+v, want a fresh session", s)
			}
			if tt.value != "" && !errors.Is(err, ErrInvalidCookie) {
				t.Fatalf("error = %v, want ErrInvalidCookie", err)
			}
			if n := f.cmds.count.Load(); n != 0 {
				t.Fatalf("%d database commands for a cookie that fails its check, want 0", n)
			}
			if len(rec.Header()) != 0 {
				t.Fatal("Get wrote to the response")
			}
		})
	}

	t.Run("expired signed timestamp", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, Config{})
		f.store.MaxAge(1)
		b, _ := saveNew(t, f, map[any]any{"k": "v"})
		f.store.MaxAge(3600) // the document lives on; only the cookie's timestamp expires
		for _, c := range f.store.codecs {
			c.(*securecookie.SecureCookie).MaxAge(1)
		}
		time.Sleep(2100 * time.Millisecond)
		f.cmds.reset()
		s, err := load(t, f, b)
		if !s.IsNew || !errors.Is(err, ErrInvalidCookie) || f.cmds.count.Load() != 0 {
			t.Fatalf("IsNew=%v err=%v commands=%d; want fresh session, ErrInvalidCookie, no query", s.IsNew, err, f.cmds.count.Load())
		}
	})
}

func TestKeyRotation(t *testing.T) {
	client := testClient(t, nil)
	coll := testCollection(t, client)
	newStore := func(keys ...[]byte) *storeFixture {
		s, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone}, keys...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return &storeFixture{store: s, coll: coll, cmds: &commandLog{}}
	}
	oldKeys := newStore(otherHashKey, testBlockKey)
	rotated := newStore(testHashKey, nil, otherHashKey, testBlockKey)
	onlyNew := newStore(testHashKey)

	b, _ := saveNew(t, oldKeys, map[any]any{"user": "ada"})
	if s, err := load(t, rotated, b); err != nil || s.IsNew || s.Values["user"] != "ada" {
		t.Fatalf("rotated store cannot read an old-key cookie: IsNew=%v err=%v", s.IsNew, err)
	}
	// A save re-issues the cookie with the first (new) key pair.
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := rotated.store.Get(r, testSessionName)
		s.Values["n"] = 1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	if s, err := load(t, onlyNew, b); err != nil || s.IsNew || s.Values["user"] != "ada" {
		t.Fatalf("re-issued cookie not signed with the new key: IsNew=%v err=%v", s.IsNew, err)
	}
	if s, err := load(t, oldKeys, b); !s.IsNew || !errors.Is(err, ErrInvalidCookie) {
		t.Fatalf("old-key store read a new-key cookie: IsNew=%v err=%v", s.IsNew, err)
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

func TestStateIsReleasedWithSessions(t *testing.T) {
	f := newFixture(t, Config{})
	b, _ := saveNew(t, f, map[any]any{"k": "v"})
	for range 200 {
		if s, err := load(t, f, b); err != nil || s.IsNew {
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

func TestNilStoreOptionsFallBackToDefaults(t *testing.T) {
	f := newFixture(t, Config{})
	f.store.Options = nil
	b, _ := saveNew(t, f, map[any]any{"k": "v"})
	if c := b.cookies[testSessionName]; c.MaxAge != DefaultMaxAge || !c.HttpOnly || c.Path != "/" {
		t.Fatalf("cookie %+v, want the default attributes", c)
	}
}

func TestForeignDataNeverReachesTheCodec(t *testing.T) {
	spy := &spyCodec{}
	f := newFixture(t, Config{Codec: spy})
	b, id := saveNew(t, f, map[any]any{"user": "ada"})
	docID := f.store.hasher.docID(id)

	// Someone with write access to the collection, but not the app's keys,
	// replaces the data (a crafted gob stream can exhaust memory).
	hostile := []byte("\r\x7f\x04\x01\x02\xff0\x00\x01\x10\x01\x10\x00\x007\xff\x80")
	if _, err := f.coll.UpdateOne(context.Background(), bson.D{{Key: fieldID, Value: docID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldData, Value: bson.Binary{Data: hostile}}}}}); err != nil {
		t.Fatal(err)
	}
	spy.decoded = nil
	s, err := load(t, f, b)
	if !errors.Is(err, ErrDecode) || !s.IsNew {
		t.Fatalf("Get = IsNew %v, %v; want a fresh session and ErrDecode", s.IsNew, err)
	}
	if spy.decoded != nil {
		t.Fatalf("the codec was given unauthenticated data %q", spy.decoded)
	}

	// Data moved from another session's document fails too: the MAC binds
	// the data to its _id.
	_, other := saveNew(t, f, map[any]any{"user": "eve"})
	otherDoc := readDocument(t, f, other)
	if _, err := f.coll.UpdateOne(context.Background(), bson.D{{Key: fieldID, Value: docID}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: fieldData, Value: otherDoc.Lookup(fieldData)},
			{Key: fieldMAC, Value: otherDoc.Lookup(fieldMAC)},
		}}}); err != nil {
		t.Fatal(err)
	}
	if s, err := load(t, f, b); !errors.Is(err, ErrDecode) || s.Values["user"] == "eve" {
		t.Fatalf("swapped data accepted: %v, %v", s.Values, err)
	}

	// A store whose keys rotated still reads documents sealed with the old key.
	rotated, err := NewStore(context.Background(), f.coll, Config{Expiry: ExpiryNone, Codec: spy}, otherHashKey, nil, testHashKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := saveNew(t, f, map[any]any{"user": "ada"})
	rf := &storeFixture{store: rotated, coll: f.coll, cmds: f.cmds}
	if s, err := load(t, rf, b2); err != nil || s.Values["user"] != "ada" {
		t.Fatalf("rotated store: %v, %v", s.Values, err)
	}
}

func TestStoreEdgeCases(t *testing.T) {
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
	t.Run("dates moved in the database fail the MAC", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, id := saveNew(t, f, map[any]any{"k": "v"})
		later := time.Now().Add(365 * 24 * time.Hour)
		if _, err := f.coll.UpdateOne(context.Background(), bson.D{{Key: fieldID, Value: f.store.hasher.docID(id)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: fieldExpiresAt, Value: bsonDate(later)}}}}); err != nil {
			t.Fatal(err)
		}
		if s, err := load(t, f, b); !errors.Is(err, ErrDecode) || !s.IsNew {
			t.Fatalf("a session whose expiry was pushed out loaded: %v", err)
		}
	})
	t.Run("securecookie errors are visible to errors.Is", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, _ := saveNew(t, f, map[any]any{"k": "v"})
		c := b.cookies[testSessionName]
		c.Value = c.Value[:len(c.Value)-4] + "AAAA"
		_, err := load(t, f, b)
		if !errors.Is(err, ErrInvalidCookie) || !errors.Is(err, securecookie.ErrMacInvalid) {
			t.Fatalf("error %v, want ErrInvalidCookie and securecookie.ErrMacInvalid", err)
		}
	})
}

// commandFilters returns the filters of the recorded commands that read or
// write documents, by command name.
func commandFilters(t *testing.T, cmds *commandLog) map[string][]bson.Raw {
	t.Helper()
	cmds.mu.Lock()
	defer cmds.mu.Unlock()
	out := make(map[string][]bson.Raw)
	for _, c := range cmds.commands {
		elems, err := c.Elements()
		if err != nil || len(elems) == 0 {
			t.Fatal(err)
		}
		name := elems[0].Key()
		switch name {
		case "find", "findAndModify":
			key := "filter"
			if name == "findAndModify" {
				key = "query"
			}
			out[name] = append(out[name], c.Lookup(key).Document())
		case "update", "delete":
			key := map[string]string{"update": "updates", "delete": "deletes"}[name]
			stmts, _ := c.Lookup(key).Array().Values()
			for _, st := range stmts {
				out[name] = append(out[name], st.Document().Lookup("q").Document())
			}
		}
	}
	return out
}

// isIDOnly reports whether filter is exactly {_id: <string>}, the one shape
// every server answers from its _id index (FerretDB v1 scans the collection
// for any other).
func isIDOnly(filter bson.Raw) bool {
	elems, err := filter.Elements()
	if err != nil || len(elems) != 1 || elems[0].Key() != fieldID {
		return false
	}
	_, ok := elems[0].Value().StringValueOK()
	return ok
}

func TestRequestsQueryByIDOnly(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, _ := saveNew(t, f, map[any]any{"k": "v"})
	f.cmds.reset()
	// load + save, load + regenerate, load + delete, and a save that finds
	// its session expired meanwhile.
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["k"] = "w"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		clock.Advance(61 * time.Second)
		s.Values["k"] = "late"
		if err := s.Save(r, w); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("Save of an expired session = %v, want ErrSessionGone", err)
		}
	})
	b2, _ := saveNew(t, f, map[any]any{"k": "v"})
	b2.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	filters := commandFilters(t, f.cmds)
	for _, name := range []string{"find", "findAndModify", "delete"} {
		if len(filters[name]) == 0 {
			t.Errorf("no %s command recorded", name)
		}
	}
	for name, fs := range filters {
		for _, filter := range fs {
			if !isIDOnly(filter) {
				t.Errorf("%s with filter %s: want exactly {_id: ...}", name, filter)
			}
		}
	}
	if len(filters["update"]) != 0 {
		t.Errorf("%d update commands, want none (saves are findAndModify)", len(filters["update"]))
	}
	if f.count(t) != 0 {
		t.Fatalf("%d documents left, want 0 (the expired one is deleted by the refused save)", f.count(t))
	}
}

// TestLifetimesAreHonoured checks the ways gorilla users set a session's
// lifetime: each gives a week, and a client back after two idle days (its
// cookie's signed timestamp two days old) still has its session.
func TestLifetimesAreHonoured(t *testing.T) {
	const week = 7 * 24 * 60 * 60
	for _, tt := range []struct {
		name  string
		store func(s *Store)
		sess  func(s *sessions.Session)
	}{
		{"store.MaxAge", func(s *Store) { s.MaxAge(week) }, nil},
		{"store.Options replaced", func(s *Store) { s.Options = &sessions.Options{Path: "/", MaxAge: week} }, nil},
		{"session.Options replaced", nil, func(s *sessions.Session) { s.Options = &sessions.Options{Path: "/", MaxAge: week} }},
		{"per-session remember me", nil, func(s *sessions.Session) { s.Options.MaxAge = week }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
			if tt.store != nil {
				tt.store(f.store)
			}
			b := newBrowser()
			var id string
			rec := b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				if tt.sess != nil {
					tt.sess(s)
				}
				s.Values["user"] = "ada"
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
				id = s.ID
			})
			if c := mwSetCookie(rec.Header(), testSessionName); c == nil || c.MaxAge != week {
				t.Fatalf("cookie %v, want Max-Age %d", rec.Header().Values("Set-Cookie"), week)
			}
			clock.Advance(48 * time.Hour)
			b.cookies[testSessionName].Value = agedCookie(testSessionName, id, testHashKey, 48*time.Hour)
			s, err := load(t, f, b)
			if err != nil || s.IsNew || s.Values["user"] != "ada" {
				t.Fatalf("after two idle days: IsNew=%v values=%v err=%v; want the session", s.IsNew, s.Values, err)
			}
			// The server still ends it: a week after the last save.
			clock.Advance(5*24*time.Hour + time.Second)
			if s, _ := load(t, f, b); !s.IsNew {
				t.Fatal("the session outlived its week")
			}
		})
	}
}

// TestExplicitLifetimeAndAbsoluteTimeout checks how an explicit MaxAge and
// the absolute timeout interact: the default absolute timeout never cuts an
// explicit lifetime short, an explicit one does.
func TestExplicitLifetimeAndAbsoluteTimeout(t *testing.T) {
	const day = 24 * time.Hour
	for _, tt := range []struct {
		name       string
		absolute   time.Duration
		maxAge     time.Duration
		wantExpiry time.Duration // from creation
		wantAbs    time.Duration // 0: none
	}{
		{"30 days, default absolute", 0, 30 * day, 30 * day, 30 * day},
		{"1 day, default absolute", 0, day, day, 7 * day},
		{"30 days, explicit 7-day absolute", 7 * day, 30 * day, 7 * day, 7 * day},
		{"30 days, no absolute", -1, 30 * day, 30 * day, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: tt.absolute})
			f.store.MaxAge(int(tt.maxAge / time.Second))
			b := newBrowser()
			rec := b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["k"] = 1
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
				times, ok := f.store.Times(s)
				if !ok || !times.ExpiresAt.Equal(clock.Now().Add(tt.wantExpiry)) {
					t.Fatalf("ExpiresAt %v, want creation + %v", times.ExpiresAt.Sub(clock.Now()), tt.wantExpiry)
				}
				if tt.wantAbs == 0 && !times.AbsoluteExpiresAt.IsZero() || tt.wantAbs != 0 && !times.AbsoluteExpiresAt.Equal(clock.Now().Add(tt.wantAbs)) {
					t.Fatalf("AbsoluteExpiresAt %v, want creation + %v", times.AbsoluteExpiresAt, tt.wantAbs)
				}
			})
			if c := mwSetCookie(rec.Header(), testSessionName); c == nil || c.MaxAge != int(tt.wantExpiry/time.Second) {
				t.Fatalf("cookie %v, want Max-Age %d", rec.Header().Values("Set-Cookie"), int(tt.wantExpiry/time.Second))
			}
		})
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

// TestCookiePrefixes checks that Save refuses options browsers would drop a
// __Host- or __Secure- cookie for, before writing anything.
func TestCookiePrefixes(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts sessions.Options
		ok   bool
	}{
		{"__Host-sid", sessions.Options{Path: "/", Secure: true}, true},
		{"__Host-sid", sessions.Options{Path: "/"}, false},
		{"__Host-sid", sessions.Options{Path: "/app", Secure: true}, false},
		{"__Host-sid", sessions.Options{Path: "/", Secure: true, Domain: "example.test"}, false},
		{"__host-sid", sessions.Options{Path: "/"}, false},
		{"__Secure-sid", sessions.Options{Path: "/app", Secure: true, Domain: "example.test"}, true},
		{"__Secure-sid", sessions.Options{Path: "/"}, false},
		{"sid", sessions.Options{Path: "/"}, true},
	} {
		t.Run(fmt.Sprintf("%s %+v", tt.name, tt.opts), func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			opts := tt.opts
			f.store.Options = &opts
			r := httptest.NewRequest(http.MethodGet, "https://example.test/", nil)
			s, _ := f.store.New(r, tt.name)
			s.Values["k"] = "v"
			rec := httptest.NewRecorder()
			err := s.Save(r, rec)
			if tt.ok {
				c := mwSetCookie(rec.Header(), tt.name)
				if err != nil || c == nil || c.Secure != opts.Secure {
					t.Fatalf("Save = %v, cookie %v", err, rec.Header().Values("Set-Cookie"))
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.name) {
				t.Fatalf("Save = %v, want ErrInvalidConfig naming the cookie", err)
			}
			if f.count(t) != 0 || len(rec.Header().Values("Set-Cookie")) != 0 {
				t.Fatal("a refused save wrote a document or a cookie")
			}
		})
	}
}
