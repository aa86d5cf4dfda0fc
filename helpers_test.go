package mongostore

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
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
