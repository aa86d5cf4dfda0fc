package mongostore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore/internal/faultproxy"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The middleware tests that count commands use ExpiryNone: the GC goroutine
// of the other modes sweeps once when the store starts, possibly after the
// fixture has reset its command log, and would add a find of its own.

// mwHandlerText is what the test handlers write; it must never appear in an
// error response.
const mwHandlerText = "handler body: this must not leak"

// mwServer starts an HTTP server for h, closed when the test ends.
func mwServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// mwClient returns an HTTP client for srv with its own cookie jar.
func mwClient(t testing.TB, srv *httptest.Server) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	return &http.Client{Transport: c.Transport, Jar: jar, Timeout: 30 * time.Second}
}

// mwGet sends a GET to url and returns the response and its whole body.
func mwGet(t testing.TB, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

// TestMiddlewareCommands checks which commands a request sends, whether it
// sets the cookie, and what stays in the collection.
func TestMiddlewareCommands(t *testing.T) {
	type check func(t *testing.T, s *sessions.Session)
	wantExisting := func(t *testing.T, s *sessions.Session) {
		t.Helper()
		if s.IsNew || s.Values["user"] != "alice" {
			t.Errorf("session IsNew=%v values=%v, want the stored session with user alice", s.IsNew, s.Values)
		}
	}
	wantNew := func(t *testing.T, s *sessions.Session) {
		t.Helper()
		if !s.IsNew || len(s.Values) != 0 {
			t.Errorf("session IsNew=%v values=%v, want a new empty session", s.IsNew, s.Values)
		}
	}
	tests := []struct {
		name       string
		existing   bool
		handle     func(s *sessions.Session)
		check      check
		wantCmds   []string
		wantCookie bool // a session cookie with a value
		wantExpire bool // an expired session cookie
		wantDocs   int64
	}{
		{name: "new session untouched", handle: func(s *sessions.Session) {}, check: wantNew, wantDocs: 0},
		{name: "new session read only", handle: func(s *sessions.Session) { _ = s.Values["user"] }, check: wantNew, wantDocs: 0},
		{name: "new session with values", handle: func(s *sessions.Session) { s.Values["user"] = "bob" }, check: wantNew,
			wantCmds: []string{"insert"}, wantCookie: true, wantDocs: 1},
		{name: "new session logout", handle: func(s *sessions.Session) { s.Options.MaxAge = -1 }, check: wantNew, wantDocs: 0},
		{name: "existing read only", existing: true, handle: func(s *sessions.Session) { _ = s.Values["user"] }, check: wantExisting,
			wantCmds: []string{"find"}, wantDocs: 1},
		{name: "existing same value assigned", existing: true, handle: func(s *sessions.Session) { s.Values["user"] = "alice" }, check: wantExisting,
			wantCmds: []string{"find"}, wantDocs: 1},
		{name: "existing value changed", existing: true, handle: func(s *sessions.Session) { s.Values["user"] = "carol" }, check: wantExisting,
			wantCmds: []string{"find", "save"}, wantCookie: true, wantDocs: 1},
		{name: "existing value added", existing: true, handle: func(s *sessions.Session) { s.Values["theme"] = "dark" }, check: wantExisting,
			wantCmds: []string{"find", "save"}, wantCookie: true, wantDocs: 1},
		{name: "existing value removed", existing: true, handle: func(s *sessions.Session) { delete(s.Values, "user") }, check: wantExisting,
			wantCmds: []string{"find", "save"}, wantCookie: true, wantDocs: 1},
		{name: "existing options changed", existing: true, handle: func(s *sessions.Session) { s.Options.MaxAge = 3600 }, check: wantExisting,
			wantCmds: []string{"find", "save"}, wantCookie: true, wantDocs: 1},
		{name: "existing logout", existing: true, handle: func(s *sessions.Session) { s.Options.MaxAge = -1 }, check: wantExisting,
			wantCmds: []string{"find", "delete"}, wantExpire: true, wantDocs: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now})
			b := newBrowser()
			if tc.existing {
				b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
					s.Values["user"] = "alice"
				}).ServeHTTP)
				if f.count(t) != 1 {
					t.Fatal("the set-up request stored no session")
				}
				clock.Advance(time.Second)
			}
			f.cmds.reset()

			var checked check = tc.check
			rec := b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				checked(t, s)
				tc.handle(s)
				_, _ = io.WriteString(w, "ok")
			}).ServeHTTP)

			if got := commandNames(f.cmds); !slices.Equal(got, tc.wantCmds) {
				t.Errorf("commands = %q, want %q", got, tc.wantCmds)
			}
			if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
				t.Errorf("response %d %q, want 200 ok", rec.Code, rec.Body)
			}
			c := responseCookie(rec.Header(), testSessionName)
			switch {
			case tc.wantCookie && (c == nil || c.Value == "" || c.MaxAge < 0):
				t.Errorf("Set-Cookie %v, want a session cookie", rec.Header().Values("Set-Cookie"))
			case tc.wantExpire && (c == nil || c.MaxAge >= 0):
				t.Errorf("Set-Cookie %v, want an expired session cookie", rec.Header().Values("Set-Cookie"))
			case !tc.wantCookie && !tc.wantExpire && c != nil:
				t.Errorf("Set-Cookie %v, want none", rec.Header().Values("Set-Cookie"))
			}
			if n := f.count(t); n != tc.wantDocs {
				t.Errorf("%d documents, want %d", n, tc.wantDocs)
			}
		})
	}
}

// TestMiddlewareLoadError checks that a session the database cannot load
// never reaches the handler.
func TestMiddlewareLoadError(t *testing.T) {
	stores := []struct {
		name  string
		store func(t *testing.T, logs *syncBuffer) *Store
	}{
		{"unreachable server", func(t *testing.T, logs *syncBuffer) *Store {
			s, _ := unreachableStore(t, Config{Logger: testLogger(logs)})
			return s
		}},
		{"disconnected client", func(t *testing.T, logs *syncBuffer) *Store {
			client := testClient(t, nil)
			coll := testCollection(t, client)
			s, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone, Logger: testLogger(logs)}, testHashKey)
			if err != nil {
				t.Fatalf("NewStore: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := client.Disconnect(context.Background()); err != nil {
				t.Fatalf("disconnect: %v", err)
			}
			return s
		}},
	}
	for _, st := range stores {
		for _, custom := range []bool{false, true} {
			name := st.name + "/default handler"
			if custom {
				name = st.name + "/custom handler"
			}
			t.Run(name, func(t *testing.T) {
				logs := &syncBuffer{}
				store := st.store(t, logs)
				var handlerCalled atomic.Bool
				var gotErr error
				var onError func(http.ResponseWriter, *http.Request, error)
				if custom {
					onError = func(w http.ResponseWriter, r *http.Request, err error) {
						gotErr = err
						http.Error(w, "custom: try later", http.StatusServiceUnavailable)
					}
				}
				h := store.Middleware(testSessionName, onError)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					handlerCalled.Store(true)
					_, _ = io.WriteString(w, mwHandlerText)
				}))
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.AddCookie(&http.Cookie{Name: testSessionName, Value: signedCookie(t, store)})
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)

				if handlerCalled.Load() {
					t.Error("the handler ran although the session could not be loaded")
				}
				if strings.Contains(rec.Body.String(), mwHandlerText) {
					t.Errorf("body %q contains the handler's text", rec.Body)
				}
				if !strings.Contains(rec.Header().Get("Vary"), "Cookie") {
					t.Errorf("Vary %q, want Cookie", rec.Header().Values("Vary"))
				}
				if custom {
					if !errors.Is(gotErr, ErrDatabase) {
						t.Errorf("error handler got %v, want ErrDatabase", gotErr)
					}
					if rec.Code != http.StatusServiceUnavailable {
						t.Errorf("status %d, want the custom handler's 503", rec.Code)
					}
					return
				}
				if rec.Code != http.StatusInternalServerError {
					t.Errorf("status %d, want 500", rec.Code)
				}
				if !strings.Contains(logs.String(), "mongostore: session middleware") {
					t.Errorf("default handler logged nothing: %s", logs)
				}
			})
		}
	}
}

// mwSaveFailure describes a way of making the save at the end of a request
// fail.
type mwSaveFailure struct {
	name    string
	cfg     Config
	prepare bool // create a session first
	change  func(t *testing.T, f *storeFixture, s *sessions.Session)
	status  int // of the default error handler
	target  error
	message string // in the error's text ("" for any)
}

type mwUnregistered struct{ X int } // never registered with gob

func mwSaveFailures() []mwSaveFailure {
	return []mwSaveFailure{
		{
			name: "too large", cfg: Config{MaxSize: 256},
			change: func(t *testing.T, f *storeFixture, s *sessions.Session) {
				s.Values["big"] = strings.Repeat("x", 1000)
			},
			status: http.StatusInternalServerError, target: ErrEncode, message: "more than MaxSize", // was ErrTooLarge
		},
		{
			name: "too large on update", cfg: Config{MaxSize: 256}, prepare: true,
			change: func(t *testing.T, f *storeFixture, s *sessions.Session) {
				s.Values["big"] = strings.Repeat("x", 1000)
			},
			status: http.StatusInternalServerError, target: ErrEncode, message: "more than MaxSize", // was ErrTooLarge
		},
		{
			name: "unencodable",
			change: func(t *testing.T, f *storeFixture, s *sessions.Session) {
				s.Values["odd"] = mwUnregistered{1}
			},
			status: http.StatusInternalServerError, target: ErrEncode,
		},
		{
			name: "session gone", prepare: true,
			change: func(t *testing.T, f *storeFixture, s *sessions.Session) {
				if s.IsNew {
					t.Error("the prepared session was not loaded")
				}
				if _, err := f.coll.DeleteMany(context.Background(), bson.D{}); err != nil {
					t.Errorf("delete: %v", err)
				}
				s.Values["user"] = "changed after logout elsewhere"
			},
			status: http.StatusConflict, target: ErrSessionGone,
		},
	}
}

// mwTriggers are the ways the handler's response can start, each of which
// commits the session.
var mwTriggers = []struct {
	name    string
	respond func(w http.ResponseWriter) error
}{

	{"WriteHeader", func(w http.ResponseWriter) error {
		w.WriteHeader(http.StatusAccepted)
		_, err := io.WriteString(w, mwHandlerText)
		return err
	}},
	{"Write", func(w http.ResponseWriter) error {
		_, err := w.Write([]byte(mwHandlerText))
		return err
	}},
	{"WriteString", func(w http.ResponseWriter) error {
		_, err := w.(io.StringWriter).WriteString(mwHandlerText)
		return err
	}},
	{"Flush", func(w http.ResponseWriter) error {
		return http.NewResponseController(w).Flush()
	}},
	{"ReadFrom", func(w http.ResponseWriter) error {
		_, err := w.(io.ReaderFrom).ReadFrom(strings.NewReader(mwHandlerText))
		return err
	}},
	{"return", func(w http.ResponseWriter) error { return nil }},
}

