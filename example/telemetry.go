package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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

	t := &telemetry{}
	registry := prometheus.NewRegistry()
	exporter, err := promexporter.New(
		promexporter.WithRegisterer(registry),
		promexporter.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: Prometheus exporter: %w", err)
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

	t.Tracers = noop.NewTracerProvider()
	if cfg.OTLPTraces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
		}
		tracers := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.shutdown = append(t.shutdown, tracers.Shutdown)
		t.Tracers = tracers
		t.Tracing = true
		otel.SetTracerProvider(tracers)
		// Spans continue a trace that a request's traceparent header names.
		otel.SetTextMapPropagator(propagation.TraceContext{})
		logger.Info("telemetry: metrics at /metrics; traces sent with OTLP over HTTP to the endpoint of OTEL_EXPORTER_OTLP_*")
	} else {
		logger.Info("telemetry: metrics at /metrics; no traces (set OTEL_EXPORTER_OTLP_ENDPOINT to send them)")
	}
	return t, nil
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
// route and the status; startTelemetry drops the body sizes). The server's address in the metrics
// is addr, not the request's Host header, which a client chooses.
// /metrics, /healthz and /static/ are left out: scrapes, health checks and
// the style sheet would crowd the rest.
func (t *telemetry) instrument(h http.Handler, addr string) http.Handler {
	return otelhttp.NewHandler(h, "http.server",
		otelhttp.WithMeterProvider(t.Meters),
		otelhttp.WithTracerProvider(t.Tracers),
		otelhttp.WithServerName(addr),
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/metrics" && r.URL.Path != "/healthz" && !strings.HasPrefix(r.URL.Path, "/static/")
		}),
	)
}
