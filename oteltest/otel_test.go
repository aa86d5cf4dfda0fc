package oteltest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/readmecheck"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestSessionLife: each step of a session's life is one span with its
// outcome, and one point of mongostore.operation.duration.
func TestSessionLife(t *testing.T) {
	r := newRig(t, mongostore.Config{TouchInterval: time.Minute})
	ctx := context.Background()
	r.secret("a stored value, never recorded", "owner-4b1d0c", "device label 77")

	req := r.request(ctx)
	s := r.get(t, req)
	r.expect(t, "load", "new", "")
	s.Values["secret"] = "a stored value, never recorded"
	mongostore.SetOwner(s, "owner-4b1d0c", "device label 77")
	cookie := r.save(t, req, s)
	r.sessionSecrets(s)
	saved := r.expect(t, "save", "inserted", "")
	if size := attrs(saved)["mongostore.session.size"].AsInt64(); size < 30 {
		t.Errorf("save: size %d", size)
	}

	req = r.request(ctx, cookie)
	s = r.get(t, req)
	if size := attrs(r.expect(t, "load", "loaded", ""))["mongostore.session.size"].AsInt64(); s.IsNew || size < 30 {
		t.Errorf("load: new %v, size %d", s.IsNew, size)
	}
	s.Values["n"] = 1
	r.save(t, req, s)
	if retries := attrs(r.expect(t, "save", "updated", ""))["mongostore.save.retries"]; retries.AsInt64() != 0 {
		t.Errorf("save: retries %v", retries.Emit())
	}

	// The middleware slides an unchanged session's expiry: a touch.
	r.skew.Add(int64(2 * time.Minute))
	mw := r.store.Middleware("session", nil)(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = r.store.Get(req, "session")
	}))
	w := httptest.NewRecorder()
	mw.ServeHTTP(w, r.request(ctx, cookie))
	r.cookie(t, w)
	r.expect(t, "save", "touched", "")

	req = r.request(ctx, cookie)
	s = r.get(t, req)
	w = httptest.NewRecorder()
	if err := r.store.RegenerateID(req, w, s); err != nil {
		t.Fatal(err)
	}
	regenerated := r.cookie(t, w)
	r.sessionSecrets(s)
	r.expect(t, "regenerate", "regenerated", "")

	// The old cookie names a document no longer there.
	r.get(t, r.request(ctx, cookie))
	r.expect(t, "load", "expired", "")

	bad := *regenerated
	bad.Value = strings.ToUpper(bad.Value[:10]) + bad.Value[10:]
	if _, err := r.store.Get(r.request(ctx, &bad), "session"); !errors.Is(err, mongostore.ErrInvalidCookie) {
		t.Fatalf("Get with a bad cookie: %v", err)
	}
	r.expect(t, "load", "invalid_cookie", "invalid_cookie")

	req = r.request(ctx, regenerated)
	s = r.get(t, req)
	s.Options.MaxAge = -1
	r.save(t, req, s)
	if _, ok := attrs(r.expect(t, "save", "ended", ""))["mongostore.session.size"]; ok {
		t.Error("a logout's span has a size: it saved no values")
	}

	req = r.request(ctx)
	s = r.get(t, req)
	s.Values["k"] = "v"
	cookie = r.save(t, req, s)
	r.sessionSecrets(s)
	req = r.request(ctx, cookie)
	if err := r.store.Restart(req, r.get(t, req)); err != nil {
		t.Fatal(err)
	}
	r.expect(t, "end", "ended", "")

	metrics, units := r.metrics(t)
	for _, k := range []string{opKey("load", "new"), opKey("load", "loaded"), opKey("load", "expired"),
		opKey("load", "invalid_cookie"), opKey("save", "inserted"), opKey("save", "updated"), opKey("save", "touched"),
		opKey("save", "ended"), opKey("regenerate", "regenerated"), opKey("end", "ended")} {
		if metrics["mongostore.operation.duration"][k] < 1 {
			t.Errorf("mongostore.operation.duration has no point %s: %v", k, metrics["mongostore.operation.duration"])
		}
	}
	if got := metrics["mongostore.session.size"][opKey("save", "inserted")]; got != 2 {
		t.Errorf("mongostore.session.size of inserts: %v points, want 2: %v", got, metrics["mongostore.session.size"])
	}
	if got := metrics["mongostore.session.size"][opKey("save", "ended")]; got != 0 {
		t.Errorf("mongostore.session.size of logouts: %v points, want none: a logout saves no values", got)
	}
	if got := metrics["mongostore.errors"]["error.type=invalid_cookie,mongostore.operation=load"]; got != 1 {
		t.Errorf("mongostore.errors: %v", metrics["mongostore.errors"])
	}
	for name, unit := range map[string]string{"mongostore.operation.duration": "s", "mongostore.session.size": "By",
		"mongostore.errors": "{error}"} {
		if units[name] != unit {
			t.Errorf("%s: unit %q, want %q", name, units[name], unit)
		}
	}
}