// TestMiddlewareSaveError checks that a failed save replaces the handler's
// response with the error handler's, whatever way the response started.
func TestMiddlewareSaveError(t *testing.T) {
	for _, fail := range mwSaveFailures() {
		for _, trig := range mwTriggers {
			t.Run(fail.name+"/"+trig.name, func(t *testing.T) {
				f := newFixture(t, fail.cfg)
				b := newBrowser()
				if fail.prepare {
					b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
						s.Values["user"] = "alice"
					}).ServeHTTP)
				}
				docsBefore := f.count(t)
				var respondErr error
				rec := b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
					w.Header().Set("X-Handler", "leaked")
					w.Header().Set("Content-Type", "application/x-handler")
					fail.change(t, f, s)
					respondErr = trig.respond(w)
				}).ServeHTTP)

				if rec.Code != fail.status {
					t.Errorf("status %d, want %d", rec.Code, fail.status)
				}
				if strings.Contains(rec.Body.String(), mwHandlerText) {
					t.Errorf("body %q contains the handler's text", rec.Body)
				}
				if rec.Header().Get("X-Handler") != "" || strings.Contains(rec.Header().Get("Content-Type"), "x-handler") {
					t.Errorf("the handler's headers leaked: %v", rec.Header())
				}
				if c := responseCookie(rec.Header(), testSessionName); c != nil {
					t.Errorf("error response sets the session cookie: %v", c)
				}
				if trig.name != "return" && !errors.Is(respondErr, ErrResponseDiscarded) {
					t.Errorf("the handler's %s returned %v, want ErrResponseDiscarded", trig.name, respondErr)
				}
				wantDocs := docsBefore
				if fail.target == ErrSessionGone {
					wantDocs = 0
				}
				if n := f.count(t); n != wantDocs {
					t.Errorf("%d documents, want %d", n, wantDocs)
				}
			})
		}
		t.Run(fail.name+"/custom handler", func(t *testing.T) {
			f := newFixture(t, fail.cfg)
			b := newBrowser()
			if fail.prepare {
				b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
					s.Values["user"] = "alice"
				}).ServeHTTP)
			}
			var gotErr error
			var handled *sessions.Session // the handler's session
			calls := 0
			onError := func(w http.ResponseWriter, r *http.Request, err error) {
				calls++
				gotErr = err
				if s, _ := f.store.Get(r, testSessionName); s == nil || s != handled {
					t.Errorf("the error handler's request carries session %p, want the handler's %p", s, handled)
				}
				w.Header().Set("X-Error", "custom")
				w.WriteHeader(http.StatusTeapot)
				_, _ = io.WriteString(w, "custom error")
			}
			rec := b.do(sessionHandler(t, f.store, onError, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				handled = s
				fail.change(t, f, s)
				_, _ = io.WriteString(w, mwHandlerText)
				_, _ = io.WriteString(w, mwHandlerText)
			}).ServeHTTP)
			if calls != 1 {
				t.Errorf("error handler called %d times, want once", calls)
			}
			if !errors.Is(gotErr, fail.target) || (gotErr != nil && !strings.Contains(gotErr.Error(), fail.message)) {
				t.Errorf("error handler got %v, want %v saying %q", gotErr, fail.target, fail.message)
			}
			if rec.Code != http.StatusTeapot || rec.Body.String() != "custom error" || rec.Header().Get("X-Error") != "custom" {
				t.Errorf("response %d %v %q, want the custom handler's", rec.Code, rec.Header(), rec.Body)
			}
		})
	}
}

// TestMiddlewareInvalidCookie checks that an unusable cookie gives the
// handler a fresh session without a database query.
func TestMiddlewareInvalidCookie(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b := newBrowser()
	b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["user"] = "alice"
	}).ServeHTTP)
	valid := b.cookies[testSessionName].Value

	tests := unusableCookies(t, f.store, valid)
	for _, tc := range tests {
		for _, write := range []bool{false, true} {
			name := tc.name + "/read"
			if write {
				name = tc.name + "/write"
			}
			t.Run(name, func(t *testing.T) {
				before := f.count(t)
				f.cmds.reset()
				h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
					if !s.IsNew || len(s.Values) != 0 || s.ID != "" {
						t.Errorf("session IsNew=%v ID=%q values=%v, want a fresh one", s.IsNew, s.ID, s.Values)
					}
					if got, err := f.store.Get(r, testSessionName); got != s || !errors.Is(err, ErrInvalidCookie) {
						t.Errorf("store.Get = %p, %v; want the middleware's session %p and ErrInvalidCookie", got, err, s)
					}
					if write {
						s.Values["user"] = "mallory"
					}
					_, _ = io.WriteString(w, "ok")
				})
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.AddCookie(&http.Cookie{Name: testSessionName, Value: tc.value})
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
					t.Errorf("response %d %q, want 200 ok", rec.Code, rec.Body)
				}
				wantCmds := []string(nil)
				if write {
					wantCmds = []string{"insert"}
				}
				if got := commandNames(f.cmds); !slices.Equal(got, wantCmds) {
					t.Errorf("commands %q, want %q", got, wantCmds)
				}
				c := responseCookie(rec.Header(), testSessionName)
				if !write {
					if c != nil {
						t.Errorf("sets cookie %v, want none", c)
					}
					return
				}
				if c == nil || c.Value == "" || c.Value == valid {
					t.Fatalf("sets cookie %v, want a new session's", c)
				}
				if n := f.count(t); n != before+1 {
					t.Errorf("%d documents, want %d", n, before+1)
				}
			})
		}
	}
	// The original session is untouched.
	if doc, ok := cookieDocument(t, f, valid); !ok {
		t.Error("the original session is gone")
	} else if _, _, v, err := f.store.open(doc); err != nil || v["user"] != "alice" {
		t.Errorf("original session values %v, %v", v, err)
	}
}

// TestMiddlewareUnreadableSession checks that a stored session that cannot
// be decoded is treated as lost, not as an outage.
func TestMiddlewareUnreadableSession(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b := newBrowser()
	b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["user"] = "alice"
	}).ServeHTTP)
	old := b.cookies[testSessionName].Value
	if _, err := f.coll.UpdateMany(context.Background(), bson.D{}, bson.D{{Key: "$set", Value: bson.D{
		{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: []byte("not gob")}},
	}}}); err != nil {
		t.Fatal(err)
	}
	f.cmds.reset()
	rec := b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if !s.IsNew || len(s.Values) != 0 {
			t.Errorf("session IsNew=%v values=%v, want a fresh one", s.IsNew, s.Values)
		}
		s.Values["user"] = "alice again"
		_, _ = io.WriteString(w, "ok")
	}).ServeHTTP)
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Errorf("response %d %q, want 200 ok", rec.Code, rec.Body)
	}
	if got, want := commandNames(f.cmds), []string{"find", "insert"}; !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	if c := responseCookie(rec.Header(), testSessionName); c == nil || c.Value == old {
		t.Errorf("cookie %v, want a new session's", c)
	}
	if !strings.Contains(f.logs.String(), "discarding an unreadable session") {
		t.Errorf("no warning logged: %s", f.logs)
	}
}

// TestMiddlewareLogout checks that MaxAge < 0 deletes the session.
func TestMiddlewareLogout(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b := newBrowser()
	logout := false
	h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if logout {
			s.Options.MaxAge = -1
		} else {
			s.Values["user"] = "alice"
		}
		_, _ = io.WriteString(w, "ok")
	}).ServeHTTP
	b.do(h)
	old := b.cookies[testSessionName].Value
	if f.count(t) != 1 {
		t.Fatal("no session stored")
	}
	logout = true
	f.cmds.reset()
	rec := b.do(h)
	if got, want := commandNames(f.cmds), []string{"find", "delete"}; !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	c := responseCookie(rec.Header(), testSessionName)
	if c == nil || c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("Set-Cookie %v, want an expired, empty session cookie", rec.Header().Values("Set-Cookie"))
	}
	if got := rec.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	if n := f.count(t); n != 0 {
		t.Errorf("%d documents after logout, want 0", n)
	}
	// The old cookie, replayed, gives a new session.
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(&http.Cookie{Name: testSessionName, Value: old})
	logout = false
	var replayed *sessions.Session
	f.store.Middleware(testSessionName, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		replayed, _ = f.store.Get(r, testSessionName)
	})).ServeHTTP(httptest.NewRecorder(), req)
	if replayed == nil || !replayed.IsNew || len(replayed.Values) != 0 {
		t.Errorf("replayed cookie gives %+v, want a new session", replayed)
	}
	t.Run("options replaced, without a path", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
		h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			s.Options = &sessions.Options{MaxAge: -1} // gorilla's idiom: the cookie's scope is the store's
		})
		r, rec := b.request(), httptest.NewRecorder()
		r.URL.Path = "/account/logout"
		h.ServeHTTP(rec, r)
		if c := responseCookie(rec.Header(), testSessionName); c == nil || c.MaxAge >= 0 || c.Path != "/" || !c.HttpOnly {
			t.Errorf("Set-Cookie %q, want the cookie expired at Path=/, HttpOnly", rec.Header().Values("Set-Cookie"))
		}
		if f.count(t) != 0 {
			t.Error("session not deleted")
		}
	})
	t.Run("explicit logout save sets one cookie", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
		rec := b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			s.Options.MaxAge = -1
			if err := s.Save(r, w); err != nil {
				t.Error(err)
			}
		}).ServeHTTP)
		if n := len(rec.Header().Values("Set-Cookie")); n != 1 {
			t.Fatalf("%d Set-Cookie headers, want 1: %q", n, rec.Header().Values("Set-Cookie"))
		}
		if f.count(t) != 0 {
			t.Fatal("session not deleted")
		}
	})
}

