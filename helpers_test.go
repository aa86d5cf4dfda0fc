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
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Keys for the cookie codecs in tests.
var (
	testHashKey  = bytes.Repeat([]byte{0x11}, 32)
	testBlockKey = bytes.Repeat([]byte{0x22}, 32)
	otherHashKey = bytes.Repeat([]byte{0x33}, 32)
)

const testSessionName = "sid"

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// syncBuffer is a bytes.Buffer safe for concurrent writers (log handlers).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testLogger returns a logger writing JSON records at Debug level into buf.
func testLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// storeFixture is a store on its own collection, with the commands its
// client sends recorded.
type storeFixture struct {
	store *Store
	coll  *mongo.Collection
	cmds  *commandLog
	logs  *syncBuffer
}

// newFixture creates a store on a fresh collection. The zero cfg.Expiry
// (ExpiryAuto) lets the same test run on servers with and without TTL
// indexes; the tests of the TTL set-up itself call NewStore directly.
// Without keys, testHashKey is used. The store is closed when the test ends.
func newFixture(t testing.TB, cfg Config, keyPairs ...[]byte) *storeFixture {
	t.Helper()
	f := &storeFixture{cmds: &commandLog{}, logs: &syncBuffer{}}
	client := testClient(t, f.cmds)
	f.coll = testCollection(t, client)
	if cfg.Logger == nil {
		cfg.Logger = testLogger(f.logs)
	}
	if len(keyPairs) == 0 {
		keyPairs = [][]byte{testHashKey}
	}
	firstSweep := make(chan struct{})
	var once sync.Once
	hook := cfg.afterSweep
	cfg.afterSweep = func() {
		once.Do(func() { close(firstSweep) })
		if hook != nil {
			hook()
		}
	}
	store, err := NewStore(context.Background(), f.coll, cfg, keyPairs...)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	f.store = store
	if store.expiry == ExpiryGC {
		// Let the GC's first sweep (at start) finish, so that tests counting
		// commands count only their own.
		select {
		case <-firstSweep:
		case <-time.After(30 * time.Second):
			t.Fatal("the GC's first sweep did not finish within 30s")
		}
	}
	f.cmds.reset()
	return f
}

// count returns the number of documents in the fixture's collection.
func (f *storeFixture) count(t testing.TB) int64 {
	t.Helper()
	n, err := f.coll.CountDocuments(context.Background(), struct{}{})
	if err != nil {
		t.Fatalf("count documents: %v", err)
	}
	return n
}

// browser is a minimal cookie jar: it sends the cookies it holds and
// applies Set-Cookie headers from responses.
type browser struct {
	cookies map[string]*http.Cookie
}

func newBrowser() *browser { return &browser{cookies: make(map[string]*http.Cookie)} }

// request returns a GET request carrying the browser's cookies.
func (b *browser) request() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
	for _, c := range b.cookies {
		r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	return r
}

// absorb applies the Set-Cookie headers of a response and returns them.
func (b *browser) absorb(h http.Header) []*http.Cookie {
	resp := http.Response{Header: h}
	cookies := resp.Cookies()
	for _, c := range cookies {
		if c.MaxAge < 0 || c.Value == "" {
			delete(b.cookies, c.Name)
		} else {
			b.cookies[c.Name] = c
		}
	}
	return cookies
}

// do runs fn as the handler of one request from b and applies the cookies
// it sets.
func (b *browser) do(fn func(w http.ResponseWriter, r *http.Request)) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	fn(rec, b.request())
	b.absorb(rec.Header())
	return rec
}

// agedCookie returns a cookie value for session ID id, signed with hashKey
// (no block key) as securecookie signs it, but stamped age ago: what a
// browser sends back after staying away that long.
func agedCookie(name, id string, hashKey []byte, age time.Duration) string {
	enc := base64.URLEncoding
	stamp := time.Now().Add(-age).Unix()
	b := fmt.Sprintf("%s|%d|%s|", name, stamp, enc.EncodeToString([]byte(id)))
	m := hmac.New(sha256.New, hashKey)
	m.Write([]byte(b[:len(b)-1]))
	signed := append([]byte(b), m.Sum(nil)...)[len(name)+1:]
	return enc.EncodeToString(signed)
}

// len returns the number of live sessions with a state (tests).
func (t *sessionTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep()
	return len(t.m)
}