// TestOwners: listing an owner's sessions and ending them.
func TestOwners(t *testing.T) {
	r := newRig(t, mongostore.Config{})
	ctx := context.Background()
	r.secret("owner-of-three", "device label 88")
	var current *sessions.Session
	for range 3 {
		req := r.request(ctx)
		current = r.get(t, req)
		mongostore.SetOwner(current, "owner-of-three", "device label 88")
		r.save(t, req, current)
		r.sessionSecrets(current)
	}
	list, err := r.store.ListSessions(ctx, "owner-of-three", current)
	if err != nil || len(list) != 3 {
		t.Fatalf("ListSessions: %d, %v", len(list), err)
	}
	if n := attrs(r.expect(t, "list_sessions", "ok", ""))["mongostore.session.count"].AsInt64(); n != 3 {
		t.Errorf("list_sessions: count %d", n)
	}
	var other string
	for _, o := range list {
		r.secret(o.Handle)
		if !o.Current {
			other = o.Handle
		}
	}
	if _, ended, err := r.store.EndSession(ctx, "owner-of-three", other, current); !ended || err != nil {
		t.Fatalf("EndSession: %v, %v", ended, err)
	}
	r.expect(t, "end_session", "ended", "")
	if _, ended, err := r.store.EndSession(ctx, "owner-of-three", other, current); ended || err != nil {
		t.Fatalf("EndSession again: %v, %v", ended, err)
	}
	r.expect(t, "end_session", "not_ended", "")
	if n, err := r.store.EndOtherSessions(ctx, "owner-of-three", current); n != 1 || err != nil {
		t.Fatalf("EndOtherSessions: %d, %v", n, err)
	}
	if n := attrs(r.expect(t, "end_other_sessions", "ended", ""))["mongostore.session.count"].AsInt64(); n != 1 {
		t.Errorf("end_other_sessions: count %d", n)
	}
	// Endings that find nothing to end say so.
	if n, err := r.store.EndOtherSessions(ctx, "owner-of-three", current); n != 0 || err != nil {
		t.Fatalf("EndOtherSessions again: %d, %v", n, err)
	}
	r.expect(t, "end_other_sessions", "not_ended", "")
	req := r.request(ctx)
	if err := r.store.Restart(req, r.get(t, req)); err != nil { // a new session: nothing stored
		t.Fatal(err)
	}
	r.expect(t, "end", "not_ended", "")
	req = r.request(ctx)
	gone := r.get(t, req) // a logout of a session not stored: nothing to delete
	gone.Options.MaxAge = -1
	r.save(t, req, gone)
	r.expect(t, "save", "not_ended", "")
	metrics, _ := r.metrics(t)
	for _, k := range []string{opKey("list_sessions", "ok"), opKey("end_session", "ended"), opKey("end_session", "not_ended"),
		opKey("end_other_sessions", "ended"), opKey("end_other_sessions", "not_ended"), opKey("end", "not_ended"), opKey("save", "not_ended")} {
		if metrics["mongostore.operation.duration"][k] != 1 {
			t.Errorf("mongostore.operation.duration: no single point %s: %v", k, metrics["mongostore.operation.duration"])
		}
	}
}

