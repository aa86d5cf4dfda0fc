// The tests compare cookieValues with r.CookiesNamed without the limit Go
// puts on the number of a request's cookies (3,000, since Go 1.25.2), which
// cookieValues does not apply: it allocates nothing per cookie.
//go:debug httpcookiemaxnum=0

package mongostore

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
)

func TestNewSessionDefaults(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone}) // no GC sweeps among the counted commands
	want := sessions.Options{Path: "/", MaxAge: 24 * 60 * 60, HttpOnly: true, SameSite: http.SameSiteLaxMode}
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

func TestUnusableCookies(t *testing.T) {
	f := newFixture(t, Config{})
	f.store.MaxAge(3600)
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	good := b.cookies[testSessionName].Value

	for _, tt := range unusableCookies(t, f.store, good) {
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
			// securecookie's own errors are visible to errors.Is too.
			if tt.name == "tampered" && !errors.Is(err, securecookie.ErrMacInvalid) {
				t.Fatalf("error %v, want securecookie.ErrMacInvalid", err)
			}
			if n := f.cmds.count.Load(); n != 0 {
				t.Fatalf("%d database commands for a cookie that fails its check, want 0", n)
			}
			if len(rec.Header()) != 0 {
				t.Fatal("Get wrote to the response")
			}
		})
	}

	// The store never checks the cookie's signed timestamp: the document
	// decides when a session ends, and may outlive any cookie age.
	t.Run("old signed timestamp", func(t *testing.T) {
		f := newFixture(t, Config{})
		f.store.MaxAge(3600)
		_, id := saveNewSession(t, f, map[any]any{"k": "v"})
		for _, age := range []time.Duration{2 * time.Minute, 400 * 24 * time.Hour} {
			b := newBrowser()
			b.cookies[testSessionName] = &http.Cookie{Name: testSessionName, Value: agedCookie(testSessionName, id, testHashKey, age)}
			if s, err := loadSession(t, f, b); err != nil || s.IsNew {
				t.Fatalf("a cookie stamped %v ago: IsNew=%v err=%v; want the session", age, s.IsNew, err)
			}
		}
	})
}

func TestNilStoreOptionsFallBackToDefaults(t *testing.T) {
	f := newFixture(t, Config{})
	f.store.Options = nil
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	if c := b.cookies[testSessionName]; c.MaxAge != 24*60*60 || !c.HttpOnly || c.Path != "/" {
		t.Fatalf("cookie %+v, want the default attributes", c)
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
				c := responseCookie(rec.Header(), tt.name)
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

// TestMiddlewareTossedCookie checks cookie tossing: a garbage cookie of the
// same name sent before the real one (a sibling subdomain can set one) must
// not hide the real session, so a logout really ends it.
func TestMiddlewareTossedCookie(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"user": "alice"})
	valid := b.cookies[testSessionName].Value
	garbage := flipCookie(signedCookie(t, f.store)) // fails its MAC
	request := func(logout bool) (*sessions.Session, *httptest.ResponseRecorder) {
		var seen *sessions.Session
		h := f.store.Middleware(testSessionName, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s, err := f.store.Get(r, testSessionName)
			if err != nil {
				t.Errorf("Get inside the middleware: %v", err)
			}
			seen = s
			if logout {
				s.Options.MaxAge = -1
			}
			w.WriteHeader(http.StatusSeeOther)
		}))
		r := httptest.NewRequest(http.MethodPost, "/logout", nil)
		r.Header.Set("Cookie", testSessionName+"="+garbage+"; "+testSessionName+"="+valid)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return seen, rec
	}
	if s, _ := request(false); s.IsNew || s.Values["user"] != "alice" {
		t.Fatalf("with a tossed cookie first: IsNew=%v values=%v; want the real session", s.IsNew, s.Values)
	}
	if _, rec := request(true); rec.Code != http.StatusSeeOther {
		t.Fatalf("logout answered %d", rec.Code)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents after the logout, want 0: the real session survived", n)
	}
}

