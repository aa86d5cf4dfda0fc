package mongostore

import (
	"context"
	"encoding/gob"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The database benchmarks come in pairs of sub-benchmarks: "store" measures
// the store, "driver" the bare driver sending the same commands on the same
// document shape (find {_id}; findAndModify {_id} with the store's $set of
// v, data, mac, updatedAt and expiresAt, returning the pre-image), built by
// the store's own idFilter and updateDocument so that they cannot drift,
// with data and mac computed once (the store's CompactCodec bytes in their
// envelope, and a MAC of the same size): the store's own cost, encoding
// and MAC included, is the difference. Run them with
//
//	go test -run='^$' -bench . -benchtime=2000x ./
//
// Their client has no command monitor, whose recording would add to both.

// benchValues returns the session values of the benchmarks.
func benchValues() map[any]any {
	return map[any]any{
		"userID":  "64b7f0c2e4b0a1a2b3c4d5e6",
		"name":    "Alice Example",
		"loginAt": time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		"roles":   []string{"admin", "editor", "viewer"},
		"counter": 0,
	}
}

var benchGobOnce sync.Once

// benchRegisterGob registers time.Time with gob if no test file did, so that
// benchValues can be encoded. (Benchmarks run after the tests, so this cannot
// change what a test sees.)
func benchRegisterGob() {
	benchGobOnce.Do(func() {
		if _, err := (GobCodec{}).Encode(map[any]any{"t": time.Time{}}); err != nil {
			gob.Register(time.Time{})
		}
	})
}

// benchWriter is a ResponseWriter that keeps headers and discards the body.
type benchWriter struct{ h http.Header }

func newBenchWriter() *benchWriter                     { return &benchWriter{h: make(http.Header)} }
func (w *benchWriter) Header() http.Header             { return w.h }
func (w *benchWriter) Write(p []byte) (int, error)     { return len(p), nil }
func (w *benchWriter) WriteHeader(int)                 {}
func (w *benchWriter) reset()                          { clear(w.h) }
func (w *benchWriter) cookie(name string) *http.Cookie { return mwSetCookie(w.h, name) }

// benchEnv is a store holding one session with benchValues.
type benchEnv struct {
	store  *Store
	coll   *mongo.Collection
	cookie string    // the session's cookie value
	docID  string    // its document's _id
	data   [2][]byte // the stored data of benchValues with counter 1 and 2, for the driver
	mac    [2][]byte // a MAC of each, for the driver
	n      int       // driver updates so far
	base   *http.Request
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	benchRegisterGob()
	client := testClient(b, nil)
	coll := testCollection(b, client)
	store, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone, Logger: slog.New(slog.DiscardHandler)}, testHashKey)
	if err != nil {
		b.Fatalf("NewStore: %v", err)
	}
	b.Cleanup(func() { _ = store.Close() })

	r := httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
	s, err := store.New(r, testSessionName)
	if err != nil {
		b.Fatal(err)
	}
	maps.Copy(s.Values, benchValues())
	w := newBenchWriter()
	if err := store.Save(r, w, s); err != nil {
		b.Fatalf("Save: %v", err)
	}
	c := w.cookie(testSessionName)
	if c == nil {
		b.Fatal("Save set no cookie")
	}
	e := &benchEnv{store: store, coll: coll, cookie: c.Value, docID: store.hasher.docID(s.ID)}
	now := time.Now()
	for i := range e.data {
		v := benchValues()
		v["counter"] = i + 1
		encoded, err := store.cfg.Codec.Encode(v)
		if err != nil {
			b.Fatal(err)
		}
		f := sealedFields{docID: e.docID, createdAt: now, updatedAt: now, expiresAt: now, data: store.sealer.wrap(e.docID, encoded)}
		e.mac[i], e.data[i] = store.sealer.seal(&f), f.data
	}
	e.base = httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
	e.base.AddCookie(&http.Cookie{Name: testSessionName, Value: c.Value})
	return e
}

// request returns a fresh request carrying the session cookie (a shallow
// copy of one built once, so that building it costs little).
func (e *benchEnv) request() *http.Request { return e.base.WithContext(context.Background()) }

// load loads the session through the store.
func (e *benchEnv) load(b *testing.B) (*http.Request, *sessions.Session) {
	r := e.request()
	s, err := e.store.New(r, testSessionName)
	if err != nil || s.IsNew {
		b.Fatalf("New: IsNew=%v, %v", s.IsNew, err)
	}
	return r, s
}

// driverFind is the store's load round trip with the bare driver: find
// {_id}, the store's filter, and take the data out of the raw reply.
func (e *benchEnv) driverFind(b *testing.B, ctx context.Context) {
	raw, err := e.coll.FindOne(ctx, idFilter(e.docID)).Raw()
	if err != nil {
		b.Fatalf("FindOne: %v", err)
	}
	if _, data, ok := raw.Lookup("data").BinaryOK(); !ok || len(data) == 0 {
		b.Fatal("document has no data")
	}
}