// TestGCSweep: the GC goroutine's sweeps and DeleteExpired are spans and
// points of operation gc_sweep; what they delete counts in
// mongostore.gc.deleted.
func TestGCSweep(t *testing.T) {
	r := newRig(t, mongostore.Config{Expiry: mongostore.ExpiryGC, GCInterval: 100 * time.Millisecond})
	ctx := context.Background()
	for range 2 {
		req := r.request(ctx)
		s := r.get(t, req)
		s.Values["k"] = "expiring value"
		r.save(t, req, s)
		r.sessionSecrets(s)
	}
	r.skew.Add(int64(48 * time.Hour))
	deadline := time.Now().Add(30 * time.Second)
	for swept := false; !swept; {
		if time.Now().After(deadline) {
			t.Fatal("no GC sweep deleted the expired sessions")
		}
		time.Sleep(50 * time.Millisecond)
		for _, s := range r.spans.Ended() {
			swept = swept || (s.Name() == "mongostore.gc_sweep" && attrs(s)["mongostore.session.count"].AsInt64() > 0)
		}
	}
	if n, err := r.store.DeleteExpired(ctx); n != 0 || err != nil {
		t.Fatalf("DeleteExpired: %d, %v", n, err)
	}
	if s := r.expect(t, "gc_sweep", "ok", ""); attrs(s)["mongostore.session.count"].AsInt64() != 0 || s.Parent().IsValid() {
		t.Errorf("DeleteExpired's span: %v, parent %v", s.Attributes(), s.Parent())
	}
	metrics, units := r.metrics(t)
	if got := metrics["mongostore.gc.deleted"][""]; got != 2 || units["mongostore.gc.deleted"] != "{session}" {
		t.Errorf("mongostore.gc.deleted: %v %s, want 2 {session}", got, units["mongostore.gc.deleted"])
	}
	if metrics["mongostore.operation.duration"][opKey("gc_sweep", "ok")] < 2 {
		t.Errorf("mongostore.operation.duration: %v", metrics["mongostore.operation.duration"])
	}
}

// TestConcurrentSaves: a save that met another merges (merged, a retry,
// the Debug log line the benchmarks count); one of a session ended
// meanwhile is gone, an error of kind session_gone.
func TestConcurrentSaves(t *testing.T) {
	r := newRig(t, mongostore.Config{})
	ctx := context.Background()
	req := r.request(ctx)
	s := r.get(t, req)
	s.Values["base"] = "base value"
	cookie := r.save(t, req, s)
	r.sessionSecrets(s)

	reqA, reqB := r.request(ctx, cookie), r.request(ctx, cookie)
	a, b := r.get(t, reqA), r.get(t, reqB)
	a.Values["a"] = "from A"
	b.Values["b"] = "from B"
	r.save(t, reqA, a)
	r.save(t, reqB, b)
	if retries := attrs(r.expect(t, "save", "merged", ""))["mongostore.save.retries"].AsInt64(); retries < 1 {
		t.Errorf("merged save: retries %d", retries)
	}
	if logs := r.logs.String(); !strings.Contains(logs, `"msg":"mongostore: merged concurrent changes"`) ||
		!strings.Contains(logs, `"retries":1`) {
		t.Errorf("no merge record with retries 1 in the logs:\n%s", logs)
	}

	reqC, reqD := r.request(ctx, cookie), r.request(ctx, cookie)
	c, d := r.get(t, reqC), r.get(t, reqD)
	d.Options.MaxAge = -1
	r.save(t, reqD, d)
	c.Values["c"] = "too late"
	if err := c.Save(reqC, httptest.NewRecorder()); !errors.Is(err, mongostore.ErrSessionGone) {
		t.Fatalf("Save after a logout: %v", err)
	}
	r.expect(t, "save", "gone", "session_gone")

	// A save that meets another request's regeneration gives up at its
	// first conflict: a conflict all the same.
	req = r.request(ctx)
	s = r.get(t, req)
	s.Values["base"] = "again"
	cookie = r.save(t, req, s)
	r.sessionSecrets(s)
	reqE, reqF := r.request(ctx, cookie), r.request(ctx, cookie)
	e, f := r.get(t, reqE), r.get(t, reqF)
	if err := r.store.RegenerateID(reqF, httptest.NewRecorder(), f); err != nil {
		t.Fatal(err)
	}
	r.sessionSecrets(f)
	e.Values["e"] = "too late"
	if err := e.Save(reqE, httptest.NewRecorder()); !errors.Is(err, mongostore.ErrSessionGone) {
		t.Fatalf("Save after a regeneration: %v", err)
	}

	metrics, units := r.metrics(t)
	if got := metrics["mongostore.save.conflicts"]["mongostore.operation=save"]; got != 2 {
		t.Errorf("mongostore.save.conflicts: %v", metrics["mongostore.save.conflicts"])
	}
	if got := metrics["mongostore.save.retries"]["mongostore.operation=save"]; got < 1 {
		t.Errorf("mongostore.save.retries: %v", metrics["mongostore.save.retries"])
	}
	if got := metrics["mongostore.errors"]["error.type=session_gone,mongostore.operation=save"]; got != 2 {
		t.Errorf("mongostore.errors: %v", metrics["mongostore.errors"])
	}
	if got := metrics["mongostore.operation.duration"][opKey("save", "merged")]; got != 1 {
		t.Errorf("mongostore.operation.duration: %v", metrics["mongostore.operation.duration"])
	}
	if units["mongostore.save.conflicts"] != "{save}" || units["mongostore.save.retries"] != "{write}" {
		t.Errorf("units: %v", units)
	}
}

