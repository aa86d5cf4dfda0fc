package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/securecookie"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// telemetryUser is the user the telemetry tests log in as: a name found
// nowhere else, so that finding it in the telemetry is a leak.
const (
	telemetryUser     = "zelda.telemetry"
	telemetryPassword = "triforce-42"
)

// telemetryUA is the User-Agent of the telemetry tests' browser: a
// Firefox on Linux, with a token found nowhere else, so that finding it
// in the telemetry is a leak of the whole header (a fingerprint).
const telemetryUA = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0 Fingerprint/zelda-42"

// userAgentTransport sends every request with its User-Agent.
type userAgentTransport struct {
	ua   string
	next http.RoundTripper
}

func (u userAgentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("User-Agent", u.ua)
	return u.next.RoundTrip(r)
}

// telemetryBrowser returns a browser for the app at base that sends
// telemetryUA.
func telemetryBrowser(t *testing.T, base string) *browser {
	b := newBrowser(t, base)
	b.client.Transport = userAgentTransport{telemetryUA, http.DefaultTransport}
	return b
}

// telemetrySecrets logs in to the app at base as telemetryUser, visits the
// home page and the page of sessions, and returns, by what they are, the
// secrets the telemetry must never show: the user's name, the session
// cookie's value, the session ID it holds, the ID's digest (the
// document's _id) and the session key.
func telemetrySecrets(t *testing.T, b *browser, key []byte) map[string]string {
	t.Helper()
	b.login(telemetryUser, telemetryPassword)
	wantStatus(t, "GET /", b.get("/"), http.StatusOK, "")
	wantStatus(t, "GET /sessions", b.get("/sessions"), http.StatusOK, "")
	cookie := b.cookie(sessionName)
	if cookie == "" {
		t.Fatal("no session cookie after login")
	}
	// The store signs the session ID into the cookie with securecookie,
	// the session key as its hash key, the ID's bytes as they are.
	sc := securecookie.New(key, nil)
	sc.SetSerializer(securecookie.NopEncoder{})
	sc.MaxAge(0)
	var id []byte
	if err := sc.Decode(sessionName, cookie, &id); err != nil || len(id) == 0 {
		t.Fatalf("decode the session cookie: %v", err)
	}
	sum := sha256.Sum256(id)
	return map[string]string{
		"the user's name":         telemetryUser,
		"the session cookie":      cookie,
		"the session ID":          string(id),
		"the session ID's digest": hex.EncodeToString(sum[:]),
		"the session key":         hex.EncodeToString(key),
		"the user's password":     telemetryPassword,
		"the session key's bytes": string(key),
		"the User-Agent":          "Fingerprint/zelda-42",
	}
}

// wantNoSecrets fails the test if body holds any of secrets.
func wantNoSecrets(t *testing.T, what string, body []byte, secrets map[string]string) {
	t.Helper()
	for name, s := range secrets {
		if bytes.Contains(body, []byte(s)) {
			t.Errorf("%s shows %s (%q)", what, name, s)
		}
	}
}

// telemetryEnv returns the environment of an app process for a telemetry
// test (see restartEnv) with telemetryUser and the session key, and env.
func telemetryEnv(t *testing.T, key []byte, env ...string) []string {
	return append(append(restartEnv(t),
		"DEMO_USERS="+telemetryUser+":"+telemetryPassword,
		"SESSION_KEY="+hex.EncodeToString(key)), env...)
}

