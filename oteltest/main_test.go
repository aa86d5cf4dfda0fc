package oteltest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/testserver"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The tests run against the server in MONGODB_URI. When it is not set,
// TestMain builds and starts the embedded FerretDB server of the embeddb
// module (../embeddb) on a free loopback port.

const testDatabase = "mongostore_oteltest"

var testHashKey = bytes.Repeat([]byte{0x22}, 32)

func TestMain(m *testing.M) { testserver.Main(m, "oteltest") }

// rig is a store whose spans, metrics and logs a test reads, with the
// driver's command spans (commandSpans) under the store's.
type rig struct {
	store   *mongostore.Store
	tp      *sdktrace.TracerProvider
	spans   *tracetest.SpanRecorder
	reader  *sdkmetric.ManualReader
	logs    *syncBuffer
	skew    atomic.Int64 // how far the store's clock is ahead, in nanoseconds
	mu      sync.Mutex
	secrets []string // what no span, metric or log may hold
}

// newRig returns a rig of a store with cfg on a collection of its own.
// When the test ends, it checks that none of the secrets the test noted
// appears in the spans, the metrics or the logs.
func newRig(t *testing.T, cfg mongostore.Config) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), logs: &syncBuffer{}}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	cfg.TracerProvider, cfg.MeterProvider = r.tp, mp
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) }
	cfg.Logger = slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")).SetTimeout(30 * time.Second).
		SetMonitor(commandSpans(r.tp)))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	name := fmt.Sprintf("%s_%d_%d", regexp.MustCompile(`\W+`).ReplaceAllString(t.Name(), "_"), os.Getpid(), seq.Add(1))
	coll := client.Database(testDatabase).Collection(name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.store, err = mongostore.NewStore(ctx, coll, cfg, testHashKey); err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Cleanup(func() {
		_ = r.store.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = coll.Drop(ctx)
		_ = client.Disconnect(ctx)
		r.checkSecrets(t)
	})
	return r
}

var seq atomic.Int64

// secret notes strings that must appear nowhere.
func (r *rig) secret(s ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range s {
		if len(v) < 8 {
			panic("secret too short to search for: " + v)
		}
		r.secrets = append(r.secrets, v)
	}
}

// sessionSecrets notes a stored session's token, its two parts (the
// chain, its document's _id; the secret) and the hash of the secret that
// the document holds (format 3), and the hash of the whole token (the _id
// of formats 1 and 2).
func (r *rig) sessionSecrets(s *sessions.Session) {
	chain, secret, _ := strings.Cut(s.ID, ".")
	sid, id := sha256.Sum256([]byte(secret)), sha256.Sum256([]byte(s.ID))
	r.secret(s.ID, chain, secret, hex.EncodeToString(sid[:]), hex.EncodeToString(id[:]))
}

// checkSecrets fails t if a secret appears in the spans, the metrics or
// the logs, each serialized whole.
func (r *rig) checkSecrets(t *testing.T) {
	t.Helper()
	spans, err := json.Marshal(tracetest.SpanStubsFromReadOnlySpans(r.spans.Ended()))
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	metrics, err := json.Marshal(rm)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.secrets) == 0 || len(spans) < 100 || len(metrics) < 100 {
		t.Fatalf("nothing to check: %d secrets, %d bytes of spans, %d of metrics", len(r.secrets), len(spans), len(metrics))
	}
	for what, text := range map[string]string{"spans": string(spans), "metrics": string(metrics), "logs": r.logs.String()} {
		for _, s := range r.secrets {
			if strings.Contains(text, s) {
				t.Errorf("the %s hold the secret %q:\n%s", what, s, text)
			}
		}
	}
}

// request returns a request carrying cookies.
func (r *rig) request(ctx context.Context, cookies ...*http.Cookie) *http.Request {
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	return req
}

// get loads the session of req.
func (r *rig) get(t *testing.T, req *http.Request) *sessions.Session {
	t.Helper()
	s, err := r.store.Get(req, "session")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return s
}

// save saves s and returns its cookie, noting the secrets.
func (r *rig) save(t *testing.T, req *http.Request, s *sessions.Session) *http.Cookie {
	t.Helper()
	w := httptest.NewRecorder()
	if err := s.Save(req, w); err != nil {
		t.Fatalf("Save: %v", err)
	}
	return r.cookie(t, w)
}

