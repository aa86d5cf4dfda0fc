package mongostore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The middleware tests that count commands use ExpiryNone: the GC goroutine
// of the other modes sweeps once when the store starts, possibly after the
// fixture has reset its command log, and would add a find of its own.

// mwHandlerText is what the test handlers write; it must never appear in an
// error response.
const mwHandlerText = "handler body: this must not leak"

// mwCommandNames returns the names of the commands recorded in l, in order.
func mwCommandNames(l *commandLog) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for _, c := range l.commands {
		if elems, err := c.Elements(); err == nil && len(elems) > 0 {
			names = append(names, elems[0].Key())
		}
	}
	return names
}

// mwSetCookie returns the cookie called name that h sets, or nil.
func mwSetCookie(h http.Header, name string) *http.Cookie {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// mwDocument returns the document of the session whose cookie value is
// value, read directly from the collection (the read is recorded in the
// fixture's command log).
func mwDocument(t testing.TB, f *storeFixture, value string) (bson.Raw, bool) {
	t.Helper()
	id, _, err := f.store.decodeCookie(testSessionName, value)
	if err != nil {
		t.Fatalf("decode session cookie: %v", err)
	}
	raw, err := f.coll.FindOne(context.Background(), idFilter(f.store.hasher.docID(id))).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("find session document: %v", err)
	}
	return raw, true
}

// mwBrowserDocument returns the document of the session the browser holds.
func mwBrowserDocument(t testing.TB, f *storeFixture, b *browser) (bson.Raw, bool) {
	t.Helper()
	c, ok := b.cookies[testSessionName]
	if !ok {
		t.Fatalf("the browser holds no %q cookie", testSessionName)
	}
	return mwDocument(t, f, c.Value)
}

// mwDate returns the date field of a session document.
func mwDate(t testing.TB, doc bson.Raw, field string) time.Time {
	t.Helper()
	v, err := doc.LookupErr(field)
	if err != nil {
		t.Fatalf("document has no %s: %v", field, err)
	}
	dt, ok := v.DateTimeOK()
	if !ok {
		t.Fatalf("%s is %v, not a date", field, v.Type)
	}
	return time.UnixMilli(dt).UTC()
}

// mwSessionHandler returns the middleware named testSessionName of
// f.store wrapping fn, which gets the session the middleware loaded.
func mwSessionHandler(t testing.TB, f *storeFixture, opts MiddlewareOptions, fn func(w http.ResponseWriter, r *http.Request, s *sessions.Session)) http.Handler {
	return f.store.Middleware(testSessionName, opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := Session(r, testSessionName)
		if s == nil {
			t.Errorf("Session(r, %q) = nil inside the middleware", testSessionName)
			http.Error(w, "no session", http.StatusTeapot)
			return
		}
		fn(w, r, s)
	}))
}

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

// mwUnreachableStore returns a store whose client never reaches a server,
// and the log of the commands that client starts.
func mwUnreachableStore(t testing.TB, cfg Config) (*Store, *commandLog) {
	t.Helper()
	cmds := &commandLog{}
	client, err := mongo.Connect(options.Client().
		ApplyURI("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=50&connectTimeoutMS=50").
		SetMonitor(cmds.monitor()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	cfg.Expiry = ExpiryNone
	store, err := NewStore(context.Background(), client.Database(testDatabase).Collection("unreachable"), cfg, testHashKey)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store, cmds
}

// mwCookieFor returns a validly signed cookie value for a fresh session ID
// of the store.
func mwCookieFor(t testing.TB, s *Store) string {
	t.Helper()
	v, err := securecookie.EncodeMulti(testSessionName, []byte(newSessionID()), s.codecs...)
	if err != nil {
		t.Fatal(err)
	}
	return v
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
			wantCmds: []string{"find", "findAndModify"}, wantCookie: true, wantDocs: 1},
		{name: "existing value added", existing: true, handle: func(s *sessions.Session) { s.Values["theme"] = "dark" }, check: wantExisting,
			wantCmds: []string{"find", "findAndModify"}, wantCookie: true, wantDocs: 1},
		{name: "existing value removed", existing: true, handle: func(s *sessions.Session) { delete(s.Values, "user") }, check: wantExisting,
			wantCmds: []string{"find", "findAndModify"}, wantCookie: true, wantDocs: 1},
		{name: "existing options changed", existing: true, handle: func(s *sessions.Session) { s.Options.MaxAge = 3600 }, check: wantExisting,
			wantCmds: []string{"find", "findAndModify"}, wantCookie: true, wantDocs: 1},
		{name: "existing logout", existing: true, handle: func(s *sessions.Session) { s.Options.MaxAge = -1 }, check: wantExisting,
			wantCmds: []string{"find", "delete"}, wantExpire: true, wantDocs: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now})
			b := newBrowser()
			if tc.existing {
				b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
					s.Values["user"] = "alice"
				}).ServeHTTP)
				if f.count(t) != 1 {
					t.Fatal("the set-up request stored no session")
				}
				clock.Advance(time.Second)
			}
			f.cmds.reset()

			var checked check = tc.check
			rec := b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				checked(t, s)
				tc.handle(s)
				_, _ = io.WriteString(w, "ok")
			}).ServeHTTP)

			if got := mwCommandNames(f.cmds); !slices.Equal(got, tc.wantCmds) {
				t.Errorf("commands = %q, want %q", got, tc.wantCmds)
			}
			if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
				t.Errorf("response %d %q, want 200 ok", rec.Code, rec.Body)
			}
			c := mwSetCookie(rec.Header(), testSessionName)
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
			s, _ := mwUnreachableStore(t, Config{Logger: testLogger(logs)})
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
				opts := MiddlewareOptions{}
				if custom {
					opts.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
						gotErr = err
						http.Error(w, "custom: try later", http.StatusServiceUnavailable)
					}
				}
				h := store.Middleware(testSessionName, opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					handlerCalled.Store(true)
					_, _ = io.WriteString(w, mwHandlerText)
				}))
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.AddCookie(&http.Cookie{Name: testSessionName, Value: mwCookieFor(t, store)})
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
}