// TestMiddlewareSessionAccessor checks store.Get inside handlers, with one
// and two middlewares: it returns the session each middleware loaded and
// saves. (Session(r, name), which returned nil without a middleware, is
// gone: store.Get gives a new session there, which nothing saves.)
func TestMiddlewareSessionAccessor(t *testing.T) {
	t.Run("no middleware", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		rec := httptest.NewRecorder()
		func(w http.ResponseWriter, r *http.Request) {
			s, err := f.store.Get(r, testSessionName)
			if err != nil || s == nil || !s.IsNew {
				t.Fatalf("store.Get without middleware = %v, %v; want a new session", s, err)
			}
			s.Values["n"] = 1
		}(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if c := rec.Header().Values("Set-Cookie"); len(c) != 0 {
			t.Errorf("Set-Cookie %q without middleware, want none", c)
		}
		if n := f.count(t); n != 0 {
			t.Errorf("%d documents without middleware, want 0", n)
		}
	})

	f := newFixture(t, Config{Expiry: ExpiryNone})
	var calls atomic.Int32
	h := f.store.Middleware("a", nil)(f.store.Middleware("b", nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		a, errA := f.store.Get(r, "a")
		b, errB := f.store.Get(r, "b")
		if a == nil || b == nil || a == b || errA != nil || errB != nil {
			t.Fatalf("store.Get a=%p (%v) b=%p (%v), want two sessions", a, errA, b, errB)
		}
		if a.Name() != "a" || b.Name() != "b" {
			t.Errorf("names %q %q", a.Name(), b.Name())
		}
		// A name no middleware manages: a new session, never saved.
		if c, err := f.store.Get(r, "c"); err != nil || c == nil || c == a || c == b || !c.IsNew {
			t.Errorf("store.Get(r, c) = %p, %v; want a new session of its own", c, err)
		} else {
			c.Values["n"] = 1
		}
		for name, want := range map[string]*sessions.Session{"a": a, "b": b} {
			got, err := f.store.Get(r, name)
			if err != nil || got != want {
				t.Errorf("store.Get(r, %q) again = %p, %v; want %p (the middleware's session)", name, got, err, want)
			}
		}
		n, _ := a.Values["n"].(int)
		a.Values["n"] = n + 1
		b.Values["n"] = n + 10
		_, _ = fmt.Fprintf(w, "a=%v b=%v", a.Values["n"], b.Values["n"])
	})))
	br := newBrowser()
	rec := br.do(h.ServeHTTP)
	if responseCookie(rec.Header(), "a") == nil || responseCookie(rec.Header(), "b") == nil {
		t.Fatalf("Set-Cookie %v, want cookies a and b", rec.Header().Values("Set-Cookie"))
	}
	if c := responseCookie(rec.Header(), "c"); c != nil {
		t.Errorf("Set-Cookie %v: session c, which no middleware manages, was saved", c)
	}
	if got := rec.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	f.cmds.reset()
	rec = br.do(h.ServeHTTP)
	if rec.Body.String() != "a=2 b=11" {
		t.Errorf("second request body %q, want a=2 b=11", rec.Body)
	}
	if got, want := commandNames(f.cmds), []string{"find", "find", "save", "save"}; !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	if n := f.count(t); n != 2 {
		t.Errorf("%d documents, want 2", n)
	}
	if calls.Load() != 2 {
		t.Errorf("handler ran %d times, want 2", calls.Load())
	}
}

// TestMiddlewareConcurrentClients runs many clients in parallel, each with
// its own session, through a real server.
func TestMiddlewareConcurrentClients(t *testing.T) {
	const clients, requests = 50, 5
	f := newFixture(t, Config{})
	srv := mwServer(t, sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if s.IsNew {
			s.Values["client"] = r.URL.Query().Get("client")
		}
		n, _ := s.Values["n"].(int)
		s.Values["n"] = n + 1
		_, _ = fmt.Fprintf(w, "%v %d", s.Values["client"], n+1)
	}))
	transport := &http.Transport{MaxIdleConnsPerHost: clients}
	t.Cleanup(transport.CloseIdleConnections)

	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jar, _ := cookiejar.New(nil)
			c := &http.Client{Transport: transport, Jar: jar, Timeout: 30 * time.Second}
			id := fmt.Sprintf("client-%d", i)
			for n := 1; n <= requests; n++ {
				resp, err := c.Get(srv.URL + "/?client=" + id)
				if err != nil {
					t.Errorf("%s request %d: %v", id, n, err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf("%s %d", id, n); resp.StatusCode != http.StatusOK || string(body) != want {
					t.Errorf("%s request %d: %d %q, want %q", id, n, resp.StatusCode, body, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := f.count(t); n != clients {
		t.Errorf("%d documents, want %d", n, clients)
	}
}

// TestMiddlewareSavesBeforeHeaders checks through a real server that a
// changed session is saved and its cookie sent whatever way the handler
// starts its response.
func TestMiddlewareSavesBeforeHeaders(t *testing.T) {
	tests := []struct {
		name       string
		respond    func(t *testing.T, w http.ResponseWriter)
		wantStatus int
		wantBody   string
	}{
		{"Write", func(t *testing.T, w http.ResponseWriter) { _, _ = w.Write([]byte("written")) }, http.StatusOK, "written"},
		{"WriteString", func(t *testing.T, w http.ResponseWriter) {
			if _, err := w.(io.StringWriter).WriteString("written"); err != nil {
				t.Errorf("WriteString: %v", err)
			}
		}, http.StatusOK, "written"},
		{"WriteHeader 201", func(t *testing.T, w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "created")
		}, http.StatusCreated, "created"},
		{"WriteHeader 204 only", func(t *testing.T, w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }, http.StatusNoContent, ""},
		{"ReadFrom", func(t *testing.T, w http.ResponseWriter) {
			rf, ok := w.(io.ReaderFrom)
			if !ok {
				t.Errorf("%T is not an io.ReaderFrom", w)
				return
			}
			if _, err := rf.ReadFrom(strings.NewReader("copied")); err != nil {
				t.Errorf("ReadFrom: %v", err)
			}
		}, http.StatusOK, "copied"},
		{"io.Copy", func(t *testing.T, w http.ResponseWriter) {
			_, _ = io.Copy(w, io.LimitReader(strings.NewReader("copied via io.Copy"), 100))
		}, http.StatusOK, "copied via io.Copy"},
		{"nothing written", func(t *testing.T, w http.ResponseWriter) {}, http.StatusOK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{})
			srv := mwServer(t, sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if r.URL.Path == "/check" {
					_, _ = fmt.Fprintf(w, "new=%v saved=%v", s.IsNew, s.Values["saved"])
					return
				}
				s.Values["saved"] = tc.name
				w.Header().Set("X-Handler", "yes")
				tc.respond(t, w)
			}))
			client := mwClient(t, srv)

			resp, body := mwGet(t, client, srv.URL+"/")
			if resp.StatusCode != tc.wantStatus || body != tc.wantBody {
				t.Errorf("response %d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			c := responseCookie(resp.Header, testSessionName)
			if c == nil || c.Value == "" {
				t.Fatalf("response sets no session cookie; headers %v", resp.Header)
			}
			if resp.Header.Get("X-Handler") != "yes" {
				t.Errorf("the handler's header was lost: %v", resp.Header)
			}
			if _, ok := cookieDocument(t, f, c.Value); !ok {
				t.Errorf("no document for the cookie the response set")
			}
			_, body = mwGet(t, client, srv.URL+"/check")
			if want := "new=false saved=" + tc.name; body != want {
				t.Errorf("next request sees %q, want %q", body, want)
			}
		})
	}
}

// TestMiddlewareFlushStreams checks that flushing saves the session, sends
// the cookie with the headers and lets the response stream.
func TestMiddlewareFlushStreams(t *testing.T) {
	tests := []struct {
		name  string
		flush func(w http.ResponseWriter) error
	}{
		{"ResponseController", func(w http.ResponseWriter) error { return http.NewResponseController(w).Flush() }},
		{"http.Flusher", func(w http.ResponseWriter) error {
			fl, ok := w.(http.Flusher)
			if !ok {
				return fmt.Errorf("%T is not an http.Flusher", w)
			}
			fl.Flush()
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{})
			firstRead := make(chan struct{})
			handlerDone := make(chan struct{})
			srv := mwServer(t, sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				defer close(handlerDone)
				s.Values["streaming"] = true
				// A flush before anything is written sends the headers alone.
				if err := tc.flush(w); err != nil {
					t.Errorf("first flush: %v", err)
				}
				if _, err := io.WriteString(w, "chunk 1\n"); err != nil {
					t.Errorf("write chunk 1: %v", err)
				}
				if err := tc.flush(w); err != nil {
					t.Errorf("flush: %v", err)
				}
				select {
				case <-firstRead:
				case <-time.After(20 * time.Second):
					t.Error("the client never read the first chunk: the flush did not reach it")
					return
				}
				if _, err := io.WriteString(w, "chunk 2\n"); err != nil {
					t.Errorf("write chunk 2: %v", err)
				}
			}))
			client := mwClient(t, srv)
			resp, err := client.Get(srv.URL)
			if err != nil {
				close(firstRead)
				t.Fatalf("GET: %v", err)
			}
			defer resp.Body.Close()
			c := responseCookie(resp.Header, testSessionName)
			if c == nil || c.Value == "" {
				t.Errorf("streamed response sets no session cookie; headers %v", resp.Header)
			}
			if resp.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", resp.Header.Get("Cache-Control"))
			}
			br := bufio.NewReader(resp.Body)
			line, err := br.ReadString('\n')
			close(firstRead)
			if err != nil || line != "chunk 1\n" {
				t.Fatalf("first chunk %q, %v", line, err)
			}
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != "chunk 2\n" {
				t.Errorf("rest of the stream %q, %v", rest, err)
			}
			<-handlerDone
			if c != nil {
				if _, ok := cookieDocument(t, f, c.Value); !ok {
					t.Error("no document for the streamed session")
				}
			}
		})
	}
}

// TestMiddlewareResponseController checks that the ResponseController
// methods the sessionWriter does not implement reach the server's writer
// through Unwrap.
func TestMiddlewareResponseController(t *testing.T) {
	f := newFixture(t, Config{})
	srv := mwServer(t, sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		rc := http.NewResponseController(w)
		s.Values["deadline"] = "set"
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline: %v (ErrNotSupported: %v)", err, errors.Is(err, http.ErrNotSupported))
		}
		if err := rc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetReadDeadline: %v", err)
		}
		if err := rc.Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	resp, body := mwGet(t, mwClient(t, srv), srv.URL)
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("response %d %q", resp.StatusCode, body)
	}
	if c := responseCookie(resp.Header, testSessionName); c == nil {
		t.Error("no session cookie")
	}
	if n := f.count(t); n != 1 {
		t.Errorf("%d documents, want 1", n)
	}

	// Hijack, too, reaches the connection through Unwrap.
	hijack := mwServer(t, sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		hijackAndAnswer(t, w, "hijacked")
	}))
	resp, body = mwGet(t, mwClient(t, hijack), hijack.URL)
	if resp.StatusCode != http.StatusOK || body != "hijacked" {
		t.Errorf("hijacked response %d %q", resp.StatusCode, body)
	}
}