// modeName returns the name of an expiry mode, for test messages.
func modeName(m ExpiryMode) string { return [...]string{"auto", "ttl", "gc", "none"}[m] }

// saveNewSession saves a new session holding values and returns the
// browser that holds its cookie and the session ID.
func saveNewSession(t *testing.T, f *storeFixture, values map[any]any) (*browser, string) {
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

// loadSession runs one request from b, without the middleware, and returns
// the session f.store loads.
func loadSession(t *testing.T, f *storeFixture, b *browser) (*sessions.Session, error) {
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

// storedDocument returns the stored document of session ID id, failing the
// test if there is none.
func storedDocument(t testing.TB, f *storeFixture, id string) bson.Raw {
	t.Helper()
	raw, err := f.coll.FindOne(context.Background(), idFilter(docID(id))).Raw()
	if err != nil {
		t.Fatalf("read document: %v", err)
	}
	return raw
}

// cookieDocument returns the document of the session whose cookie value is
// value, read directly from the collection (the read is recorded in the
// fixture's command log), and whether there is one.
func cookieDocument(t testing.TB, f *storeFixture, value string) (bson.Raw, bool) {
	t.Helper()
	id, _, err := f.store.cookies.decode(testSessionName, value)
	if err != nil {
		t.Fatalf("decode session cookie: %v", err)
	}
	raw, err := f.coll.FindOne(context.Background(), idFilter(docID(id))).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("find session document: %v", err)
	}
	return raw, true
}

// browserDocument returns the document of the session whose cookie b
// holds, and whether there is one.
func browserDocument(t testing.TB, f *storeFixture, b *browser) (bson.Raw, bool) {
	t.Helper()
	c, ok := b.cookies[testSessionName]
	if !ok {
		t.Fatalf("the browser holds no %q cookie", testSessionName)
	}
	return cookieDocument(t, f, c.Value)
}

// documentDate returns the date in field of a session document, in UTC.
func documentDate(t testing.TB, doc bson.Raw, field string) time.Time {
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

// commandNames returns the names of the commands recorded in l, in order,
// a save's write (an update) as "save".
func commandNames(l *commandLog) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for _, c := range l.commands {
		if elems, err := c.Elements(); err == nil && len(elems) > 0 {
			names = append(names, elems[0].Key())
			if isSave(c) {
				names[len(names)-1] = "save"
			}
		}
	}
	return names
}

// isSave reports whether cmd is a save's write of one session.
func isSave(cmd bson.Raw) bool {
	name := cmd.Index(0).Key()
	return name == "update"
}

// saveUpdate returns the update of the first save recorded in l.
func saveUpdate(t *testing.T, l *commandLog) bson.Raw {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.commands {
		switch {
		case !isSave(c):
		case c.Index(0).Key() == "update":
			return c.Lookup("updates").Array().Index(0).Document().Lookup("u").Document()
		default:
			return c.Lookup("update").Document()
		}
	}
	t.Fatal("no save recorded")
	return nil
}

// explainFind returns the server's explain of a find with filter on coll.
func explainFind(t *testing.T, coll *mongo.Collection, filter any) bson.Raw {
	t.Helper()
	var res bson.Raw
	err := coll.Database().RunCommand(context.Background(), bson.D{
		{Key: "explain", Value: bson.D{{Key: "find", Value: coll.Name()}, {Key: "filter", Value: filter}}},
	}).Decode(&res)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	return res
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
		switch name := elems[0].Key(); name {
		case "find":
			out[name] = append(out[name], c.Lookup("filter").Document())
		case "findAndModify":
			out[name] = append(out[name], c.Lookup("query").Document())
		case "update", "delete":
			stmts, _ := c.Lookup(name + "s").Array().Values()
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

// responseCookie returns the cookie called name that h sets, or nil.
func responseCookie(h http.Header, name string) *http.Cookie {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// sessionHandler returns the middleware of store for testSessionName, with
// the error handler onError (nil for the default), wrapping fn, which gets
// the session the middleware loaded (store.Get returns it: gorilla's
// registry holds it for the request; its error, if any, is the
// middleware's, which the middleware has dealt with).
func sessionHandler(t testing.TB, store *Store, onError func(http.ResponseWriter, *http.Request, error), fn func(w http.ResponseWriter, r *http.Request, s *sessions.Session)) http.Handler {
	return store.Middleware(testSessionName, onError)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := store.Get(r, testSessionName)
		if s == nil {
			t.Errorf("store.Get(r, %q) = nil inside the middleware", testSessionName)
			http.Error(w, "no session", http.StatusTeapot)
			return
		}
		fn(w, r, s)
	}))
}

// strictSessionHandler is sessionHandler with the default error handler,
// failing the test if the middleware's session came with an error.
func strictSessionHandler(t testing.TB, store *Store, fn func(w http.ResponseWriter, r *http.Request, s *sessions.Session)) http.Handler {
	return sessionHandler(t, store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if _, err := store.Get(r, testSessionName); err != nil {
			t.Errorf("Get inside the middleware: %v", err)
		}
		fn(w, r, s)
	})
}

