package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// serviceName names the app in its telemetry (the resource attribute
// service.name, in /metrics the label service_name of target_info), unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES says otherwise.
const serviceName = "mongostore-example"

// telemetry is the app's OpenTelemetry: metrics, which GET /metrics serves
// in the Prometheus text format, and, when an OTLP endpoint is configured,
// traces sent there.
type telemetry struct {
	// Metrics serves the metrics: GET /metrics.
	Metrics http.Handler
	// Meters and Tracers are the providers installed as OpenTelemetry's
	// global ones. Tracers is a no-op provider when Tracing is false.
	Meters  metric.MeterProvider
	Tracers trace.TracerProvider
	// Tracing says spans are exported over OTLP.
	Tracing bool

	// proxies are the trusted proxies (TRUSTED_PROXIES), whose
	// X-Forwarded-For names the client (see forwardedClient).
	proxies  []netip.Prefix
	shutdown []func(context.Context) error
}

// startTelemetry sets up the app's telemetry and installs its providers as
// OpenTelemetry's global ones (otel.SetMeterProvider, otel.SetTracerProvider),
// which the store reports into when its Config leaves the providers nil: so
// it must run before the store is made.
//
// Metrics go to a Prometheus registry of their own, through OpenTelemetry's
// Prometheus exporter: names as OpenTelemetry gives them, dots made
// underscores, with the unit and counter suffixes Prometheus expects
// (mongostore.operation.duration in seconds is
// mongostore_operation_duration_seconds). Traces are exported when
// cfg.OTLPTraces is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), with OTLP over HTTP; the exporter
// reads those variables and the other OTEL_EXPORTER_OTLP_* ones itself.
//
// The resource (target_info in /metrics) has the service's name and the
// SDK's, plus what OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES add:
// neither the host's name nor the process's command line, user or paths.
//
// Errors of the SDK (an export that fails) go to logger. Shutdown flushes
// and stops the providers.
func startTelemetry(ctx context.Context, cfg config, logger *slog.Logger) (*telemetry, error) {
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if err != nil {
		logger.Warn("telemetry: some resource attributes were left out", "error", err.Error())
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("telemetry", "error", err.Error())
	}))
	t := &telemetry{Tracers: noop.NewTracerProvider(), proxies: cfg.TrustedProxies}
	if err := t.startMetrics(res, logger); err != nil {
		return nil, err
	}
	if !cfg.OTLPTraces {
		logger.Info("telemetry: metrics at /metrics; no traces (set OTEL_EXPORTER_OTLP_ENDPOINT to send them)")
		return t, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		_ = t.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	tracers := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.shutdown = append(t.shutdown, tracers.Shutdown)
	t.Tracers, t.Tracing = tracers, true
	otel.SetTracerProvider(tracers)
	logger.Info("telemetry: metrics at /metrics; traces sent with OTLP over HTTP to the endpoint of OTEL_EXPORTER_OTLP_*")
	return t, nil
}

// startMetrics makes the meter provider, with the resource res, whose
// metrics t.Metrics serves, and installs it as the global one.
func (t *telemetry) startMetrics(res *resource.Resource, logger *slog.Logger) error {
	registry := prometheus.NewRegistry()
	exporter, err := promexporter.New(
		promexporter.WithRegisterer(registry),
		promexporter.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		return fmt.Errorf("telemetry: Prometheus exporter: %w", err)
	}
	// Of otelhttp's metrics, the request durations are kept; the sizes of
	// request and response bodies would triple /metrics for little.
	drop := sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}}
	meters := sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exporter),
		sdkmetric.WithResource(res),
		sdkmetric.WithView(
			sdkmetric.NewView(sdkmetric.Instrument{Name: "http.server.request.body.size"}, drop),
			sdkmetric.NewView(sdkmetric.Instrument{Name: "http.server.response.body.size"}, drop),
		),
	)
	t.shutdown = append(t.shutdown, meters.Shutdown)
	t.Meters = meters
	t.Metrics = promhttp.HandlerFor(registry, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
	otel.SetMeterProvider(meters)
	return nil
}