// TestMiddlewareErrorResponseKeepsHeaders checks that a failed save drops
// only what the handler added to the response headers: the middleware's own
// "Vary: Cookie" ("every response gets Vary: Cookie") and headers that outer
// middleware set before calling this one (HSTS, CORS, request IDs) stay.
func TestMiddlewareErrorResponseKeepsHeaders(t *testing.T) {
	f := newFixture(t, Config{MaxSize: 256})
	inner := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		w.Header().Set("X-Handler", "leaked")
		s.Values["big"] = strings.Repeat("x", 1000)
		_, _ = io.WriteString(w, mwHandlerText)
	})
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", "max-age=63072000")
		w.Header().Set("X-Request-Id", "req-1")
		w.Header().Set("X-Frame-Options", "DENY") // more fields than the writer has room for
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		inner.ServeHTTP(w, r)
	})
	rec := httptest.NewRecorder()
	outer.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))

	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", rec.Code)
	}
	if rec.Header().Get("X-Handler") != "" {
		t.Errorf("the handler's header leaked: %v", rec.Header())
	}
	if !strings.Contains(strings.Join(rec.Header().Values("Vary"), ","), "Cookie") {
		t.Errorf("error response has Vary %q, want Cookie (headers %v)", rec.Header().Values("Vary"), rec.Header())
	}
	for _, h := range []string{"Strict-Transport-Security", "X-Request-Id", "X-Frame-Options", "Content-Security-Policy"} {
		if rec.Header().Get(h) == "" {
			t.Errorf("error response lost the outer middleware's %s header (headers %v)", h, rec.Header())
		}
	}
}

// TestMiddlewareFailedSaveKeepsSavedCookies: when the middleware's save
// fails, its error response still carries the cookies of the saves that
// went through before it (the handler's RegenerateID at login, or an inner
// middleware's session of another name): their documents stay as saved,
// and without the cookie the browser could never load them again.
func TestMiddlewareFailedSaveKeepsSavedCookies(t *testing.T) {
	const other = "other"
	f := newFixture(t, Config{Expiry: ExpiryNone})
	mw := f.store.Middleware(testSessionName, nil)
	for _, tc := range []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
	}{
		{"RegenerateID", func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			if err := f.store.RegenerateID(r, w, s); err != nil {
				t.Errorf("RegenerateID: %v", err)
			}
			s.Values["odd"] = mwUnregistered{1} // the middleware's save fails
		}},
		{"an inner middleware", func(w http.ResponseWriter, r *http.Request) {
			f.store.Middleware(other, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, other)
				s.Values["n"] = 1 // saved by the inner middleware as the handler returns
			})).ServeHTTP(w, r)
			s, _ := f.store.Get(r, testSessionName)
			s.Values["odd"] = mwUnregistered{1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
			rec := b.do(mw(http.HandlerFunc(tc.handler)).ServeHTTP)
			if rec.Code != http.StatusInternalServerError {
				t.Fatalf("status %d, want 500", rec.Code)
			}
			if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q on an error response that sets a cookie, want no-store", cc)
			}
			for _, name := range []string{testSessionName, other} {
				s, err := f.store.New(b.request(), name)
				if err != nil || s.IsNew != (name == other && tc.name == "RegenerateID") {
					t.Errorf("%s after the failed save: new %v, values %v, %v (Set-Cookie %q)", name, s.IsNew, s.Values, err, rec.Header()["Set-Cookie"])
				}
			}
		})
	}
}

// TestMiddlewareNested: a middleware of the session's name inside another
// (one for the whole site, one for a route) leaves the session to the
// outer one, which writes it once, even if another request saved it after
// the inner one returned (a second write would have found this request's
// changes unknown: ErrConflict); an exclusive one inside a plain one takes the
// session's lock, which the outer one releases after its save.
func TestMiddlewareNested(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	other := strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["other"] = "tab 2"
	})
	plain := f.store.Middleware(testSessionName, nil)
	for _, tc := range []struct {
		name      string
		inner     func(http.Handler) http.Handler
		exclusive bool
		writes    int // of the session's document, the lock's release included
	}{
		{"plain", plain, false, 1},
		{"exclusive", f.store.Middleware(testSessionName, nil, Exclusive()), true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
			var locked, alone bool
			route := tc.inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["n"] = s.Values["n"].(int) + 1
				locked = lockedDocument(t, f, b)
			}))
			h := plain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if route.ServeHTTP(w, r); !alone {
					other.ServeHTTP(httptest.NewRecorder(), b.request()) // another tab's request saves meanwhile
				}
			}))
			b.do(strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) { s.Values["n"] = 0 }).ServeHTTP)
			alone = true
			f.cmds.reset()
			rec := b.do(h.ServeHTTP)
			if saves := slices.DeleteFunc(commandNames(f.cmds), func(c string) bool { return c != "save" }); len(saves) != tc.writes {
				t.Errorf("%d writes of the session, want %d (%v)", len(saves), tc.writes, commandNames(f.cmds))
			}
			if vary := rec.Header().Values("Vary"); !slices.Equal(vary, []string{"Cookie"}) {
				t.Errorf("Vary %q, want Cookie once", vary)
			}
			alone = false
			if rec := b.do(h.ServeHTTP); rec.Code != http.StatusOK {
				t.Errorf("with another tab's save: status %d %s, want 200", rec.Code, rec.Body)
			}
			if s, err := loadSession(t, f, b); err != nil || s.Values["n"] != 2 || s.Values["other"] != "tab 2" {
				t.Errorf("stored %v (%v), want both changes", s.Values, err)
			}
			if locked != tc.exclusive || lockedDocument(t, f, b) {
				t.Errorf("locked during the handler %v, want %v; after it %v, want false", locked, tc.exclusive, lockedDocument(t, f, b))
			}
		})
	}
}

// TestMiddlewareNestedExclusiveHoldsTheLockThroughTheSave: an exclusive
// middleware inside a plain one holds the lock until the outer one has
// saved, even when something ahead of both (a logging middleware) got the
// session first, so that the outer middleware did not load it; what the
// request changed before the lock stays.
func TestMiddlewareNestedExclusiveHoldsTheLockThroughTheSave(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"n": 0})
	route := f.store.Middleware(testSessionName, nil, Exclusive())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["n"] = s.Values["n"].(int) + 1
	}))
	var lockedBeforeTheSave bool
	site := f.store.Middleware(testSessionName, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["csrf"] = "token" // the site-wide middleware's change, kept over the lock's reload
		route.ServeHTTP(w, r)
		lockedBeforeTheSave = lockedDocument(t, f, b)
	}))
	b.do(func(w http.ResponseWriter, r *http.Request) {
		_, _ = f.store.Get(r, testSessionName) // a logging middleware reads the user
		site.ServeHTTP(w, r)
	})
	if s, err := loadSession(t, f, b); !lockedBeforeTheSave || lockedDocument(t, f, b) || err != nil || s.Values["n"] != 1 || s.Values["csrf"] != "token" {
		t.Errorf("locked until the save %v, after it %v; stored %v (%v)", lockedBeforeTheSave, lockedDocument(t, f, b), s.Values, err)
	}
}

// TestMiddlewareKeepsNoCookieAfterTheResponse: the cookies of saves after
// the response started are not kept (no failed save can replace that
// response): a streaming handler that saves at each event holds no more.
func TestMiddlewareKeepsNoCookieAfterTheResponse(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"n": 0})
	b.do(strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		_, _ = io.WriteString(w, "event\n")
		for i := range 5 {
			s.Values["n"] = i + 1
			if err := s.Save(r, w); err != nil {
				t.Fatal(err)
			}
		}
		if kept := w.(*sessionWriter).kept; len(kept) != 0 {
			t.Errorf("%d cookies kept after the response started, want none", len(kept))
		}
	}).ServeHTTP)
}

// TestMiddlewareCacheHeaders checks Vary and Cache-Control.
func TestMiddlewareCacheHeaders(t *testing.T) {
	tests := []struct {
		name         string
		existing     bool
		cacheControl string // set by the handler
		vary         string // set by the handler
		change       bool
		wantCookie   bool
		want         string // Cache-Control of the response
	}{
		{name: "new session unchanged", want: ""},
		{name: "new session unchanged, public", cacheControl: "public, max-age=60", want: "public, max-age=60"},
		{name: "new session saved", change: true, wantCookie: true, want: "no-store"},
		{name: "saved, handler private", change: true, cacheControl: "private, max-age=60", wantCookie: true, want: "private, max-age=60"},
		{name: "saved, handler no-store", change: true, cacheControl: "no-store, no-cache", wantCookie: true, want: "no-store, no-cache"},
		{name: "saved, handler public", change: true, cacheControl: "public, max-age=60", wantCookie: true, want: "no-store"},
		{name: "saved, handler Public upper case", change: true, cacheControl: "Public, Max-Age=60", wantCookie: true, want: "no-store"},
		{name: "existing read only", existing: true, want: ""},
		{name: "existing read only, public", existing: true, cacheControl: "public, max-age=60", want: "public, max-age=60"},
		{name: "existing changed, public", existing: true, change: true, cacheControl: "public, max-age=60", wantCookie: true, want: "no-store"},
		{name: "handler replaced Vary", existing: true, vary: "Accept-Encoding", want: ""},
		{name: "handler replaced Vary, saved", change: true, vary: "Accept-Encoding", wantCookie: true, want: "no-store"},
		{name: "handler's Vary names cookie", existing: true, vary: "accept-encoding, cookie", want: ""},
		{name: "handler's Vary is *", existing: true, vary: "*", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b := newBrowser()
			if tc.existing {
				b, _ = saveNewSession(t, f, map[any]any{"user": "alice"})
			}
			rec := b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if tc.cacheControl != "" {
					w.Header().Set("Cache-Control", tc.cacheControl)
				}
				if tc.vary != "" {
					w.Header().Set("Vary", tc.vary)
				}
				if tc.change {
					s.Values["n"] = 1
				}
				_, _ = io.WriteString(w, "ok")
			}).ServeHTTP)
			want := []string{"Cookie"}
			switch {
			case strings.Contains(strings.ToLower(tc.vary), "cookie") || tc.vary == "*":
				want = []string{tc.vary}
			case tc.vary != "":
				want = []string{tc.vary, "Cookie"}
			}
			if got := rec.Header().Values("Vary"); !slices.Equal(got, want) {
				t.Errorf("Vary %q, want %q", got, want)
			}
			if got := rec.Header().Get("Cache-Control"); got != tc.want {
				t.Errorf("Cache-Control %q, want %q", got, tc.want)
			}
			if c := responseCookie(rec.Header(), testSessionName); (c != nil) != tc.wantCookie {
				t.Errorf("Set-Cookie %v, want cookie: %v", rec.Header().Values("Set-Cookie"), tc.wantCookie)
			}
		})
	}
}