// TestParentChild: under the middleware, the load and the save are
// children of the request's span, and the driver's commands (commandSpans)
// children of theirs.
func TestParentChild(t *testing.T) {
	r := newRig(t, mongostore.Config{})
	handler := r.store.Middleware("session", nil)(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s, _ := r.store.Get(req, "session")
		n, _ := s.Values["n"].(int)
		s.Values["n"] = n + 1
	}))
	var cookie *http.Cookie
	for i := range 2 {
		ctx, request := r.tp.Tracer("test").Start(context.Background(), "GET /")
		req := r.request(ctx)
		if cookie != nil {
			req = r.request(ctx, cookie)
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		request.End()
		if i == 0 {
			cookie = r.cookie(t, w)
		}
		load, save := r.expect(t, "load", []string{"new", "loaded"}[i], ""), r.expect(t, "save", []string{"inserted", "updated"}[i], "")
		for _, s := range []sdktrace.ReadOnlySpan{load, save} {
			if s.Parent().SpanID() != request.SpanContext().SpanID() || s.SpanContext().TraceID() != request.SpanContext().TraceID() {
				t.Errorf("request %d: span %s is not a child of the request's", i, s.Name())
			}
		}
		commands := map[trace.SpanID][]string{}
		for _, s := range r.spans.Ended() {
			if s.InstrumentationScope().Name == "go.mongodb.org/mongo-driver/v2" {
				commands[s.Parent().SpanID()] = append(commands[s.Parent().SpanID()], s.Name())
			}
		}
		if i == 1 && len(commands[load.SpanContext().SpanID()]) != 1 {
			t.Errorf("request %d: commands under the load: %v", i, commands[load.SpanContext().SpanID()])
		}
		if len(commands[save.SpanContext().SpanID()]) == 0 {
			t.Errorf("request %d: no command under the save", i)
		}
	}
	r.sessionSecrets(&sessions.Session{ID: sessionID(t, r, cookie)})
}

// sessionID returns the ID of the session cookie names.
func sessionID(t *testing.T, r *rig, cookie *http.Cookie) string {
	t.Helper()
	s := r.get(t, r.request(context.Background(), cookie))
	if s.IsNew {
		t.Fatal("the cookie's session is gone")
	}
	return s.ID
}

// TestGlobalProviders: with no providers in Config, the store uses the
// global ones, which hand over to providers installed after NewStore.
func TestGlobalProviders(t *testing.T) {
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	// ExpiryNone: NewStore sends nothing, and a load without a cookie neither.
	store, err := mongostore.NewStore(context.Background(), client.Database(testDatabase).Collection("unused"),
		mongostore.Config{Expiry: mongostore.ExpiryNone}, testHashKey)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans)))
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader)))
	if _, err := store.Get(r.request(context.Background()), "session"); err != nil {
		t.Fatal(err)
	}
	if ended := r.spans.Ended(); len(ended) != 1 || ended[0].Name() != "mongostore.load" {
		t.Errorf("global provider: %d spans", len(ended))
	}
	if metrics, _ := r.metrics(t); metrics["mongostore.operation.duration"][opKey("load", "new")] != 1 {
		t.Errorf("global provider: metrics %v", metrics)
	}
}

// TestReadmeCommandSpans: docs/observability.md, the README's page on
// telemetry, shows the command monitor these tests use.
func TestReadmeCommandSpans(t *testing.T) {
	page, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("main_test.go")
	if err != nil {
		t.Fatal(err)
	}
	shown := readmecheck.Between(t, string(page), "```go\n", "```")
	code := readmecheck.Between(t, string(self), "// command spans begin\n\n", "\n// command spans end")
	if !strings.Contains(shown, code) {
		t.Fatalf("docs/observability.md lacks commandSpans as in main_test.go:\n%s", code)
	}
}