// FuzzDecodeCookie checks that any cookie value is either a valid session ID
// or rejected, without a panic, and that a rejected cookie gives New a fresh
// session without a database query.
func FuzzDecodeCookie(f *testing.F) {
	// Two codecs: one signing and encrypting, one only signing.
	store, storeCmds := unreachableStore(f, Config{Logger: slog.New(slog.DiscardHandler)})
	pairs, err := parseKeyPairs([][]byte{testHashKey, testBlockKey, otherHashKey, nil})
	if store.cookies = newCookieCodec(pairs); err != nil || len(store.cookies.keys) != 2 {
		f.Fatalf("want two cookie codecs: %v", err)
	}
	encode := func(name string, value []byte, codecs ...securecookie.Codec) string {
		v, err := securecookie.EncodeMulti(name, value, codecs...)
		if err != nil {
			f.Fatal(err)
		}
		return v
	}
	id := freshToken()
	encrypted := encode(testSessionName, []byte(id), store.cookies.keys[0].codec)
	signed := encode(testSessionName, []byte(id), store.cookies.keys[1].codec)
	for i, v := range []string{encrypted, signed} {
		if got, current, err := store.cookies.decode(testSessionName, v); err != nil || got != id || current != (i == 0) {
			f.Fatalf("decode of a valid cookie = %q, current key %v, %v; want %q, %v", got, current, err, id, i == 0)
		}
	}
	for _, seed := range []string{
		encrypted,
		signed,
		encrypted[:len(encrypted)/2],
		signed[:len(signed)-1],
		flipCookie(encrypted),
		flipCookie(signed),
		encode(testSessionName, []byte("short"), store.cookies.keys[0].codec),                                                 // valid signature, malformed ID
		encode(testSessionName, []byte(id+"="), store.cookies.keys[1].codec),                                                  // padded ID
		encode(testSessionName, []byte(strings.Repeat("A", secretEncoding.EncodedLen(idBytes))), store.cookies.keys[1].codec), // valid form
		encode("other", []byte(id), store.cookies.keys[0].codec),                                                              // signed for another name
		encode(testSessionName, []byte{}, store.cookies.keys[1].codec),
		"",
		"|",
		"||",
		"MTcwMDAwMDAwMHx8",
		"\"quoted\"",
		"a;b=c",
		"\x00\xff\xfe",
		strings.Repeat("A", 5000),
		"ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ",
	} {
		f.Add(seed)
	}

	f.Fuzz(func(t *testing.T, value string) {
		id, _, err := store.cookies.decode(testSessionName, value)
		switch {
		case err == nil && !validToken(id):
			t.Fatalf("decode(%q) = %q, an invalid session ID, and no error", value, id)
		case err != nil && !errors.Is(err, ErrInvalidCookie):
			t.Fatalf("decode(%q) error %v does not wrap ErrInvalidCookie", value, err)
		case err != nil && id != "":
			t.Fatalf("decode(%q) = %q with error %v", value, id, err)
		}

		// What reaches the store is the cookie as net/http parses it from
		// the request, which may differ from value (or be absent).
		req, _ := http.NewRequest(http.MethodGet, "http://example.test/", nil)
		req.Header.Set("Cookie", testSessionName+"="+value)
		c, cerr := req.Cookie(testSessionName)
		if cerr == nil {
			if _, _, err := store.cookies.decode(testSessionName, c.Value); err == nil {
				return // a valid cookie: New would query the (unreachable) database
			}
		}
		storeCmds.reset()
		s, err := store.New(req, testSessionName)
		if s == nil || !s.IsNew || s.ID != "" || len(s.Values) != 0 || s.Options == nil {
			t.Fatalf("New with cookie %q = %+v, want a fresh session", value, s)
		}
		if cerr == nil && !errors.Is(err, ErrInvalidCookie) {
			t.Fatalf("New with cookie %q: error %v, want ErrInvalidCookie", value, err)
		}
		if cerr != nil && err != nil {
			t.Fatalf("New without a parsable cookie: error %v, want none", err)
		}
		if n := storeCmds.count.Load(); n != 0 {
			t.Fatalf("New with cookie %q sent %d commands, want none", value, n)
		}
	})
}