// TestMetrics logs in through the app, run as a process of its own (the
// telemetry providers are global), and reads GET /metrics: the Prometheus
// text format, the HTTP server's request durations by route, target_info
// with the service's name and the SDK's only, and no secret anywhere:
// neither the user's name, nor the cookie, the session ID or its digest,
// nor the key. Then the store's own series: the library reports into the
// global MeterProvider the app installs, as mongostore_* series:
// mongostore_operation_duration_seconds by operation and outcome (the
// login's save inserted, the loads, the list of sessions) and
// mongostore_session_size_bytes.
func TestMetrics(t *testing.T) {
	t.Parallel()
	key := randomKey()
	p := startAppProcess(t, telemetryEnv(t, key)...)
	b := telemetryBrowser(t, p.url)
	secrets := telemetrySecrets(t, b, key)

	r := b.get("/metrics")
	wantStatus(t, "GET /metrics", r, http.StatusOK, "")
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("GET /metrics: Content-Type %q, want the Prometheus text format", ct)
	}
	wantNoSecrets(t, "GET /metrics", []byte(r.body), secrets)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(r.body))
	if err != nil {
		t.Fatalf("GET /metrics: not the Prometheus text format: %v\n%s", err, r.body)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range families {
			if !yield(name) {
				return
			}
		}
	})
	t.Logf("metrics: %s", strings.Join(names, ", "))

	// The HTTP server's metrics, by route, show that the exporter works.
	if !hasSeries(families["http_server_request_duration_seconds"], map[string]string{
		"http_route": "/login", "http_request_method": "POST", "http_response_status_code": "303",
	}) {
		t.Errorf("no http_server_request_duration_seconds series for POST /login (303):\n%s", r.body)
	}
	for _, name := range names {
		if strings.HasPrefix(name, "http_server_") && name != "http_server_request_duration_seconds" {
			t.Errorf("metric %s: the app keeps only the request durations of otelhttp", name)
		}
	}
	// What the resource says of the process: its service and SDK only.
	allowed := []string{"service_name", "telemetry_sdk_language", "telemetry_sdk_name", "telemetry_sdk_version"}
	info := families["target_info"]
	if info == nil || len(info.GetMetric()) != 1 {
		t.Errorf("target_info: %v, want one series", info)
	} else {
		for _, l := range info.GetMetric()[0].GetLabel() {
			if !slices.Contains(allowed, l.GetName()) {
				t.Errorf("target_info has the label %s=%q: only %v are expected", l.GetName(), l.GetValue(), allowed)
			}
			if l.GetName() == "service_name" && l.GetValue() != serviceName {
				t.Errorf("target_info: service_name %q, want %s", l.GetValue(), serviceName)
			}
		}
	}

	// The store's series: mongostore_ and the OpenTelemetry name, with the
	// standard unit and counter suffixes, nothing else.
	var store []string
	for _, name := range names {
		if strings.HasPrefix(name, "mongostore_") {
			store = append(store, name)
		}
		if strings.Contains(name, "mongostore") && !strings.HasPrefix(name, "mongostore_") || strings.Contains(name, "mongostore_mongostore") {
			t.Errorf("metric %s: the store's metrics are named mongostore_…", name)
		}
	}
	t.Logf("the store's metrics: %q", store)
	const duration = "mongostore_operation_duration_seconds"
	fam := families[duration]
	switch {
	case fam == nil:
		t.Errorf("no %s in /metrics (does the store report into the global MeterProvider?); the store's metrics: %q", duration, store)
	case fam.GetType() != dto.MetricType_HISTOGRAM:
		t.Errorf("%s is a %v, want a histogram", duration, fam.GetType())
	default:
		for _, want := range [][2]string{{"save", "inserted"}, {"load", "loaded"}, {"list_sessions", "ok"}} {
			if !hasSeries(fam, map[string]string{"mongostore_operation": want[0], "mongostore_outcome": want[1]}) {
				t.Errorf("no %s series for the operation %s, outcome %s:\n%s", duration, want[0], want[1], r.body)
			}
		}
	}
	if fam := families["mongostore_session_size_bytes"]; fam == nil || fam.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("no mongostore_session_size_bytes histogram: %v", fam)
	}
	p.terminate()
}

// hasSeries reports whether fam has a series with the labels want; an
// empty value wants the label with any value but "".
func hasSeries(fam *dto.MetricFamily, want map[string]string) bool {
	for _, m := range fam.GetMetric() {
		n := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && l.GetValue() != "" && (v == "" || v == l.GetValue()) {
				n++
			}
		}
		if n == len(want) {
			return true
		}
	}
	return false
}

// otlpReceiver is an OTLP/HTTP trace receiver: it keeps the spans that
// exporters post to /v1/traces, and the raw bodies.
type otlpReceiver struct {
	t   *testing.T
	mu  sync.Mutex
	raw [][]byte
	req []*coltracepb.ExportTraceServiceRequest
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		o.t.Errorf("OTLP receiver: %s %s, want POST /v1/traces", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		o.t.Errorf("OTLP receiver: not an ExportTraceServiceRequest (%s): %v", r.Header.Get("Content-Type"), err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.raw = append(o.raw, data)
	o.req = append(o.req, req)
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// receivedSpan is a span with its scope and its resource's service name.
type receivedSpan struct {
	*tracepb.Span
	scope, service string
}

// spans returns the spans received so far.
func (o *otlpReceiver) spans() []receivedSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []receivedSpan
	for _, req := range o.req {
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, receivedSpan{s, ss.GetScope().GetName(), service})
				}
			}
		}
	}
	return out
}