// signedCookie returns a validly signed cookie value for a fresh session ID
// of the store.
func signedCookie(t testing.TB, s *Store) string {
	t.Helper()
	v, err := s.cookies.encode(testSessionName, freshToken())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// storeOn returns a store with cfg on coll (a second application instance,
// for example), closed when the test ends. Without keys, testHashKey is
// used; without a logger, one that writes to a discarded buffer.
func storeOn(t testing.TB, coll *mongo.Collection, cfg Config, keyPairs ...[]byte) *Store {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(&syncBuffer{})
	}
	if len(keyPairs) == 0 {
		keyPairs = [][]byte{testHashKey}
	}
	store, err := NewStore(context.Background(), coll, cfg, keyPairs...)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// unreachableStore returns a store (ExpiryNone) whose client never reaches
// a server, and the log of the commands that client starts.
func unreachableStore(t testing.TB, cfg Config) (*Store, *commandLog) {
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
	return storeOn(t, client.Database(testDatabase).Collection("unreachable"), cfg), cmds
}

// unusableCookie is a cookie value the store must refuse.
type unusableCookie struct{ name, value string }

// unusableCookies returns one cookie value of each kind the store must
// refuse, made from valid, a cookie value the store s wrote.
func unusableCookies(tb testing.TB, s *Store, valid string) []unusableCookie {
	tb.Helper()
	encode := func(name string, value []byte, codecs ...securecookie.Codec) string {
		v, err := securecookie.EncodeMulti(name, value, codecs...)
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
	foreign := securecookie.New(otherHashKey, nil).SetSerializer(securecookie.NopEncoder{})
	return []unusableCookie{
		{"tampered", flipCookie(valid)},
		{"truncated", valid[:len(valid)-5]},
		{"empty", ""},
		{"garbage", "%%%not base64%%%"},
		{"huge", strings.Repeat("A", 5000)},
		{"foreign key", encode(testSessionName, []byte(freshToken()), foreign)},
		{"malformed ID", encode(testSessionName, []byte("not-a-session-id"), s.cookies.keys[0].codec)},
		{"signed for another name", encode("other", []byte(freshToken()), s.cookies.keys[0].codec)},
	}
}

// flipCookie returns a cookie value with one character in its middle
// changed to another valid base64 character, so that it still decodes but
// fails its MAC.
func flipCookie(v string) string {
	b := []byte(v)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// sameTimes reports whether a and b are the same instants.
func sameTimes(a, b SessionTimes) bool {
	return a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

// hookedClient connects to the test server with a command monitor that
// calls before with the name of each command the client starts, just
// before it is sent.
func hookedClient(t *testing.T, before func(name string)) *mongo.Client {
	t.Helper()
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) { before(e.CommandName) }}
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")).SetTimeout(30 * time.Second).SetMonitor(monitor))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

// isWrite reports whether a command named name writes documents.
func isWrite(name string) bool {
	switch name {
	case "insert", "update", "delete", "findAndModify":
		return true
	}
	return false
}

// docID returns the _id of the document of the session whose token
// (session.ID) is token: its chain ID.
func docID(token string) string {
	chain, _, _ := splitToken(token)
	return chain
}

// freshToken returns a new token of a new chain.
func freshToken() string {
	token, _ := newToken("")
	return token
}

// newSaving returns the save of a new session holding values, as Save
// prepares it at now, for tests that store documents directly.
func newSaving(tb testing.TB, store *Store, values map[any]any, now time.Time) *saving {
	data, err := store.cfg.Codec.Encode(values)
	if err != nil {
		tb.Fatal(err)
	}
	sv := &saving{session: &sessions.Session{Values: values, Options: store.newOptions()}, data: data, now: now}
	sv.token, sv.sid = newToken("")
	sv.chain = docID(sv.token)
	return sv
}