// TestSaveReusesTheClientsCookie checks that saving a loaded session sends
// back the cookie value the client sent when the current key signed it (no
// signing the same ID again), and re-signs one signed with an older key.
func TestSaveReusesTheClientsCookie(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, id := saveNewSession(t, f, map[any]any{"n": 0})
	sent := b.cookies[testSessionName].Value
	save := func(store *Store) string {
		var value string
		rec := b.do(func(w http.ResponseWriter, r *http.Request) {
			s, err := store.Get(r, testSessionName)
			if err != nil || s.IsNew {
				t.Fatalf("load: %v", err)
			}
			s.Values["n"] = s.Values["n"].(int) + 1
			if err := s.Save(r, w); err != nil {
				t.Fatal(err)
			}
		})
		if c := responseCookie(rec.Header(), testSessionName); c != nil {
			value = c.Value
		}
		return value
	}
	if got := save(f.store); got != sent {
		t.Fatalf("the save sent a new cookie value %q, want the client's %q", got, sent)
	}
	rotated, err := NewStore(context.Background(), f.coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rotated.Close() })
	got := save(rotated)
	if got == sent {
		t.Fatal("a cookie signed with the old key was sent back as it was after a key rotation")
	}
	if gotID, current, err := rotated.cookies.decode(testSessionName, got); err != nil || !current || gotID != id {
		t.Fatalf("re-signed cookie: %q, current key %v, %v", gotID, current, err)
	}
}

// TestAtMostEightCookiesOfOneName checks that the store reads at most eight
// cookies of one name, so that a request stuffed with signed cookies cannot
// make a logout send thousands of deletes.
func TestAtMostEightCookiesOfOneName(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	r := httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
	for range 10 {
		b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
		r.AddCookie(&http.Cookie{Name: testSessionName, Value: b.cookies[testSessionName].Value})
	}
	s, _ := f.store.Get(r, testSessionName)
	f.cmds.reset()
	s.Options.MaxAge = -1
	if err := s.Save(r, httptest.NewRecorder()); err != nil {
		t.Fatalf("logout: %v", err)
	}
	// One delete for the loaded session, one findAndModify (which reads what
	// it deletes, for the events) for each of the other seven.
	if n := len(f.cmds.named("delete")) + len(f.cmds.named("findAndModify")); n != 8 {
		t.Errorf("the logout sent %d deletes, want %d", n, 8)
	}
	if n := f.count(t); n != 10-8 {
		t.Errorf("%d documents after the logout, want the %d past the cap", n, 10-8)
	}
}

// TestCookieFloodCostsNoMore checks that a request stuffed with cookies of
// the session's name that do not verify (a megabyte of them) costs no more
// than one with maxCookieValues of them, with each key pair tried, and that
// a valid cookie past them is not read.
func TestCookieFloodCostsNoMore(t *testing.T) {
	pairs, err := parseKeyPairs([][]byte{bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32), testHashKey, nil})
	if err != nil {
		t.Fatal(err)
	}
	codec := newCookieCodec(pairs)
	valid := agedCookie(testSessionName, freshToken(), testHashKey, 0)
	request := func(bad int) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Cookie", strings.Repeat(testSessionName+"=fHw=;", bad)+testSessionName+"="+valid)
		return r
	}
	if tokens, err := codec.tokens(request(maxCookieValues-1), testSessionName, nil); len(tokens) != 1 || err != nil {
		t.Fatalf("the last of %d cookies, valid: %d tokens, %v; want it read", maxCookieValues, len(tokens), err)
	}
	flood, few := request(1<<20/len("sid=fHw=;")), request(maxCookieValues)
	if tokens, err := codec.tokens(flood, testSessionName, nil); len(tokens) != 0 || !errors.Is(err, ErrInvalidCookie) {
		t.Fatalf("a valid cookie after a flood: %d tokens, %v; want none read, ErrInvalidCookie", len(tokens), err)
	}
	perFlood := testing.AllocsPerRun(5, func() { _, _ = codec.tokens(flood, testSessionName, nil) })
	perFew := testing.AllocsPerRun(5, func() { _, _ = codec.tokens(few, testSessionName, nil) })
	if perFlood > 2*perFew { // not equal: under -race, sync.Pool drops some of what it is given
		t.Errorf("a flood of bad cookies costs %v allocations, %d of them %v", perFlood, maxCookieValues, perFew)
	}
}