// TestTraces runs the app with OTEL_EXPORTER_OTLP_ENDPOINT naming an OTLP
// receiver of the test's, logs in, and stops the app, which flushes its
// spans: each request has a server span named after its route, in the
// service mongostore-example, but for /metrics and /healthz; the store's
// spans (mongostore.load, mongostore.save, …) are children of the
// requests', but the GC goroutine's sweeps; no span shows a secret.
func TestTraces(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{t: t}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)
	key := randomKey()
	p := startAppProcess(t, telemetryEnv(t, key,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL,
		"OTEL_BSP_SCHEDULE_DELAY=100", // milliseconds between exports
	)...)
	if out := p.output(); !strings.Contains(out, "traces sent with OTLP") {
		t.Errorf("the log does not say traces are sent:\n%s", out)
	}
	b := telemetryBrowser(t, p.url)
	secrets := telemetrySecrets(t, b, key)
	wantStatus(t, "GET /metrics", b.get("/metrics"), http.StatusOK, "")
	wantStatus(t, "GET /healthz", b.get("/healthz"), http.StatusOK, "")
	// A request that comes with a trace context of its own and an
	// X-Forwarded-For: the app is a public endpoint, behind no proxy.
	wantStatus(t, "GET /login with a trace context", b.do(http.MethodGet, "/login", nil, http.Header{
		"Traceparent":     {inboundTraceparent},
		"X-Forwarded-For": {forgedClient},
	}), http.StatusSeeOther, "/")
	p.terminate() // flushes the spans

	spans := recv.spans()
	if len(spans) == 0 {
		t.Fatal("no span received")
	}
	var server []string
	requestSpans := map[string]bool{} // span IDs
	for _, s := range spans {
		if s.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			server = append(server, s.GetName())
			requestSpans[hex.EncodeToString(s.GetSpanId())] = true
			if s.service != serviceName {
				t.Errorf("span %s: service %q, want %s", s.GetName(), s.service, serviceName)
			}
		}
	}
	sort.Strings(server)
	t.Logf("server spans: %q", server)
	for _, want := range []string{"POST /login", "GET /{$}", "GET /sessions"} {
		if !slices.Contains(server, want) {
			t.Errorf("no server span %q among %q", want, server)
		}
	}
	for _, name := range server {
		if strings.Contains(name, "/metrics") || strings.Contains(name, "/healthz") {
			t.Errorf("server span %q: scrapes and health checks have none", name)
		}
	}
	var store []string
	for _, s := range spans {
		if s.scope != "github.com/mongostore/mongostore" {
			continue
		}
		store = append(store, s.GetName())
		switch parent := hex.EncodeToString(s.GetParentSpanId()); {
		case s.GetName() == "mongostore.gc_sweep": // the GC goroutine's: a trace of its own
			if parent != "" {
				t.Errorf("the GC goroutine's sweep has a parent span")
			}
		case !requestSpans[parent]:
			t.Errorf("the store's span %s is not a child of a request's span", s.GetName())
		}
	}
	t.Logf("the store's spans: %q", store)
	for _, want := range []string{"mongostore.load", "mongostore.save", "mongostore.list_sessions"} {
		if !slices.Contains(store, want) {
			t.Errorf("no span %s of the store among %q", want, store)
		}
	}
	recv.mu.Lock()
	raw := bytes.Join(recv.raw, nil)
	recv.mu.Unlock()
	secrets["the X-Forwarded-For of a client"] = forgedClient
	wantNoSecrets(t, "the spans", raw, secrets)
	wantRequestSpans(t, spans)
}

// The trace context and the X-Forwarded-For header of TestTraces's last
// request, which no proxy sent: a client's.
const (
	inboundTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	inboundSpanID      = "00f067aa0ba902b7"
	inboundTraceparent = "00-" + inboundTraceID + "-" + inboundSpanID + "-01"
	forgedClient       = "203.0.113.7"
)

// wantRequestSpans checks the server spans of TestTraces: each records
// the client's browser, not its User-Agent (user_agent.name, not
// user_agent.original), and the TCP peer as client.address, not the
// X-Forwarded-For that no trusted proxy sent; the request that came with
// a trace context has a trace of its own, linked to that context, not
// continued (the app is a public endpoint).
func wantRequestSpans(t *testing.T, spans []receivedSpan) {
	t.Helper()
	linked := 0
	for _, s := range spans {
		if s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			continue
		}
		attrs := map[string]string{}
		for _, kv := range s.GetAttributes() {
			attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		if ua, ok := attrs["user_agent.original"]; ok {
			t.Errorf("span %s records the User-Agent %q", s.GetName(), ua)
		}
		if got := attrs["user_agent.name"]; got != "Firefox" {
			t.Errorf("span %s: user_agent.name %q, want Firefox", s.GetName(), got)
		}
		if got := attrs["client.address"]; got != "127.0.0.1" {
			t.Errorf("span %s: client.address %q, want the TCP peer 127.0.0.1", s.GetName(), got)
		}
		if hex.EncodeToString(s.GetTraceId()) == inboundTraceID || len(s.GetParentSpanId()) > 0 {
			t.Errorf("span %s continues a client's trace (trace %x, parent %x), want a trace of its own", s.GetName(), s.GetTraceId(), s.GetParentSpanId())
		}
		for _, l := range s.GetLinks() {
			if hex.EncodeToString(l.GetTraceId()) == inboundTraceID && hex.EncodeToString(l.GetSpanId()) == inboundSpanID {
				linked++
			}
		}
	}
	if linked != 1 {
		t.Errorf("%d server spans linked to the client's trace context, want 1 (GET /login)", linked)
	}
}