// driverUpdate is the store's save round trip with the bare driver:
// findAndModify {_id} with the store's update (updateDocument: $set of v,
// data, mac, updatedAt, expiresAt), no upsert, returning the pre-image. It
// writes data and MAC computed once, alternating between two counter
// values so that every update changes the data as the store benchmarks
// do: the store encodes, seals and MACs the values on every save, and that
// is part of the store's cost.
func (e *benchEnv) driverUpdate(b *testing.B, ctx context.Context) {
	now := time.Now()
	e.n++
	f := sealedFields{version: documentVersion, docID: e.docID, updatedAt: now, expiresAt: now.Add(24 * time.Hour), data: e.data[e.n%2]}
	raw, err := e.coll.FindOneAndUpdate(ctx, idFilter(e.docID), updateDocument(f, e.mac[e.n%2], "", false),
		options.FindOneAndUpdate().SetReturnDocument(options.Before)).Raw()
	if err != nil || len(raw) == 0 {
		b.Fatalf("FindOneAndUpdate: %v", err)
	}
}

// BenchmarkLoad loads a stored session: store.New with a valid cookie (one
// find) against FindOne {_id}.
func BenchmarkLoad(b *testing.B) {
	b.Run("store", func(b *testing.B) {
		e := newBenchEnv(b)
		b.ReportAllocs()
		for b.Loop() {
			e.load(b)
		}
	})
	b.Run("driver", func(b *testing.B) {
		e := newBenchEnv(b)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			e.driverFind(b, ctx)
		}
	})
}

// BenchmarkSave saves a loaded session whose values changed (one
// findAndModify) against FindOneAndUpdate with the same update.
func BenchmarkSave(b *testing.B) {
	b.Run("store", func(b *testing.B) {
		e := newBenchEnv(b)
		r, s := e.load(b)
		w := newBenchWriter()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			s.Values["counter"] = i
			w.reset()
			if err := e.store.Save(r, w, s); err != nil {
				b.Fatalf("Save: %v", err)
			}
		}
	})
	b.Run("driver", func(b *testing.B) {
		e := newBenchEnv(b)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			e.driverUpdate(b, ctx)
		}
	})
}

// BenchmarkLoadSave is a request that changes its session: New, change,
// Save (find and findAndModify) against FindOne and FindOneAndUpdate.
func BenchmarkLoadSave(b *testing.B) {
	b.Run("store", func(b *testing.B) {
		e := newBenchEnv(b)
		w := newBenchWriter()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			r, s := e.load(b)
			s.Values["counter"] = i
			w.reset()
			if err := e.store.Save(r, w, s); err != nil {
				b.Fatalf("Save: %v", err)
			}
		}
	})
	b.Run("driver", func(b *testing.B) {
		e := newBenchEnv(b)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			e.driverFind(b, ctx)
			e.driverUpdate(b, ctx)
		}
	})
}

// BenchmarkMiddleware is a whole request through Store.Middleware: "read"
// leaves the session unchanged (one find), "write" changes it (find and
// update).
func BenchmarkMiddleware(b *testing.B) {
	for _, write := range []bool{false, true} {
		name := "read"
		if write {
			name = "write"
		}
		b.Run(name, func(b *testing.B) {
			e := newBenchEnv(b)
			i := 0
			h := e.store.Middleware(testSessionName, MiddlewareOptions{TouchInterval: -1})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s := Session(r, testSessionName)
				if s.IsNew {
					b.Fatal("session not loaded")
				}
				if write {
					i++
					s.Values["counter"] = i
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			w := newBenchWriter()
			b.ReportAllocs()
			for b.Loop() {
				w.reset()
				h.ServeHTTP(w, e.request())
			}
		})
	}
}

// BenchmarkCookieDecode verifies a session cookie, without a database.
func BenchmarkCookieDecode(b *testing.B) {
	for _, tc := range []struct {
		name string
		keys [][]byte
	}{
		{"signed", [][]byte{testHashKey}},
		{"encrypted", [][]byte{testHashKey, testBlockKey}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			codecs, _, err := newCookieCodecs(tc.keys)
			if err != nil {
				b.Fatal(err)
			}
			s := &Store{codecs: codecs}
			id := newSessionID()
			value, err := securecookie.EncodeMulti(testSessionName, []byte(id), codecs...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if got, _, err := s.decodeCookie(testSessionName, value); err != nil || got != id {
					b.Fatalf("decodeCookie = %q, %v", got, err)
				}
			}
		})
	}
}

// BenchmarkCompactCodec encodes and decodes the benchmark values with the
// default codec, without a database.
func BenchmarkCompactCodec(b *testing.B) {
	benchCodec(b, CompactCodec{})
}

// BenchmarkGobCodec does the same with GobCodec (gorilla's stores' codec,
// and the default before format version 3), for comparison.
func BenchmarkGobCodec(b *testing.B) {
	benchCodec(b, GobCodec{})
}

// BenchmarkJSONCodec does the same with JSONCodec, for comparison.
func BenchmarkJSONCodec(b *testing.B) {
	benchCodec(b, JSONCodec{})
}

func benchCodec(b *testing.B, c Codec) {
	benchRegisterGob()
	values := benchValues()
	data, err := c.Encode(values)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Encode(values); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
