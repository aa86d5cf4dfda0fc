package mongostore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

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
		{"Write", func(t *testing.T, w http.ResponseWriter) { _, _ = io.WriteString(w, "written") }, http.StatusOK, "written"},
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
			srv := mwServer(t, mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
			c := mwSetCookie(resp.Header, testSessionName)
			if c == nil || c.Value == "" {
				t.Fatalf("response sets no session cookie; headers %v", resp.Header)
			}
			if resp.Header.Get("X-Handler") != "yes" {
				t.Errorf("the handler's header was lost: %v", resp.Header)
			}
			if _, ok := mwDocument(t, f, c.Value); !ok {
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
			srv := mwServer(t, mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
			c := mwSetCookie(resp.Header, testSessionName)
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
				if _, ok := mwDocument(t, f, c.Value); !ok {
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
	srv := mwServer(t, mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
	if c := mwSetCookie(resp.Header, testSessionName); c == nil {
		t.Error("no session cookie")
	}
	if n := f.count(t); n != 1 {
		t.Errorf("%d documents, want 1", n)
	}

	// Hijack, too, reaches the connection through Unwrap.
	hijack := mwServer(t, mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = rw.Flush()
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
	inner := mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		w.Header().Set("X-Handler", "leaked")
		s.Values["big"] = strings.Repeat("x", 1000)
		_, _ = io.WriteString(w, mwHandlerText)
	})
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", "max-age=63072000")
		w.Header().Set("X-Request-Id", "req-1")
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
	for _, h := range []string{"Strict-Transport-Security", "X-Request-Id"} {
		if rec.Header().Get(h) == "" {
			t.Errorf("error response lost the outer middleware's %s header (headers %v)", h, rec.Header())
		}
	}
}

// TestMiddlewareCacheHeaders checks Vary and Cache-Control.
func TestMiddlewareCacheHeaders(t *testing.T) {
	tests := []struct {
		name         string
		existing     bool
		cacheControl string // set by the handler
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b := newBrowser()
			if tc.existing {
				b, _ = saveNew(t, f, map[any]any{"user": "alice"})
			}
			rec := b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if tc.cacheControl != "" {
					w.Header().Set("Cache-Control", tc.cacheControl)
				}
				if tc.change {
					s.Values["n"] = 1
				}
				_, _ = io.WriteString(w, "ok")
			}).ServeHTTP)
			if got := rec.Header().Values("Vary"); !slices.Contains(got, "Cookie") {
				t.Errorf("Vary %q, want Cookie", got)
			}
			if got := rec.Header().Get("Cache-Control"); got != tc.want {
				t.Errorf("Cache-Control %q, want %q", got, tc.want)
			}
			if c := mwSetCookie(rec.Header(), testSessionName); (c != nil) != tc.wantCookie {
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
			f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now})
			b := newBrowser()
			opts := MiddlewareOptions{TouchInterval: tc.interval}
			change := ""
			h := mwSessionHandler(t, f, opts, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if change != "" {
					s.Values["user"] = change
				}
				_, _ = io.WriteString(w, "ok")
			}).ServeHTTP
			request := func(wantCmds []string, wantCookie bool) {
				t.Helper()
				f.cmds.reset()
				rec := b.do(h)
				if got := mwCommandNames(f.cmds); !slices.Equal(got, wantCmds) {
					t.Errorf("at %v: commands %q, want %q", clock.Now(), got, wantCmds)
				}
				if c := mwSetCookie(rec.Header(), testSessionName); (c != nil) != wantCookie {
					t.Errorf("at %v: Set-Cookie %v, want cookie: %v", clock.Now(), rec.Header().Values("Set-Cookie"), wantCookie)
				}
			}
			change = "alice"
			request([]string{"insert"}, true)
			change = ""
			doc, _ := mwBrowserDocument(t, f, b)
			expires0 := mwDate(t, doc, fieldExpiresAt)
			if want := clock.Now().Add(DefaultIdleTimeout); !expires0.Equal(want) {
				t.Fatalf("expiresAt %v, want %v", expires0, want)
			}

			clock.Advance(tc.quiet)
			request([]string{"find"}, false)
			doc, _ = mwBrowserDocument(t, f, b)
			if got := mwDate(t, doc, fieldExpiresAt); !got.Equal(expires0) {
				t.Errorf("expiresAt moved to %v by a read within the interval", got)
			}

			if tc.touch == 0 {
				// Never touched, however old the write...
				clock.Advance(time.Hour - time.Second)
				request([]string{"find"}, false)
				doc, _ = mwBrowserDocument(t, f, b)
				if got := mwDate(t, doc, fieldExpiresAt); !got.Equal(expires0) {
					t.Errorf("expiresAt moved to %v with a negative touch interval", got)
				}
				// ...but changes are still written.
				change = "bob"
				request([]string{"find", "findAndModify"}, true)
				doc, _ = mwBrowserDocument(t, f, b)
				if got, want := mwDate(t, doc, fieldExpiresAt), clock.Now().Add(DefaultIdleTimeout); !got.Equal(want) {
					t.Errorf("expiresAt %v after a change, want %v", got, want)
				}
				return
			}

			clock.Advance(tc.touch - tc.quiet)
			request([]string{"find", "findAndModify"}, true)
			doc, _ = mwBrowserDocument(t, f, b)
			if got, want := mwDate(t, doc, fieldExpiresAt), expires0.Add(tc.touch); !got.Equal(want) {
				t.Errorf("expiresAt after touch %v, want %v", got, want)
			}
			if got := mwDate(t, doc, fieldUpdatedAt); !got.Equal(clock.Now()) {
				t.Errorf("updatedAt after touch %v, want %v", got, clock.Now())
			}
			// The touch counts as a write: the next read is quiet again.
			request([]string{"find"}, false)
		})
	}
	t.Run("touch of a session ended elsewhere", func(t *testing.T) {
		clock := newFakeClock()
		f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
		b, _ := saveNew(t, f, map[any]any{"user": "ada"})
		h := mwSessionHandler(t, f, MiddlewareOptions{TouchInterval: time.Minute}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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

// TestMiddlewareUnchangedMapNotWritten checks that a session whose gob
// encoding varies (gob writes maps in random order) is not taken for a
// changed one.
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
		data, err := GobCodec{}.Encode(probe.Values)
		if err != nil {
			t.Fatal(err)
		}
		encodings[string(data)] = true
	}
	if len(encodings) < 2 {
		t.Fatalf("20 gob encodings of a %d-key map are all equal; the test needs varying encodings", len(probe.Values))
	}

	clock := newFakeClock()
	f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now})
	b := newBrowser()
	create := true
	h := mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
		if got := mwCommandNames(f.cmds); !slices.Equal(got, []string{"find"}) {
			t.Fatalf("request %d: commands %q, want only find", i, got)
		}
		if c := mwSetCookie(rec.Header(), testSessionName); c != nil {
			t.Fatalf("request %d sets the cookie", i)
		}
	}
}