// TestInstrument checks what the request spans record of the client, for
// requests from the client itself and through proxies, trusted or not:
// client.address is the TCP peer unless a trusted proxy names the client
// in X-Forwarded-For; the browser's kind, never its User-Agent, which the
// app still gets whole; and a client's trace context is linked, not
// continued.
func TestInstrument(t *testing.T) {
	t.Parallel()
	const firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
	for _, tc := range []struct {
		name, proxies, peer, xff string
		want                     string // client.address
	}{
		{name: "no proxy", peer: "198.51.100.9", want: "198.51.100.9"},
		{name: "forged X-Forwarded-For, no trusted proxy", peer: "198.51.100.9", xff: "203.0.113.7", want: "198.51.100.9"},
		{name: "forged X-Forwarded-For, peer not trusted", proxies: "10.0.0.0/8", peer: "198.51.100.9", xff: "203.0.113.7", want: "198.51.100.9"},
		{name: "trusted proxy", proxies: "10.0.0.0/8", peer: "10.1.2.3", xff: "203.0.113.7", want: "203.0.113.7"},
		{name: "trusted proxy, forged entries first", proxies: "10.0.0.0/8", peer: "10.1.2.3", xff: "192.0.2.66, 10.0.0.1, 203.0.113.7", want: "203.0.113.7"},
		{name: "two trusted proxies", proxies: "10.1.2.3, 10.9.9.9", peer: "10.1.2.3", xff: "203.0.113.7, 10.9.9.9", want: "203.0.113.7"},
		{name: "trusted proxy, client with a port", proxies: "10.1.2.3", peer: "10.1.2.3", xff: "203.0.113.7:5678", want: "203.0.113.7"},
		{name: "trusted proxy, no X-Forwarded-For", proxies: "10.0.0.0/8", peer: "10.1.2.3", want: "10.1.2.3"},
		{name: "trusted proxy, garbage entry", proxies: "10.0.0.0/8", peer: "10.1.2.3", xff: "203.0.113.7, <script>", want: "10.1.2.3"},
		{name: "only trusted addresses", proxies: "10.0.0.0/8", peer: "10.1.2.3", xff: "10.0.0.7, 10.0.0.8", want: "10.0.0.7"},
		{name: "IPv6 proxy", proxies: "::1", peer: "::1", xff: "2001:db8::1", want: "2001:db8::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxies, err := parseProxies(tc.proxies)
			if err != nil {
				t.Fatal(err)
			}
			rec := tracetest.NewSpanRecorder()
			tel := &telemetry{Meters: metricnoop.NewMeterProvider(), Tracers: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), proxies: proxies}
			var seenUA string
			mux := http.NewServeMux()
			mux.HandleFunc("GET /page", func(w http.ResponseWriter, r *http.Request) { seenUA = r.UserAgent() })
			req := httptest.NewRequest(http.MethodGet, "/page", nil)
			req.RemoteAddr = net.JoinHostPort(tc.peer, "4321")
			req.Header.Set("User-Agent", firefox)
			req.Header.Set("Traceparent", inboundTraceparent)
			if tc.xff != "" {
				req.Header.Set("X-Forwarded-For", tc.xff)
			}
			tel.instrument(mux, "127.0.0.1:8080").ServeHTTP(httptest.NewRecorder(), req)

			if seenUA != firefox {
				t.Errorf("the app got the User-Agent %q, want %q", seenUA, firefox)
			}
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			attrs := map[attribute.Key]string{}
			for _, kv := range s.Attributes() {
				attrs[kv.Key] = kv.Value.Emit()
			}
			for key, want := range map[attribute.Key]string{"client.address": tc.want, "user_agent.name": "Firefox", "user_agent.original": ""} {
				if got := attrs[key]; got != want {
					t.Errorf("%s %q, want %q", key, got, want)
				}
			}
			if s.Name() != "GET /page" {
				t.Errorf("span named %q, want GET /page", s.Name())
			}
			if s.Parent().IsValid() || s.SpanContext().TraceID().String() == inboundTraceID {
				t.Errorf("the span continues the client's trace: parent %v, trace %v", s.Parent(), s.SpanContext().TraceID())
			}
			if links := s.Links(); len(links) != 1 || links[0].SpanContext.TraceID().String() != inboundTraceID || links[0].SpanContext.SpanID().String() != inboundSpanID {
				t.Errorf("links %v, want one to the client's trace context", links)
			}
		})
	}
}