// FuzzVerifySigned holds verifySigned, the store's own check of a cookie
// signed without a block key, to securecookie's Decode: any value, and any
// value signed as securecookie signs (date, payload, then a byte flipped at
// flip, if within it), gets the same answer from both, and the same token.
func FuzzVerifySigned(f *testing.F) {
	pairs, err := parseKeyPairs([][]byte{testHashKey})
	if err != nil {
		f.Fatal(err)
	}
	key := newCookieCodec(pairs).keys[0]
	valid := agedCookie(testSessionName, freshToken(), testHashKey, 0)
	for _, seed := range []string{valid, flipCookie(valid), valid[:len(valid)-2], "", "||", "MTcwMDAwMDAwMHx8", "a\r\nb", strings.Repeat("A", cookieMaxLength+4)} {
		f.Add(seed, "1700000000", []byte(freshToken()), uint16(0xffff))
	}
	f.Add("", "-1", []byte("x|y"), uint16(3))
	f.Add("", "+12", []byte{}, uint16(0xffff))
	f.Add("", "1e3", []byte("token"), uint16(0xffff))
	f.Fuzz(func(t *testing.T, value, date string, payload []byte, flip uint16) {
		body := date + "|" + base64.URLEncoding.EncodeToString(payload)
		m := hmac.New(sha256.New, testHashKey)
		m.Write([]byte(testSessionName + "|" + body))
		signed := []byte(base64.URLEncoding.EncodeToString(append([]byte(body+"|"), m.Sum(nil)...)))
		if int(flip) < len(signed) {
			signed[flip] ^= 1
		}
		for _, v := range []string{value, string(signed)} {
			var raw []byte
			want := key.codec.Decode(testSessionName, v, &raw) == nil
			got, ok := key.verifySigned(testSessionName, v)
			if ok != want || (ok && got != string(raw)) {
				t.Fatalf("verifySigned(%q) = %q, %v; securecookie: %q, %v", v, got, ok, raw, want)
			}
		}
	})
}

// TestVerifySignedAllocates: a valid cookie costs one allocation, its
// token (with an HMAC state at hand: a pool may drop one).
func TestVerifySignedAllocates(t *testing.T) {
	pairs, err := parseKeyPairs([][]byte{testHashKey})
	if err != nil {
		t.Fatal(err)
	}
	key, token := newCookieCodec(pairs).keys[0], freshToken()
	value := agedCookie(testSessionName, token, testHashKey, 0)
	if got, ok := key.verifySigned(testSessionName, value); !ok || got != token {
		t.Fatalf("verifySigned = %q, %v; want %q", got, ok, token)
	}
	m := key.macs.Get().(*macState)
	if n := testing.AllocsPerRun(100, func() { m.verifySigned(testSessionName, value) }); n > 1 {
		t.Errorf("verifySigned allocates %v times, want 1", n)
	}
}

// FuzzCookieValues holds cookieValues to r.CookiesNamed: the same values,
// in the same order, from any Cookie header lines (with no limit on their
// number: see the go:debug line at the top of this file).
func FuzzCookieValues(f *testing.F) {
	for _, seed := range []string{
		testSessionName + "=abc", testSessionName + `="abc"; x=1; ` + testSessionName + "=d e", " " + testSessionName + " = v ;",
		testSessionName + `=a\b; ` + testSessionName + `="`, ";;" + testSessionName + "=\x7f;" + testSessionName, "x=y",
	} {
		f.Add(seed, testSessionName+"=second")
	}
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		r := &http.Request{Header: http.Header{"Cookie": {line1, line2}}}
		var want, got []string
		for _, c := range r.CookiesNamed(testSessionName) {
			want = append(want, c.Value)
		}
		for v := range cookieValues(r, testSessionName) {
			got = append(got, v)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("cookieValues = %q; CookiesNamed: %q", got, want)
		}
	})
}