// TestMiddlewareTouchInterval checks that unchanged sessions are written
// once per touch interval to slide their expiry.
func TestMiddlewareTouchInterval(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		quiet    time.Duration // since the last write: no write yet
		touch    time.Duration // since the last write: written; 0 for never
	}{
		{name: "default", interval: 0, quiet: 59 * time.Second, touch: time.Minute},
		{name: "one minute", interval: time.Minute, quiet: 30 * time.Second, touch: 61 * time.Second},
		{name: "ten seconds", interval: 10 * time.Second, quiet: 9 * time.Second, touch: 10 * time.Second},
		{name: "negative", interval: -1, quiet: 23 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now, TouchInterval: tc.interval})
			b := newBrowser()
			// The store's default MaxAge (one day) is the idle timeout.
			idle := time.Duration(f.store.Options.MaxAge) * time.Second
			change := ""
			h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if change != "" {
					s.Values["user"] = change
				}
				_, _ = io.WriteString(w, "ok")
			}).ServeHTTP
			request := func(wantCmds []string, wantCookie bool) {
				t.Helper()
				f.cmds.reset()
				rec := b.do(h)
				if got := commandNames(f.cmds); !slices.Equal(got, wantCmds) {
					t.Errorf("at %v: commands %q, want %q", clock.Now(), got, wantCmds)
				}
				if c := responseCookie(rec.Header(), testSessionName); (c != nil) != wantCookie {
					t.Errorf("at %v: Set-Cookie %v, want cookie: %v", clock.Now(), rec.Header().Values("Set-Cookie"), wantCookie)
				}
			}
			change = "alice"
			request([]string{"insert"}, true)
			change = ""
			doc, _ := browserDocument(t, f, b)
			expires0 := documentDate(t, doc, fieldExpiresAt)
			if want := clock.Now().Add(idle); !expires0.Equal(want) {
				t.Fatalf("expiresAt %v, want %v", expires0, want)
			}

			clock.Advance(tc.quiet)
			request([]string{"find"}, false)
			doc, _ = browserDocument(t, f, b)
			if got := documentDate(t, doc, fieldExpiresAt); !got.Equal(expires0) {
				t.Errorf("expiresAt moved to %v by a read within the interval", got)
			}

			if tc.touch == 0 {
				// Never touched, however old the write...
				clock.Advance(time.Hour - time.Second)
				request([]string{"find"}, false)
				doc, _ = browserDocument(t, f, b)
				if got := documentDate(t, doc, fieldExpiresAt); !got.Equal(expires0) {
					t.Errorf("expiresAt moved to %v with a negative touch interval", got)
				}
				// ...but changes are still written.
				change = "bob"
				request([]string{"find", "save"}, true)
				doc, _ = browserDocument(t, f, b)
				if got, want := documentDate(t, doc, fieldExpiresAt), clock.Now().Add(idle); !got.Equal(want) {
					t.Errorf("expiresAt %v after a change, want %v", got, want)
				}
				return
			}

			clock.Advance(tc.touch - tc.quiet)
			request([]string{"find", "save"}, true)
			doc, _ = browserDocument(t, f, b)
			if got, want := documentDate(t, doc, fieldExpiresAt), expires0.Add(tc.touch); !got.Equal(want) {
				t.Errorf("expiresAt after touch %v, want %v", got, want)
			}
			if got := documentDate(t, doc, fieldUpdatedAt); !got.Equal(clock.Now()) {
				t.Errorf("updatedAt after touch %v, want %v", got, clock.Now())
			}
			// The touch counts as a write: the next read is quiet again.
			request([]string{"find"}, false)
		})
	}
	t.Run("touch of a session ended elsewhere", func(t *testing.T) {
		clock := newFakeClock()
		f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, TouchInterval: time.Minute})
		b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
		h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			if _, err := f.coll.DeleteMany(r.Context(), bson.D{}); err != nil { // a logout in another tab
				t.Error(err)
			}
			fmt.Fprint(w, "page")
		})
		clock.Advance(2 * time.Minute) // the touch is due
		rec := b.do(h.ServeHTTP)
		if rec.Code != http.StatusOK || rec.Body.String() != "page" {
			t.Fatalf("read-only request answered %d %q, want its own 200 page", rec.Code, rec.Body.String())
		}
		if f.count(t) != 0 {
			t.Fatal("the touch resurrected the session")
		}
	})
}

// TestMiddlewareUnchangedMapNotWritten checks that a session whose
// encoding varies is not taken for a changed one: the default codec encodes
// values with non-string keys whole with gob, which writes maps in random
// order.
func TestMiddlewareUnchangedMapNotWritten(t *testing.T) {
	values := func(s *sessions.Session) {
		for i := range 24 {
			switch i % 3 {
			case 0:
				s.Values[fmt.Sprintf("key%02d", i)] = fmt.Sprintf("value %d", i)
			case 1:
				s.Values[i] = i * i
			default:
				s.Values[fmt.Sprintf("list%02d", i)] = []string{"a", fmt.Sprint(i)}
			}
		}
	}
	// The encoding really does vary, or the test proves nothing.
	probe := sessions.NewSession(nil, "probe")
	values(probe)
	encodings := map[string]bool{}
	for range 20 {
		data, err := compactCodec{}.Encode(probe.Values)
		if err != nil {
			t.Fatal(err)
		}
		encodings[string(data)] = true
	}
	if len(encodings) < 2 {
		t.Fatalf("20 encodings of a %d-key map are all equal; the test needs varying encodings", len(probe.Values))
	}

	clock := newFakeClock()
	f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now})
	b := newBrowser()
	create := true
	h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if create {
			values(s)
			return
		}
		// Reassigning equal values changes nothing either.
		values(s)
	}).ServeHTTP
	b.do(h)
	create = false
	for i := range 20 {
		f.cmds.reset()
		rec := b.do(h)
		if got := commandNames(f.cmds); !slices.Equal(got, []string{"find"}) {
			t.Fatalf("request %d: commands %q, want only find", i, got)
		}
		if c := responseCookie(rec.Header(), testSessionName); c != nil {
			t.Fatalf("request %d sets the cookie", i)
		}
	}
}

// TestMiddlewareEarlyHints checks that informational responses pass
// through before the session is saved with the final response.
func TestMiddlewareEarlyHints(t *testing.T) {
	f := newFixture(t, Config{})
	srv := mwServer(t, sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		s.Values["hinted"] = true
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "final")
	}))
	var mu sync.Mutex
	var hints []int
	var hintCookie, hintLink string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		mu.Lock()
		defer mu.Unlock()
		hints = append(hints, code)
		hintCookie, hintLink = h.Get("Set-Cookie"), h.Get("Link")
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := mwClient(t, srv).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(hints, []int{http.StatusEarlyHints}) {
		t.Errorf("informational responses %v, want [103]", hints)
	}
	if hintLink == "" || hintCookie != "" {
		t.Errorf("103 has Link %q and Set-Cookie %q, want a Link and no cookie", hintLink, hintCookie)
	}
	if resp.StatusCode != http.StatusOK || string(body) != "final" {
		t.Errorf("final response %d %q", resp.StatusCode, body)
	}
	c := responseCookie(resp.Header, testSessionName)
	if c == nil {
		t.Fatalf("final response sets no session cookie: %v", resp.Header)
	}
	if _, ok := cookieDocument(t, f, c.Value); !ok {
		t.Error("no document for the session")
	}
}

// TestMiddlewareCacheHeadersExplicitSave checks that a response is made
// uncacheable when the handler itself sets the session cookie, with
// session.Save (the usual gorilla idiom) or Store.RegenerateID (at login):
// "one that sets the cookie is kept out of shared caches".
func TestMiddlewareCacheHeadersExplicitSave(t *testing.T) {
	tests := []struct {
		name     string
		existing bool
		save     func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error
		wantCmds []string
		logout   bool // the save expires the cookie
	}{
		{"new session, session.Save", false, func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
			return s.Save(r, w)
		}, []string{"insert"}, false},
		{"existing session, sessions.Save", true, func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
			return sessions.Save(r, w)
		}, []string{"find", "save"}, false},
		{"existing session, RegenerateID", true, func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
			return f.store.RegenerateID(r, w, s)
		}, []string{"find", "save"}, false}, // one update of the one document: a new secret
		{"existing session, logout with session.Save", true, func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
			s.Options.MaxAge = -1
			return s.Save(r, w)
		}, []string{"find", "delete"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b := newBrowser()
			if tc.existing {
				b, _ = saveNewSession(t, f, map[any]any{"user": "alice"})
			}
			f.cmds.reset()
			rec := b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				w.Header().Set("Cache-Control", "public, max-age=60")
				s.Values["user"] = "bob"
				if err := tc.save(f, w, r, s); err != nil {
					t.Errorf("save: %v", err)
				}
				_, _ = io.WriteString(w, "ok")
			}).ServeHTTP)
			if got := commandNames(f.cmds); !slices.Equal(got, tc.wantCmds) {
				t.Errorf("commands %q, want %q (saved once, by the handler)", got, tc.wantCmds)
			}
			if c := responseCookie(rec.Header(), testSessionName); c == nil || (c.Value == "") != tc.logout || (c.MaxAge < 0) != tc.logout {
				t.Fatalf("Set-Cookie %v, want the session cookie (expired: %v)", rec.Header().Values("Set-Cookie"), tc.logout)
			}
			if got := rec.Header().Get("Cache-Control"); got != "no-store" {
				t.Errorf("response sets the session cookie with Cache-Control %q, want no-store", got)
			}
		})
	}
}

// TestMiddlewareChangeAfterResponseStarted checks that a stored session
// changed after the handler wrote its response is still saved, and that a
// new one is reported instead.
func TestMiddlewareChangeAfterResponseStarted(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, TouchInterval: -1})
	mw := f.store.Middleware(testSessionName, nil)
	late := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "body first")
		s, _ := f.store.Get(r, testSessionName)
		s.Values["late"] = r.URL.Query().Get("v")
	}))
	b, id := saveNewSession(t, f, map[any]any{"user": "ada"})
	rec := b.do(func(w http.ResponseWriter, r *http.Request) {
		r.URL.RawQuery = "v=one"
		late.ServeHTTP(w, r)
	})
	if rec.Body.String() != "body first\n" {
		t.Fatalf("body %q", rec.Body.String())
	}
	s, err := loadSession(t, f, b)
	if err != nil || s.ID != id || s.Values["late"] != "one" {
		t.Fatalf("late change not stored: %v, %v", s.Values, err)
	}

	fresh := newBrowser()
	fresh.do(late.ServeHTTP)
	if f.count(t) != 1 || len(fresh.cookies) != 0 {
		t.Fatalf("a new session changed after the response: %d documents, %d cookies", f.count(t), len(fresh.cookies))
	}
	if !strings.Contains(f.logs.String(), "session changed after the response started") {
		t.Fatalf("no warning logged:\n%s", f.logs)
	}
}