// TestGCSweepsAreRoots: the GC goroutine's sweeps start traces of their
// own, even when NewStore ran under a span (an application's start-up).
func TestGCSweepsAreRoots(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")).SetTimeout(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	coll := client.Database(testDatabase).Collection(fmt.Sprintf("gc_roots_%d", os.Getpid()))
	t.Cleanup(func() { _ = coll.Drop(context.Background()); _ = client.Disconnect(context.Background()) })
	ctx, startup := tp.Tracer("app").Start(context.Background(), "startup")
	store, err := mongostore.NewStore(ctx, coll, mongostore.Config{TracerProvider: tp, Expiry: mongostore.ExpiryGC,
		GCInterval: 100 * time.Millisecond}, testHashKey)
	startup.End()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		i := slices.IndexFunc(spans.Ended(), func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "mongostore.gc_sweep" })
		if i >= 0 {
			if s := spans.Ended()[i]; s.Parent().IsValid() {
				t.Fatalf("a sweep's span has the parent %v (the start-up's %v)", s.Parent().SpanID(), startup.SpanContext().SpanID())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no GC sweep within 30s")
		}
	}
}

// panickyCodec is JSONCodec, but its Decode panics while armed: a bug in a
// custom codec.
type panickyCodec struct {
	mongostore.JSONCodec
	armed atomic.Bool
}

func (c *panickyCodec) Decode(b []byte) (map[any]any, error) {
	if c.armed.Load() {
		panic("codec bug")
	}
	return c.JSONCodec.Decode(b)
}

// TestPanickedLoad: a load a panicking codec cuts short still ends its
// span, an error of type _OTHER, and counts in mongostore.errors.
func TestPanickedLoad(t *testing.T) {
	codec := &panickyCodec{}
	r := newRig(t, mongostore.Config{Codec: codec})
	ctx := context.Background()
	req := r.request(ctx)
	s := r.get(t, req)
	s.Values["k"] = "v"
	cookie := r.save(t, req, s)
	codec.armed.Store(true)
	panicked := func() (v any) {
		defer func() { v = recover() }()
		_, _ = r.store.Get(r.request(ctx, cookie), "session")
		return nil
	}()
	if panicked != "codec bug" {
		t.Fatalf("Get panicked with %v, want the codec's panic", panicked)
	}
	r.expect(t, "load", "error", "_OTHER")
	metrics, _ := r.metrics(t)
	if got := metrics["mongostore.errors"]["error.type=_OTHER,mongostore.operation=load"]; got != 1 {
		t.Errorf("mongostore.errors: %v, want one _OTHER of a load", metrics["mongostore.errors"])
	}
}

// TestPanickedOperations: every operation a panicking codec cuts short
// ends its span as an error of type _OTHER, as a load does: a sweep that
// reports expiries, a listing, an ending by handle (before: a success) and
// an ending everywhere (before: no span).
func TestPanickedOperations(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		op  string
		run func(r *rig, req *http.Request, s *sessions.Session)
	}{
		{"gc_sweep", func(r *rig, _ *http.Request, _ *sessions.Session) {
			r.skew.Add(int64(48 * time.Hour))
			_, _ = r.store.DeleteExpired(ctx)
		}},
		{"list_sessions", func(r *rig, _ *http.Request, _ *sessions.Session) { _, _ = r.store.ListSessions(ctx, "ada", nil) }},
		{"end_session", func(r *rig, _ *http.Request, _ *sessions.Session) {
			_, _, _ = r.store.EndSession(ctx, "ada", "a-handle", nil)
		}},
		{"end_other_sessions", func(r *rig, _ *http.Request, _ *sessions.Session) { _, _ = r.store.EndOtherSessions(ctx, "ada", nil) }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			codec := &panickyCodec{}
			r := newRig(t, mongostore.Config{Codec: codec, Expiry: mongostore.ExpiryNone, OnEvent: func(context.Context, mongostore.Event) {}})
			req := r.request(ctx)
			s := r.get(t, req)
			mongostore.SetOwner(s, "ada", "laptop")
			r.save(t, req, s)
			r.sessionSecrets(s)
			codec.armed.Store(true)
			panicked := func() (v any) {
				defer func() { v = recover() }()
				tc.run(r, req, s)
				return nil
			}()
			if panicked != "codec bug" {
				t.Fatalf("%s panicked with %v, want the codec's panic", tc.op, panicked)
			}
			r.expect(t, tc.op, "error", "_OTHER")
		})
	}
}