type mwUnregistered struct{ X int } // never registered with gob

func mwSaveFailures() []mwSaveFailure {
	return []mwSaveFailure{
		{
			name: "too large", cfg: Config{MaxSize: 256},
			change: func(t *testing.T, f *storeFixture, s *sessions.Session) {
				s.Values["big"] = strings.Repeat("x", 1000)
			},
			status: http.StatusInternalServerError, target: ErrTooLarge,
		},
		{
			name: "too large on update", cfg: Config{MaxSize: 256}, prepare: true,
			change: func(t *testing.T, f *storeFixture, s *sessions.Session) {
				s.Values["big"] = strings.Repeat("x", 1000)
			},
			status: http.StatusInternalServerError, target: ErrTooLarge,
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
		_, err := io.WriteString(w, mwHandlerText)
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
					b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
						s.Values["user"] = "alice"
					}).ServeHTTP)
				}
				docsBefore := f.count(t)
				var respondErr error
				rec := b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
				if c := mwSetCookie(rec.Header(), testSessionName); c != nil {
					t.Errorf("error response sets the session cookie: %v", c)
				}
				if trig.name != "return" && !errors.Is(respondErr, errResponseDiscarded) {
					t.Errorf("the handler's %s returned %v, want errResponseDiscarded", trig.name, respondErr)
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
				b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
					s.Values["user"] = "alice"
				}).ServeHTTP)
			}
			var gotErr error
			calls := 0
			opts := MiddlewareOptions{ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				calls++
				gotErr = err
				if Session(r, testSessionName) == nil {
					t.Error("the error handler's request carries no session")
				}
				w.Header().Set("X-Error", "custom")
				w.WriteHeader(http.StatusTeapot)
				_, _ = io.WriteString(w, "custom error")
			}}
			rec := b.do(mwSessionHandler(t, f, opts, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				fail.change(t, f, s)
				_, _ = io.WriteString(w, mwHandlerText)
				_, _ = io.WriteString(w, mwHandlerText)
			}).ServeHTTP)
			if calls != 1 {
				t.Errorf("error handler called %d times, want once", calls)
			}
			if !errors.Is(gotErr, fail.target) {
				t.Errorf("error handler got %v, want %v", gotErr, fail.target)
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
	b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
				h := mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
				if got := mwCommandNames(f.cmds); !slices.Equal(got, wantCmds) {
					t.Errorf("commands %q, want %q", got, wantCmds)
				}
				c := mwSetCookie(rec.Header(), testSessionName)
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
	if doc, ok := mwDocument(t, f, valid); !ok {
		t.Error("the original session is gone")
	} else if _, _, v, err := f.store.decodeStored(doc.Lookup(fieldID).StringValue(), doc); err != nil || v["user"] != "alice" {
		t.Errorf("original session values %v, %v", v, err)
	}
}