// TestMiddlewareChangeCheckAfterTheHandlersSave: with a codec that encodes
// equal values differently, the change check decodes the stored values;
// once the handler has saved the session itself after the response
// started, the check compares with what that save stored, and the
// handler's later change is saved.
func TestMiddlewareChangeCheckAfterTheHandlersSave(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, Codec: shiftyCodec{compactCodec{&keyCache{}}, new(atomic.Int64)}})
	b, _ := saveNewSession(t, f, map[any]any{"step": "one"})
	strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		io.WriteString(w, "hello") // the response starts: unchanged, the stored values decoded
		s.Values["step"] = "two"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
		s.Values["step"] = "one" // for the middleware to save when the handler returns
	}).ServeHTTP(httptest.NewRecorder(), b.request())
	if s, err := loadSession(t, f, b); err != nil || s.Values["step"] != "one" {
		t.Errorf("stored step %v (%v), want one: the handler's last change was not saved", s.Values["step"], err)
	}
}

// TestMiddlewareSessionEndedAfterTheResponse: a change after the response
// of a session that a logout elsewhere ended meanwhile is dropped, and
// logged at Info, as the middleware's answer to ErrSessionGone is: the
// logout won, as it always does, and nothing failed.
func TestMiddlewareSessionEndedAfterTheResponse(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		io.WriteString(w, "hello")
		if _, err := f.coll.DeleteMany(context.Background(), bson.D{}); err != nil { // a logout elsewhere
			t.Fatal(err)
		}
		s.Values["late"] = true
	}).ServeHTTP(httptest.NewRecorder(), b.request())
	logs := f.logs.String()
	if !strings.Contains(logs, `"level":"INFO","msg":"mongostore: session ended during the request`) || strings.Contains(logs, `"level":"ERROR"`) || f.count(t) != 0 {
		t.Errorf("%d documents; logs:\n%s", f.count(t), logs)
	}
}

// TestMiddlewareHijacker checks that handlers asserting http.Hijacker work.
func TestMiddlewareHijacker(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	srv := httptest.NewServer(f.store.Middleware(testSessionName, nil)(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("the middleware's writer is not an http.Hijacker")
				return
			}
			conn, buf, err := hj.Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
			buf.Flush()
		})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hi" {
		t.Fatalf("body %q, want hi", body)
	}
	t.Run("hijacked new session leaves no document", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		srv := mwServer(t, sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			s.Values["ws"] = true
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
			buf.Flush()
		}))
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close() // waits for the handler
		if n := f.count(t); n != 0 {
			t.Fatalf("%d documents for a session whose cookie could never be sent", n)
		}
	})
	t.Run("a failed hijack leaves the response its save", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		rec := newBrowser().do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			s.Values["ws"] = false
			if _, _, err := w.(http.Hijacker).Hijack(); err == nil { // a ResponseRecorder cannot be hijacked
				t.Fatal("hijacked a ResponseRecorder")
			}
			_, _ = io.WriteString(w, "fallback") // as over HTTP/2, which cannot hijack
		}).ServeHTTP)
		if responseCookie(rec.Header(), testSessionName) == nil || f.count(t) != 1 {
			t.Fatalf("Set-Cookie %q and %d documents, want the session saved with its cookie", rec.Header().Values("Set-Cookie"), f.count(t))
		}
	})
	t.Run("no hijack after a failed save", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		srv := mwServer(t, sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			s.Values["odd"] = mwUnregistered{1}
			http.NewResponseController(w).Flush() // the save fails: onError answers
			if conn, _, err := w.(http.Hijacker).Hijack(); !errors.Is(err, ErrResponseDiscarded) {
				t.Errorf("Hijack after a failed save: %v, want ErrResponseDiscarded", err)
				if conn != nil {
					conn.Close()
				}
			}
		}))
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Errorf("status %d, want onError's 500", resp.StatusCode)
		}
	})
}

// pushRecorder is a ResponseRecorder that can push, as HTTP/2's writer.
type pushRecorder struct {
	*httptest.ResponseRecorder
	pushed []string
}

func (p *pushRecorder) Push(target string, _ *http.PushOptions) error {
	p.pushed = append(p.pushed, target)
	return nil
}

// unwrapOnly is a writer that wraps another without its Push.
type unwrapOnly struct{ http.ResponseWriter }

func (u unwrapOnly) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// underlying returns the writer u wraps, or w.
func underlying(w http.ResponseWriter) http.ResponseWriter {
	if u, ok := w.(unwrapOnly); ok {
		return u.ResponseWriter
	}
	return w
}

// TestMiddlewarePusher: a handler pushes through the middleware's writer
// where the server's writer can push, even through another writer,
// without starting the response, and gets http.ErrNotSupported where it
// cannot.
func TestMiddlewarePusher(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	for _, tc := range []struct {
		w    http.ResponseWriter
		want error
	}{
		{&pushRecorder{ResponseRecorder: httptest.NewRecorder()}, nil},
		{unwrapOnly{&pushRecorder{ResponseRecorder: httptest.NewRecorder()}}, nil}, // another middleware's writer, without Push
		{httptest.NewRecorder(), http.ErrNotSupported},
	} {
		sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			p, ok := w.(http.Pusher)
			if !ok {
				t.Fatal("the middleware's writer is no http.Pusher")
			}
			if err := p.Push("/style.css", nil); !errors.Is(err, tc.want) || responseStarted(w) {
				t.Errorf("Push: %v, want %v; response started %v", err, tc.want, responseStarted(w))
			}
		}).ServeHTTP(tc.w, httptest.NewRequest(http.MethodGet, "/", nil))
		if pr, ok := underlying(tc.w).(*pushRecorder); ok && !slices.Equal(pr.pushed, []string{"/style.css"}) {
			t.Errorf("pushed %v", pr.pushed)
		}
	}
}

// TestMiddlewareAfterAFailedRegeneration checks that a RegenerateID that
// found the session ended leaves the handler's answer standing: the
// middleware does not try again, and onError does not replace it.
func TestMiddlewareAfterAFailedRegeneration(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, TouchInterval: -1})
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	rec := b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if _, err := f.coll.DeleteMany(r.Context(), bson.D{}); err != nil { // a logout elsewhere
			t.Fatal(err)
		}
		if err := f.store.RegenerateID(r, w, s); !errors.Is(err, ErrSessionGone) {
			t.Errorf("RegenerateID of an ended session: %v, want ErrSessionGone", err)
		}
		http.Redirect(w, r, "/login", http.StatusSeeOther)
	}).ServeHTTP)
	if rec.Code != http.StatusSeeOther || f.count(t) != 0 {
		t.Errorf("status %d and %d documents, want the handler's 303, and the session left ended", rec.Code, f.count(t))
	}
}

// TestSaveKeepsACookieOfAnotherPath checks that a save replaces only a
// Set-Cookie of its cookie's name, path and domain: the handler's expiry
// of a legacy cookie of the name at another path stays.
func TestSaveKeepsACookieOfAnotherPath(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	rec := newBrowser().do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		http.SetCookie(w, &http.Cookie{Name: testSessionName, Path: "/old", MaxAge: -1})
		s.Values["user"] = "ada"
		_, _ = io.WriteString(w, "ok")
	}).ServeHTTP)
	if set := rec.Header().Values("Set-Cookie"); len(set) != 2 || !strings.Contains(set[0], "Path=/old") {
		t.Errorf("Set-Cookie %q, want the handler's expiry at /old, then the session's cookie", set)
	}
}

// TestMiddlewareRegenerates checks that the middleware regenerates a
// session whose ID the handler cleared, and that a change after
// RegenerateID sends one cookie: the session's new one.
func TestMiddlewareRegenerates(t *testing.T) {
	for name, handle := range map[string]func(*Store, http.ResponseWriter, *http.Request, *sessions.Session) error{
		"ID cleared": func(_ *Store, _ http.ResponseWriter, _ *http.Request, s *sessions.Session) error {
			s.ID = ""
			return nil
		},
		"RegenerateID, then a change": func(store *Store, w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
			err := store.RegenerateID(r, w, s)
			s.Values["role"] = "admin"
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone, TouchInterval: -1})
			b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
			old := b.cookies[testSessionName].Value
			rec := b.do(sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if err := handle(f.store, w, r, s); err != nil {
					t.Error(err)
				}
				http.Redirect(w, r, "/", http.StatusSeeOther)
			}).ServeHTTP)
			if set := rec.Header().Values("Set-Cookie"); len(set) != 1 || b.cookies[testSessionName].Value == old {
				t.Fatalf("Set-Cookie %q, want the session's new cookie, once", set)
			}
			if s, _ := loadSession(t, f, b); s.IsNew || s.Values["user"] != "ada" {
				t.Errorf("the new cookie loads %v, want the session", s.Values)
			}
			stale := newBrowser()
			stale.cookies[testSessionName] = &http.Cookie{Name: testSessionName, Value: old}
			if s, _ := loadSession(t, f, stale); !s.IsNew {
				t.Error("the old cookie still loads the session")
			}
		})
	}
}

// mwServeRecovered serves r with h and returns what h panicked with (nil
// if it returned), recovering the panic as net/http's server does.
func mwServeRecovered(h http.Handler, w http.ResponseWriter, r *http.Request) (v any) {
	defer func() { v = recover() }()
	h.ServeHTTP(w, r)
	return nil
}