// TestMiddlewareEarlyHints checks that informational responses pass
// through before the session is saved with the final response.
func TestMiddlewareEarlyHints(t *testing.T) {
	f := newFixture(t, Config{})
	srv := mwServer(t, mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
	c := mwSetCookie(resp.Header, testSessionName)
	if c == nil {
		t.Fatalf("final response sets no session cookie: %v", resp.Header)
	}
	if _, ok := mwDocument(t, f, c.Value); !ok {
		t.Error("no document for the session")
	}
}

// TestMiddlewareCacheHeadersExplicitSave checks that a response is made
// uncacheable when the handler itself sets the session cookie, with
// session.Save (the usual gorilla idiom) or Store.RegenerateID (at login):
// "a response that sets the session cookie is made uncacheable by shared
// caches".
func TestMiddlewareCacheHeadersExplicitSave(t *testing.T) {
	tests := []struct {
		name     string
		existing bool
		save     func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error
		wantCmds []string
	}{
		{"new session, session.Save", false, func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
			return s.Save(r, w)
		}, []string{"insert"}},
		{"existing session, sessions.Save", true, func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
			return sessions.Save(r, w)
		}, []string{"find", "findAndModify"}},
		{"existing session, RegenerateID", true, func(f *storeFixture, w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
			return f.store.RegenerateID(r, w, s)
		}, []string{"find", "findAndModify", "insert"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b := newBrowser()
			if tc.existing {
				b, _ = saveNew(t, f, map[any]any{"user": "alice"})
			}
			f.cmds.reset()
			rec := b.do(mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				w.Header().Set("Cache-Control", "public, max-age=60")
				s.Values["user"] = "bob"
				if err := tc.save(f, w, r, s); err != nil {
					t.Errorf("save: %v", err)
				}
				_, _ = io.WriteString(w, "ok")
			}).ServeHTTP)
			if got := mwCommandNames(f.cmds); !slices.Equal(got, tc.wantCmds) {
				t.Errorf("commands %q, want %q (saved once, by the handler)", got, tc.wantCmds)
			}
			if c := mwSetCookie(rec.Header(), testSessionName); c == nil || c.Value == "" {
				t.Fatalf("Set-Cookie %v, want the session cookie", rec.Header().Values("Set-Cookie"))
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
	f := newFixture(t, Config{Expiry: ExpiryNone})
	mw := f.store.Middleware(testSessionName, MiddlewareOptions{TouchInterval: -1})
	late := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "body first")
		Session(r, testSessionName).Values["late"] = r.URL.Query().Get("v")
	}))
	b, id := saveNew(t, f, map[any]any{"user": "ada"})
	rec := b.do(func(w http.ResponseWriter, r *http.Request) {
		r.URL.RawQuery = "v=one"
		late.ServeHTTP(w, r)
	})
	if rec.Body.String() != "body first\n" {
		t.Fatalf("body %q", rec.Body.String())
	}
	s, err := load(t, f, b)
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

// TestMiddlewareHijacker checks that handlers asserting http.Hijacker work.
func TestMiddlewareHijacker(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	srv := httptest.NewServer(f.store.Middleware(testSessionName, MiddlewareOptions{})(http.HandlerFunc(
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
		srv := mwServer(t, mwSessionHandler(t, f, MiddlewareOptions{}, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
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
}