// Shutdown flushes the telemetry not yet exported and stops the providers,
// the tracer provider first.
func (t *telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		if err := t.shutdown[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// shutdownWithin is Shutdown with d to do it, even once ctx is cancelled.
func (t *telemetry) shutdownWithin(ctx context.Context, d time.Duration) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	return t.Shutdown(sctx)
}

// instrument wraps the app's handler h, served at addr, with otelhttp: a
// server span for each request (exported when tracing is on), named after
// its route ("GET /sessions"), and the HTTP server metrics
// (http_server_request_duration_seconds, labelled with the method, the
// route and the status; startTelemetry drops the body sizes). The server's
// address in the metrics is addr, not the request's Host header, which a
// client chooses. /metrics, /healthz and /static/ are left out: scrapes,
// health checks and the style sheet would crowd the rest.
//
// The app is a public endpoint: a request's trace context (traceparent)
// is linked to its span, never continued, so that no client chooses the
// trace or the sampling of the app's spans. What the spans record of the
// client is coarse: client.address is the TCP peer, or what a trusted
// proxy says (see forwardedClient); user_agent.name the kind of browser
// ("Firefox"), never the whole User-Agent header (user_agent.original),
// which tells people apart.
func (t *telemetry) instrument(h http.Handler, addr string) http.Handler {
	traced := otelhttp.NewHandler(restoreUserAgent(h), "http.server",
		otelhttp.WithMeterProvider(t.Meters),
		otelhttp.WithTracerProvider(t.Tracers),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		// Every request is a public endpoint's (v0.71 has no WithPublicEndpoint).
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }),
		otelhttp.WithServerName(addr),
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/metrics" && r.URL.Path != "/healthz" && !strings.HasPrefix(r.URL.Path, "/static/")
		}),
	)
	return hideFromTelemetry(traced, t.proxies)
}

// userAgentKey is the context key under which hideFromTelemetry keeps a
// request's User-Agent header, for restoreUserAgent.
type userAgentKey struct{}

// hideFromTelemetry passes to next (otelhttp) a copy of the request
// without what otelhttp would record but must not: the User-Agent header,
// kept in the context for restoreUserAgent, and an X-Forwarded-For header
// that no trusted proxy sent (otelhttp records its first address as
// client.address). From a trusted proxy, X-Forwarded-For is replaced by
// the client's address, as the proxies saw it.
func hideFromTelemetry(next http.Handler, proxies []netip.Prefix) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua := r.Header.Values("User-Agent")
		hidden := r.WithContext(context.WithValue(r.Context(), userAgentKey{}, ua))
		hidden.Header = r.Header.Clone()
		hidden.Header.Del("User-Agent")
		hidden.Header.Del("X-Forwarded-For")
		if client := forwardedClient(r, proxies); client.IsValid() {
			hidden.Header.Set("X-Forwarded-For", client.String())
		}
		next.ServeHTTP(w, hidden)
	})
}

// restoreUserAgent puts back, for the app, the User-Agent header that
// hideFromTelemetry hid from otelhttp, once otelhttp has started the span,
// and adds the browser's kind to the span (user_agent.name). It changes
// the header in place, rather than passing on a new request, because
// otelhttp names its span after the route that the mux sets in the
// request otelhttp passed on.
func restoreUserAgent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ua, _ := r.Context().Value(userAgentKey{}).([]string); len(ua) > 0 {
			r.Header["User-Agent"] = ua // the header is hideFromTelemetry's copy
			if browser := firstMarker(ua[0], browserMarkers); browser != "" {
				trace.SpanFromContext(r.Context()).SetAttributes(attribute.String("user_agent.name", browser))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// forwardedClient returns the address of the client of r as the trusted
// proxies saw it, or the zero Addr when r did not come from a trusted
// proxy (then the client is the TCP peer) or names nobody. Each proxy
// appends to X-Forwarded-For the address it received the request from,
// so the client is the last address of the header that is not a trusted
// proxy's: the addresses before it are whatever the client sent. An
// entry that is not an address stops the walk at the last proxy.
func forwardedClient(r *http.Request, proxies []netip.Prefix) netip.Addr {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !trusted(peer.Addr().Unmap(), proxies) {
		return netip.Addr{}
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	var client netip.Addr
	for i := len(hops) - 1; i >= 0; i-- {
		addr, ok := parseHop(hops[i])
		if !ok {
			break
		}
		if client = addr; !trusted(addr, proxies) {
			break
		}
	}
	return client
}

// parseHop reads an entry of X-Forwarded-For: an IP address, maybe with
// a port.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if addr, err := netip.ParseAddr(s); err == nil {
		return addr.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// trusted reports whether addr is in one of the prefixes of proxies.
func trusted(addr netip.Addr, proxies []netip.Prefix) bool {
	for _, p := range proxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// parseProxies reads TRUSTED_PROXIES, s: IP addresses and CIDR prefixes,
// comma-separated.
func parseProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		if p, err := netip.ParsePrefix(entry); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(entry); err == nil {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		} else {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix", entry)
		}
	}
	return out, nil
}