// TestMiddlewarePanicLeavesNothing checks that requests whose handler
// panics, as httputil.ReverseProxy does with http.ErrAbortHandler when the
// client drops, leave nothing behind in the store: no session state, no
// memory.
// Before: the middleware registered each request's writer in the store's
// pending table and removed it only after the handler returned, so every
// panic left the writer there for good, holding the request, the response
// and the session (whose state it kept alive too).
func TestMiddlewarePanicLeavesNothing(t *testing.T) {
	const requests = 3000
	const scratch = 4 << 10 // bytes each request adds to its session: 12 MiB if the sessions leak
	tests := []struct {
		name       string
		value      any  // what the handler panics with
		writeFirst bool // the handler starts its response (which saves the change) before it panics
	}{
		{name: "panic", value: "handler bug"},
		{name: "ErrAbortHandler", value: http.ErrAbortHandler},
		{name: "ErrAbortHandler after the response started", value: http.ErrAbortHandler, writeFirst: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
			cookie := b.cookies[testSessionName].Value
			var loaded, saved atomic.Int64
			h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if !s.IsNew && s.Values["user"] == "ada" {
					loaded.Add(1)
				}
				s.Values["scratch"] = strings.Repeat("x", scratch) // a change, in memory of its own
				if tc.writeFirst {
					if _, err := io.WriteString(w, "partial"); err == nil {
						saved.Add(1)
					}
				}
				panic(tc.value)
			})
			serve := func() {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.AddCookie(&http.Cookie{Name: testSessionName, Value: cookie})
				if v := mwServeRecovered(h, httptest.NewRecorder(), r); v != tc.value {
					t.Fatalf("the handler chain panicked with %v, want %v", v, tc.value)
				}
			}
			// settle collects garbage and returns the size of the store's
			// session table and of the heap.
			settle := func() (int, uint64) {
				f.cmds.reset() // the fixture's log of commands is no part of the store
				runtime.GC()
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				return f.store.states.len(), ms.HeapAlloc
			}
			for range 50 { // warm up: connections, buffers
				serve()
			}
			baseTable, baseHeap := settle()
			for range requests {
				serve()
			}
			table, heap := settle()
			t.Logf("session table %d -> %d entries, heap %.1f -> %.1f MiB", baseTable, table, float64(baseHeap)/(1<<20), float64(heap)/(1<<20))
			if n := loaded.Load(); n != requests+50 {
				t.Fatalf("the stored session was loaded by %d requests of %d", n, requests+50)
			}
			if tc.writeFirst && saved.Load() != requests+50 {
				t.Fatalf("%d responses started of %d", saved.Load(), requests+50)
			}
			if table > baseTable+16 {
				t.Errorf("after %d panicking requests the session table holds %d entries, %d before", requests, table, baseTable)
			}
			// Leaked sessions would hold 12 MiB of scratch alone (the old
			// code grew 38 MiB); a busy machine's driver buffers move ~5.
			if heap > baseHeap+8<<20 {
				t.Errorf("after %d panicking requests the heap grew by %.1f MiB (from %.1f MiB), want at most 8",
					requests, float64(heap-baseHeap)/(1<<20), float64(baseHeap)/(1<<20))
			}
			if n := f.count(t); n != 1 {
				t.Errorf("%d documents, want the one session", n)
			}
		})
	}
}

// TestMiddlewareLogoutAfterResponseStarted checks that a logout decided
// after the response started (the handler wrote its body, flushed it or
// took over the connection, then set MaxAge < 0) still ends the session:
// its document is deleted, although its cookie can no longer be expired.
// Before: the middleware only logged "session changed after the response
// started; not saved", and the session lived on.
func TestMiddlewareLogoutAfterResponseStarted(t *testing.T) {
	tests := []struct {
		name     string
		respond  func(t *testing.T, w http.ResponseWriter)
		hijacked bool // respond wrote a whole response on the hijacked connection
	}{
		{name: "Write", respond: func(t *testing.T, w http.ResponseWriter) {
			_, _ = io.WriteString(w, "bye")
		}},
		{name: "WriteHeader", respond: func(t *testing.T, w http.ResponseWriter) {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "bye")
		}},
		{name: "Flush", respond: func(t *testing.T, w http.ResponseWriter) {
			_, _ = io.WriteString(w, "bye")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
		}},
		{name: "Flush alone", respond: func(t *testing.T, w http.ResponseWriter) {
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "bye")
		}},
		{name: "Hijack", hijacked: true, respond: func(t *testing.T, w http.ResponseWriter) {
			hijackAndAnswer(t, w, "bye")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
			cookie := b.cookies[testSessionName].Value
			handled := make(chan struct{})
			inner := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if s.IsNew {
					t.Error("the stored session was not loaded")
				}
				tc.respond(t, w)
				s.Options.MaxAge = -1 // the logout, too late for the cookie
			})
			srv := mwServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(handled) // once the middleware is done
				inner.ServeHTTP(w, r)
			}))
			req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.AddCookie(&http.Cookie{Name: testSessionName, Value: cookie})
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != "bye" {
				t.Errorf("response %d %q (%v), want the handler's 200 bye", resp.StatusCode, body, err)
			}
			if c := responseCookie(resp.Header, testSessionName); c != nil {
				t.Errorf("the response, which started before the logout, sets the cookie: %v", c)
			}
			select {
			case <-handled:
			case <-time.After(30 * time.Second):
				t.Fatal("the handler did not return within 30s")
			}
			if _, ok := cookieDocument(t, f, cookie); ok {
				t.Fatal("the session's document survived the logout")
			}
			if n := f.count(t); n != 0 {
				t.Errorf("%d documents after the logout, want 0", n)
			}
			if strings.Contains(f.logs.String(), `"level":"ERROR"`) {
				t.Errorf("errors logged:\n%s", f.logs)
			}
			// The cookie the browser kept gives a new session.
			replay := newBrowser()
			replay.cookies[testSessionName] = &http.Cookie{Name: testSessionName, Value: cookie}
			if s, err := loadSession(t, f, replay); err != nil || !s.IsNew || len(s.Values) != 0 {
				t.Errorf("the old cookie loads %v (new: %v), %v; want a new session", s.Values, s.IsNew, err)
			}
		})
	}
}

// TestMiddlewareRememberMe checks that a session whose login gave it a
// longer MaxAge than the store's ("remember me": 30 days against one)
// keeps it through the touches of requests that only read it.
// Before: documents did not keep the session's MaxAge, so a request loaded
// the session with the store's default and its touch rewrote the expiry
// one day ahead; the session died after one idle day.
func TestMiddlewareRememberMe(t *testing.T) {
	const day = 24 * time.Hour
	const remember = 30 * day
	tests := []struct {
		name     string
		absolute time.Duration // Config.AbsoluteTimeout
		// expires returns the expiry a touch at now should write, for a
		// session created at created.
		expires func(created, now time.Time) time.Time
	}{
		{name: "no absolute timeout", absolute: -1,
			expires: func(created, now time.Time) time.Time { return now.Add(remember) }},
		{name: "default absolute timeout", // the longer of 7 days and the session's own MaxAge
			expires: func(created, now time.Time) time.Time { return created.Add(remember) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now, AbsoluteTimeout: tc.absolute})
			if got := time.Duration(f.store.Options.MaxAge) * time.Second; got != day {
				t.Fatalf("the store's default MaxAge is %v, want a day", got)
			}
			b := newBrowser()
			login := true
			var loaded SessionTimes // Times in the handler, before the response
			var session *sessions.Session
			h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if login {
					s.Values["user"] = "ada"
					s.Options.MaxAge = int(remember / time.Second) // remember me
					_, _ = io.WriteString(w, "welcome")
					return
				}
				if s.IsNew || s.Values["user"] != "ada" {
					t.Errorf("at %v: session IsNew=%v values=%v, want ada's", clock.Now(), s.IsNew, s.Values)
				}
				if got := time.Duration(s.Options.MaxAge) * time.Second; got != remember {
					t.Errorf("at %v: loaded MaxAge %v, want %v", clock.Now(), got, remember)
				}
				loaded, _ = f.store.Times(s)
				session = s
				_, _ = io.WriteString(w, "page") // reads only
			})
			created := clock.Now()
			rec := b.do(h.ServeHTTP)
			if c := responseCookie(rec.Header(), testSessionName); c == nil || c.MaxAge != int(remember/time.Second) {
				t.Fatalf("login sets %v, want a cookie with Max-Age %v", rec.Header().Values("Set-Cookie"), remember)
			}
			login = false
			last := created // the last save
			for _, at := range []time.Duration{day / 2, day + day/2, 2*day + day/2} {
				clock.Advance(created.Add(at).Sub(clock.Now()))
				f.cmds.reset()
				rec := b.do(h.ServeHTTP)
				now := clock.Now()
				if got, want := commandNames(f.cmds), []string{"find", "save"}; !slices.Equal(got, want) {
					t.Errorf("day %.1f: commands %q, want %q (a touch)", at.Hours()/24, got, want)
				}
				want := tc.expires(created, now)
				if c := responseCookie(rec.Header(), testSessionName); c == nil || c.MaxAge != int(want.Sub(now)/time.Second) {
					t.Errorf("day %.1f: touch sets %v, want a cookie with Max-Age %v", at.Hours()/24, rec.Header().Values("Set-Cookie"), want.Sub(now))
				}
				doc, ok := browserDocument(t, f, b)
				if !ok {
					t.Fatalf("day %.1f: the session's document is gone", at.Hours()/24)
				}
				if got := documentDate(t, doc, fieldExpiresAt); !got.Equal(want) {
					t.Errorf("day %.1f: expiresAt %v, want %v (%v after the touch)", at.Hours()/24, got, want, want.Sub(now))
				}
				if got := documentDate(t, doc, fieldUpdatedAt); !got.Equal(now) {
					t.Errorf("day %.1f: updatedAt %v, want the touch's %v", at.Hours()/24, got, now)
				}
				if got, _ := doc.Lookup(fieldMaxAge).AsInt64OK(); time.Duration(got)*time.Second != remember {
					t.Errorf("day %.1f: stored maxAge %ds, want %v", at.Hours()/24, got, remember)
				}
				// Times in the handler is what the request loaded, the last
				// save's; after the request, the touch's.
				if want := (SessionTimes{CreatedAt: created, UpdatedAt: last, ExpiresAt: tc.expires(created, last)}); !sameTimes(loaded, want) {
					t.Errorf("day %.1f: Times in the handler %+v, want %+v", at.Hours()/24, loaded, want)
				}
				if got, ok := f.store.Times(session); !ok || !sameTimes(got, SessionTimes{CreatedAt: created, UpdatedAt: now, ExpiresAt: want}) {
					t.Errorf("day %.1f: Times after the request %+v, %v; want created %v, updated %v, expires %v", at.Hours()/24, got, ok, created, now, want)
				}
				last = now
			}
		})
	}
}

// hijackAndAnswer takes over the connection of w and answers 200 with body
// on it.
func hijackAndAnswer(t *testing.T, w http.ResponseWriter, body string) {
	t.Helper()
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("Hijack: %v", err)
		return
	}
	defer conn.Close()
	_, _ = fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_ = rw.Flush()
}