// cookie returns the session cookie w sets, noting the secrets.
func (r *rig) cookie(t *testing.T, w *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range w.Result().Cookies() {
		if c.Name == "session" {
			if c.Value != "" {
				r.secret(c.Value)
			}
			return c
		}
	}
	t.Fatalf("no session cookie in %v", w.Header())
	return nil
}

// expect checks that the last span of op has outcome, and the status and
// error.type of an error of kind errorType ("" for none), and returns it.
func (r *rig) expect(t *testing.T, op, outcome, errorType string) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := r.spans.Ended()
	for i := len(ended) - 1; i >= 0; i-- {
		s := ended[i]
		if s.Name() != "mongostore."+op {
			continue
		}
		a := attrs(s)
		if got := a["mongostore.operation"].AsString(); got != op {
			t.Errorf("span %s: operation %q", s.Name(), got)
		}
		if got := a["mongostore.outcome"].AsString(); got != outcome {
			t.Errorf("span %s: outcome %q, want %q", s.Name(), got, outcome)
		}
		if got := a["error.type"].AsString(); got != errorType {
			t.Errorf("span %s: error.type %q, want %q", s.Name(), got, errorType)
		}
		wantStatus := codes.Unset
		if errorType != "" {
			wantStatus = codes.Error
		}
		if st := s.Status(); st.Code != wantStatus || (errorType != "" && st.Description != errorType) {
			t.Errorf("span %s: status %v %q, want %v %q", s.Name(), st.Code, st.Description, wantStatus, errorType)
		}
		if s.SpanKind() != trace.SpanKindInternal || s.InstrumentationScope().Name != "github.com/mongostore/mongostore" {
			t.Errorf("span %s: kind %v, scope %q", s.Name(), s.SpanKind(), s.InstrumentationScope().Name)
		}
		return s
	}
	t.Fatalf("no span mongostore.%s among %d", op, len(ended))
	return nil
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// metrics returns the store's metrics: by name, then by attributes
// ("k=v,k=v", sorted), a histogram's count or a counter's sum; and the
// units by name.
func (r *rig) metrics(t *testing.T) (map[string]map[string]float64, map[string]string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out, units := map[string]map[string]float64{}, map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/mongostore/mongostore" {
			continue
		}
		for _, m := range sm.Metrics {
			points := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					points[p.Attributes.Encoded(attribute.DefaultEncoder())] += float64(p.Count)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					points[p.Attributes.Encoded(attribute.DefaultEncoder())] += float64(p.Count)
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[p.Attributes.Encoded(attribute.DefaultEncoder())] += float64(p.Value)
				}
			default:
				t.Errorf("metric %s: unexpected data %T", m.Name, m.Data)
			}
			out[m.Name], units[m.Name] = points, m.Unit
		}
	}
	return out, units
}

// opKey is the attributes of a duration point.
func opKey(op, outcome string) string {
	return "mongostore.operation=" + op + ",mongostore.outcome=" + outcome
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
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

// command spans begin

// commandSpans returns a CommandMonitor that makes a span of each command
// the driver sends, a child of the span in the operation's context (the
// store's), named after the command. It records no command text: a
// session's commands hold its _id and its document.
func commandSpans(tp trace.TracerProvider) *event.CommandMonitor {
	tracer := tp.Tracer("go.mongodb.org/mongo-driver/v2")
	var spans sync.Map // request ID → trace.Span
	end := func(requestID int64, err error) {
		if s, ok := spans.LoadAndDelete(requestID); ok {
			span := s.(trace.Span)
			if err != nil {
				span.SetStatus(codes.Error, "command failed")
			}
			span.End()
		}
	}
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			_, span := tracer.Start(ctx, e.CommandName, trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(attribute.String("db.system.name", "mongodb"),
					attribute.String("db.operation.name", e.CommandName), attribute.String("db.namespace", e.DatabaseName)))
			spans.Store(e.RequestID, span)
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { end(e.RequestID, nil) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { end(e.RequestID, e.Failure) },
	}
}

// command spans end