// TestMiddlewareUnreadableSession checks that a stored session that cannot
// be decoded is treated as lost, not as an outage.
func TestMiddlewareUnreadableSession(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b := newBrowser()
	b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["user"] = "alice"
	}).ServeHTTP)
	old := b.cookies[testSessionName].Value
	if _, err := f.coll.UpdateMany(context.Background(), bson.D{}, bson.D{{Key: "$set", Value: bson.D{
		{Key: fieldData, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: []byte("not gob")}},
	}}}); err != nil {
		t.Fatal(err)
	}
	f.cmds.reset()
	rec := b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if !s.IsNew || len(s.Values) != 0 {
			t.Errorf("session IsNew=%v values=%v, want a fresh one", s.IsNew, s.Values)
		}
		s.Values["user"] = "alice again"
		_, _ = io.WriteString(w, "ok")
	}).ServeHTTP)
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Errorf("response %d %q, want 200 ok", rec.Code, rec.Body)
	}
	if got, want := mwCommandNames(f.cmds), []string{"find", "insert"}; !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	if c := mwSetCookie(rec.Header(), testSessionName); c == nil || c.Value == old {
		t.Errorf("cookie %v, want a new session's", c)
	}
	if !strings.Contains(f.logs.String(), "discarding unreadable session") {
		t.Errorf("no warning logged: %s", f.logs)
	}
}

// TestMiddlewareLogout checks that MaxAge < 0 deletes the session.
func TestMiddlewareLogout(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b := newBrowser()
	logout := false
	h := mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
	if got, want := mwCommandNames(f.cmds), []string{"find", "delete"}; !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	c := mwSetCookie(rec.Header(), testSessionName)
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
	f.store.Middleware(testSessionName, MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		replayed = Session(r, testSessionName)
	})).ServeHTTP(httptest.NewRecorder(), req)
	if replayed == nil || !replayed.IsNew || len(replayed.Values) != 0 {
		t.Errorf("replayed cookie gives %+v, want a new session", replayed)
	}
	t.Run("explicit logout save sets one cookie", func(t *testing.T) {
		f := newFixture(t, Config{Expiry: ExpiryNone})
		b, _ := saveNew(t, f, map[any]any{"user": "ada"})
		rec := b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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

// TestMiddlewareSessionAccessor checks Session and store.Get inside
// handlers, with one and two middlewares.
func TestMiddlewareSessionAccessor(t *testing.T) {
	t.Run("no middleware", func(t *testing.T) {
		if s := Session(httptest.NewRequest(http.MethodGet, "/", nil), testSessionName); s != nil {
			t.Errorf("Session = %v without middleware, want nil", s)
		}
	})

	f := newFixture(t, Config{Expiry: ExpiryNone})
	var calls atomic.Int32
	h := f.store.Middleware("a", MiddlewareOptions{})(f.store.Middleware("b", MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		a, b := Session(r, "a"), Session(r, "b")
		if a == nil || b == nil || a == b {
			t.Fatalf("Session a=%p b=%p, want two sessions", a, b)
		}
		if a.Name() != "a" || b.Name() != "b" {
			t.Errorf("names %q %q", a.Name(), b.Name())
		}
		if s := Session(r, "c"); s != nil {
			t.Errorf("Session(r, c) = %v, want nil", s)
		}
		for name, want := range map[string]*sessions.Session{"a": a, "b": b} {
			got, err := f.store.Get(r, name)
			if err != nil || got != want {
				t.Errorf("store.Get(r, %q) = %p, %v; want %p (the middleware's session)", name, got, err, want)
			}
		}
		n, _ := a.Values["n"].(int)
		a.Values["n"] = n + 1
		b.Values["n"] = n + 10
		_, _ = fmt.Fprintf(w, "a=%v b=%v", a.Values["n"], b.Values["n"])
	})))
	br := newBrowser()
	rec := br.do(h.ServeHTTP)
	if mwSetCookie(rec.Header(), "a") == nil || mwSetCookie(rec.Header(), "b") == nil {
		t.Fatalf("Set-Cookie %v, want cookies a and b", rec.Header().Values("Set-Cookie"))
	}
	if got := rec.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	f.cmds.reset()
	rec = br.do(h.ServeHTTP)
	if rec.Body.String() != "a=2 b=11" {
		t.Errorf("second request body %q, want a=2 b=11", rec.Body)
	}
	if got, want := mwCommandNames(f.cmds), []string{"find", "find", "findAndModify", "findAndModify"}; !slices.Equal(got, want) {
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
	srv := mwServer(t, mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