// TestMiddlewareFailedTouchKeepsTheResponse checks that a touch (an
// unchanged session's optional expiry slide) that fails is logged, and the
// handler's response stands. Before: the error handler replaced the
// response of a handler whose side effects had already run.
func TestMiddlewareFailedTouchKeepsTheResponse(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now})
	const name = "__Host-sid"
	f.store.Options.Secure = true
	h := f.store.Middleware(name, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, name)
		if s.IsNew {
			s.Values["user"] = "ada"
		}
		io.WriteString(w, "done")
	}))
	b := newBrowser()
	b.do(h.ServeHTTP)
	f.store.Options.Secure = false // the touch's save now fails: the options do not suit __Host-
	clock.Advance(2 * maxTouchInterval)
	rec := b.do(h.ServeHTTP)
	if rec.Code != http.StatusOK || rec.Body.String() != "done" {
		t.Fatalf("status %d, body %q; want the handler's 200 done", rec.Code, rec.Body)
	}
	if !strings.Contains(f.logs.String(), "could not slide the session's expiry") {
		t.Errorf("the failed touch was not logged:\n%s", f.logs)
	}
}

// TestChangeCheckAllocatesNothing: the change check of an unchanged session
// encodes into a buffer the store lends it, and allocates nothing.
func TestChangeCheckAllocatesNothing(t *testing.T) {
	values := map[any]any{"uid": 100_000, "name": "Chloé", "roles": []string{"member", "editor"}, "loginAt": time.Unix(1_700_000_000, 0).UTC()}
	w, st := checkedWriter(t, values)
	if w.changed(st) {
		t.Fatal("the unchanged values are reported changed")
	}
	if n := testing.AllocsPerRun(100, func() { w.changed(st) }); n != 0 {
		t.Errorf("the change check of an unchanged session makes %v allocations, want 0", n)
	}
	values["uid"] = 100_001
	if !w.changed(st) || !slices.Equal(w.encoded, mustEncode(t, compactCodec{}, values)) {
		t.Error("a changed value is not reported, or its encoding not kept for the save")
	}
}

// preloaded is a sessions.Store that gives the registry a copy of a loaded
// session, with its state, without a database command.
type preloaded struct {
	*Store
	loaded *sessions.Session
}

func (p preloaded) New(*http.Request, string) (*sessions.Session, error) {
	s := sessions.NewSession(p.Store, p.loaded.Name())
	*s.Options, s.ID, s.Values = *p.loaded.Options, p.loaded.ID, maps.Clone(p.loaded.Values)
	st := p.states.get(p.loaded)
	st.cookieSet = false // as a load leaves it
	p.states.set(s, st)
	return s, nil
}

// BenchmarkMiddlewareOwnWork serves a read-only request with its session
// already in gorilla's registry (no database command), through the
// middleware and to the handler alone: the difference is the middleware's
// own work (its writer, the change checks, the session table).
func BenchmarkMiddlewareOwnWork(b *testing.B) {
	f := newFixture(b, Config{Now: newFakeClock().Now}) // the clock stands still: no touch is due
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	session, err := f.store.New(r, testSessionName)
	maps.Copy(session.Values, map[any]any{"uid": 100_000, "name": "Chloé Nguyen", "roles": []string{"member", "editor"},
		"loginAt": time.Now().UTC().Truncate(time.Second), "counter": 0})
	session.AddFlash("Welcome back!")
	if err := errors.Join(err, session.Save(r, httptest.NewRecorder())); err != nil {
		b.Fatal(err)
	}
	loader := preloaded{Store: f.store, loaded: session}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s, err := f.store.Get(r, testSessionName); err != nil || s.Values["uid"] == nil {
			b.Fatalf("the session is not the preloaded one: %v", err)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"middleware", f.store.Middleware(testSessionName, nil)(handler)}, {"handler", handler}} {
		b.Run(h.name, func(b *testing.B) {
			f.cmds.reset()
			w := &headerOnlyWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				req := r.WithContext(context.Background())
				if _, err := sessions.GetRegistry(req).Get(loader, testSessionName); err != nil {
					b.Fatal(err)
				}
				clear(w.h)
				h.h.ServeHTTP(w, req)
			}
			if n := f.cmds.count.Load(); n > 0 {
				b.Fatalf("%d database commands: the benchmark is not the middleware's own work", n)
			}
		})
	}
}

// checkedWriter returns the middleware's writer of a session holding
// values, stored as they are: a change check's subject, with no database.
func checkedWriter(tb testing.TB, values map[any]any) (*sessionWriter, sessionState) {
	s := &Store{cfg: Config{Codec: compactCodec{}}}
	enc, err := s.cfg.Codec.Encode(values)
	if err != nil {
		tb.Fatal(err)
	}
	session := sessions.NewSession(s, testSessionName)
	session.Values = values
	return &sessionWriter{store: s, session: session}, sessionState{encoded: enc}
}

// BenchmarkChangeCheck is the middleware's check of an unchanged session.
func BenchmarkChangeCheck(b *testing.B) {
	w, st := checkedWriter(b, map[any]any{"uid": 100_000, "name": "Chloé Nguyen", "roles": []string{"member", "editor"},
		"loginAt": time.Now().UTC().Truncate(time.Second), "counter": 0, "_flash": []any{"Welcome back!"}})
	b.ReportAllocs()
	for b.Loop() {
		if w.changed(st) {
			b.Fatal("the unchanged values are reported changed")
		}
	}
}

// headerOnlyWriter is a ResponseWriter that keeps only its header.
type headerOnlyWriter struct{ h http.Header }

func (w *headerOnlyWriter) Header() http.Header         { return w.h }
func (w *headerOnlyWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerOnlyWriter) WriteHeader(int)             {}

// TestMiddlewareLogsALimitAfterTheResponse: a save after the response that
// could not apply the per-owner limit is logged, as one before it is.
func TestMiddlewareLogsALimitAfterTheResponse(t *testing.T) {
	var proxy *faultproxy.Proxy
	var armed atomic.Bool
	monitor := &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		if e.CommandName == "update" && armed.Load() {
			proxy.BlackHole(true) // the limit's commands, after the save, get no answer
		}
	}}
	coll, p := proxiedCollection(t, options.Client().SetMonitor(monitor))
	proxy = p
	t.Cleanup(func() { proxy.BlackHole(false) })
	logs := &syncBuffer{}
	store := storeOn(t, coll, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: 1, Timeout: 500 * time.Millisecond, Logger: testLogger(logs)})
	f := &storeFixture{store: store, coll: coll, logs: logs}
	b, _ := saveNewSession(t, f, map[any]any{"cart": 1})
	armed.Store(true)
	b.do(sessionHandler(t, store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		_, _ = io.WriteString(w, "welcome")
		SetOwner(s, "ada", "") // after the response started: saved when the handler returns
	}).ServeHTTP)
	if !strings.Contains(logs.String(), "session saved, but not the per-owner limit") {
		t.Errorf("the limit's failure after the response was not logged:\n%s", logs)
	}
}

// TestMiddlewareTouchesWithinTheIdleTimeout: a TouchInterval longer than a
// session's idle timeout still slides its expiry in time: an active user,
// unchanged requests half an hour apart, keeps a session of an hour.
func TestMiddlewareTouchesWithinTheIdleTimeout(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now, TouchInterval: 2 * time.Hour})
	f.store.MaxAge(3600)
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	for i := range 4 {
		clock.Advance(30 * time.Minute)
		if s, _ := loadSession(t, f, b); s.IsNew {
			t.Fatalf("request %d, %v after the last: the session expired", i+1, 30*time.Minute)
		}
		b.do(sessionHandler(t, f.store, nil, func(http.ResponseWriter, *http.Request, *sessions.Session) {}).ServeHTTP)
	}
}

// TestSaveAfterTheResponseStarted: under the middleware, a handler's own
// Save of a new session, or a regeneration, once the response has started
// fails with ErrInvalidConfig and stores nothing: its cookie could not be
// set (a new session would be stored for no one, a regeneration would sign
// the user out). An update needs no cookie, and is saved; a regeneration
// by a changed ID, which the middleware saves after the response, is
// refused and logged.
func TestSaveAfterTheResponseStarted(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	late := func(b *browser, fn func(w http.ResponseWriter, r *http.Request, s *sessions.Session)) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			io.WriteString(w, "hello\n")
			fn(w, r, s)
		}).ServeHTTP(rec, b.request())
		return rec
	}
	rec := late(newBrowser(), func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["user"] = "ada"
		if err := s.Save(r, w); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("a new session saved after the response started: %v, want ErrInvalidConfig", err)
		}
	})
	if n := f.count(t); n != 0 || rec.Header().Get("Set-Cookie") != "" {
		t.Fatalf("%d documents, Set-Cookie %q: want none", n, rec.Header().Get("Set-Cookie"))
	}
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	late(b, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["seen"] = true
		if err := s.Save(r, w); err != nil {
			t.Errorf("an update after the response started: %v", err)
		}
		// A login that regenerates too late: the regeneration is refused, and
		// so is every later save, which would store the login under a
		// secret another may have planted (session fixation).
		if err := f.store.RegenerateID(r, w, s); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("a regeneration after the response started: %v, want ErrInvalidConfig", err)
		}
		s.Values["user"] = "victim"
		if err := s.Save(r, w); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("a save after a refused regeneration: %v, want ErrInvalidConfig", err)
		}
		s.Values["admin"] = true // for the middleware's save after the response
	})
	late(b, func(_ http.ResponseWriter, _ *http.Request, s *sessions.Session) { s.ID = "" }) // the middleware's save after the response
	if strings.Count(f.logs.String(), "the response has started") < 2 {
		t.Errorf("the middleware's refused regenerations were not logged:\n%s", f.logs)
	}
	if s, err := loadSession(t, f, b); err != nil || s.IsNew || s.Values["seen"] != true || s.Values["user"] != "ada" || s.Values["admin"] != nil {
		t.Fatalf("the old cookie after the refused regenerations: new %v, %v, %v; want ada's values, seen, and nothing of the late login", s.IsNew, s.Values, err)
	}
}

// TestCookielessRequestsLeaveNoState: requests without a cookie, whose
// handlers only read, leave nothing in the session table (the middleware's
// check for a session loaded before it adds no entry).
func TestCookielessRequestsLeaveNoState(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	var kept []*sessions.Session // alive: their entries would stay
	h := f.store.Middleware(testSessionName, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		kept = append(kept, s)
		_, _ = io.WriteString(w, "ok")
	}))
	for range 20 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "http://example.test/", nil))
	}
	if n := f.store.states.len(); n != 0 {
		t.Fatalf("%d session-table entries for %d cookieless read-only requests, want 0", n, len(kept))
	}
}
