package mongostore

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// The store's OpenTelemetry spans and metrics, made through the API by the
// application's providers (or the global ones). Neither carries a session
// ID, cookie, value, owner, handle or _id, and errors are recorded by kind
// (error.type), never by message, which may quote a command's filter.

// instrumentationName names the store's tracer and meter.
const instrumentationName = "github.com/mongostore/mongostore"

// operation is what a span measures, in mongostore.operation.
type operation uint8

const (
	opLoad             operation = iota // Store.New (Get, the middleware)
	opSave                              // Save, the middleware's save or touch
	opRegenerate                        // RegenerateID
	opEnd                               // Restart
	opGCSweep                           // a GC sweep, DeleteExpired
	opListSessions                      // ListSessions
	opEndSession                        // EndSession
	opEndOtherSessions                  // EndOtherSessions
	numOperations
)

var operationNames = [numOperations]string{"load", "save", "regenerate", "end", "gc_sweep", "list_sessions",
	"end_session", "end_other_sessions"}

// outcome is how an operation ended, in mongostore.outcome.
type outcome uint8

const (
	outcomeOK            outcome = iota // gc_sweep, list_sessions
	outcomeLoaded                       // load: a live session
	outcomeNew                          // load: no cookie
	outcomeExpired                      // load: the cookie named no live document
	outcomeInvalidCookie                // load: ErrInvalidCookie
	outcomeUnreadable                   // ErrDecode
	outcomeInserted                     // a new session stored
	outcomeUpdated                      // a stored session saved
	outcomeTouched                      // the middleware slid an unchanged session's expiry
	outcomeMerged                       // saved over a concurrent save's changes
	outcomeRegenerated                  // given a new secret
	outcomeEnded                        // a logout, Restart, EndSession, EndOtherSessions
	outcomeNotEnded                     // an ending that deleted nothing: EndSession's of no such session, or of the request's own
	outcomeGone                         // ErrSessionGone
	outcomeConflict                     // ErrConflict
	outcomeLocked                       // ErrLocked
	outcomeError                        // any other error
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "loaded", "new", "expired", "invalid_cookie", "unreadable", "inserted",
	"updated", "touched", "merged", "regenerated", "ended", "not_ended", "gone", "conflict", "locked", "error"}

// errorKinds are the error.type values, by the error an operation returned
// wrapping it (the first that matches), and the outcome each gives. Any
// other error is "_OTHER", as OpenTelemetry's conventions name it.
var errorKinds = [...]struct {
	err     error
	name    string
	outcome outcome
}{
	{ErrSessionGone, "session_gone", outcomeGone},
	{ErrConflict, "conflict", outcomeConflict},
	{ErrLocked, "locked", outcomeLocked},
	{ErrInvalidCookie, "invalid_cookie", outcomeInvalidCookie},
	{ErrDecode, "decode", outcomeUnreadable},
	{ErrEncode, "encode", outcomeError},
	{ErrInvalidConfig, "invalid_config", outcomeError},
	{ErrDatabase, "database", outcomeError},
	{nil, "_OTHER", outcomeError},
}

// errorKind returns the index in errorKinds of err's kind.
func errorKind(err error) int {
	for i, k := range errorKinds[:len(errorKinds)-1] {
		if errors.Is(err, k.err) {
			return i
		}
	}
	return len(errorKinds) - 1
}

// Attribute keys.
const (
	attrOperation = attribute.Key("mongostore.operation")
	attrOutcome   = attribute.Key("mongostore.outcome")
	attrErrorType = attribute.Key("error.type")
	attrSize      = attribute.Key("mongostore.session.size")  // span: encoded bytes loaded or saved
	attrRetries   = attribute.Key("mongostore.save.retries")  // span: writes after the first that met a concurrent save
	attrCount     = attribute.Key("mongostore.session.count") // span: sessions deleted, listed or ended
	attrLockWait  = attribute.Key("mongostore.lock.wait")     // span: seconds a load waited for the session's lock
)

// telemetry is a store's tracer and instruments, with the attribute sets
// of every measurement made in advance: recording one allocates nothing.
type telemetry struct {
	tracer    trace.Tracer
	untraced  trace.TracerProvider // the global provider before any is installed, whose spans record nothing
	spanNames [numOperations]string

	duration  metric.Float64Histogram // mongostore.operation.duration
	size      metric.Int64Histogram   // mongostore.session.size
	conflicts metric.Int64Counter     // mongostore.save.conflicts
	retries   metric.Int64Counter     // mongostore.save.retries
	gcDeleted metric.Int64Counter     // mongostore.gc.deleted
	errors    metric.Int64Counter     // mongostore.errors

	byOutcome [numOperations][numOutcomes][]metric.RecordOption  // operation, outcome
	byOp      [numOperations][]metric.AddOption                  // operation
	byError   [numOperations][len(errorKinds)][]metric.AddOption // operation, error.type
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) *telemetry {
	t := &telemetry{tracer: tp.Tracer(instrumentationName)}
	if reflect.TypeOf(tp).String() == "*global.tracerProvider" { // OpenTelemetry's stand-in for a provider to come
		t.untraced = tp
	}
	m := mp.Meter(instrumentationName)
	// Operations take from a fraction of a millisecond to Config.Timeout.
	duration, err1 := m.Float64Histogram("mongostore.operation.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
			0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
		metric.WithDescription("Duration of the session store's operations."))
	size, err2 := m.Int64Histogram("mongostore.session.size", metric.WithUnit("By"),
		metric.WithExplicitBucketBoundaries(64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216),
		metric.WithDescription("Encoded size of the session values saved."))
	errs := []error{err1, err2}
	counter := func(name, unit, description string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
		errs = append(errs, err)
		return cmp.Or[metric.Int64Counter](c, noop.Int64Counter{})
	}
	t.conflicts = counter("mongostore.save.conflicts", "{save}",
		"Saves that met a concurrent save of their session: merged, or given up (ErrConflict).")
	t.retries = counter("mongostore.save.retries", "{write}", "Writes of saves after their first, each after a concurrent save.")
	t.gcDeleted = counter("mongostore.gc.deleted", "{session}", "Expired sessions deleted by GC sweeps and DeleteExpired.")
	t.errors = counter("mongostore.errors", "{error}", "Operations of the session store that returned an error, by kind.")
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	// A provider that made no instrument gets none recorded.
	t.duration = cmp.Or[metric.Float64Histogram](duration, noop.Float64Histogram{})
	t.size = cmp.Or[metric.Int64Histogram](size, noop.Int64Histogram{})
	t.makeAttributeSets()
	return t
}

// makeAttributeSets makes the span names and the attribute sets of every
// measurement.
func (t *telemetry) makeAttributeSets() {
	for op := range numOperations {
		t.spanNames[op] = "mongostore." + operationNames[op]
		opAttr := attrOperation.String(operationNames[op])
		t.byOp[op] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(opAttr))}
		for out := range numOutcomes {
			set := attribute.NewSet(opAttr, attrOutcome.String(outcomeNames[out]))
			t.byOutcome[op][out] = []metric.RecordOption{metric.WithAttributeSet(set)}
		}
		for kind, k := range errorKinds {
			set := attribute.NewSet(opAttr, attrErrorType.String(k.name))
			t.byError[op][kind] = []metric.AddOption{metric.WithAttributeSet(set)}
		}
	}
}

// span is one operation under way: its span, its start, and what the
// store found out meanwhile, recorded when it ends.
type span struct {
	t       *telemetry
	op      operation
	ctx     context.Context // holds the span
	span    trace.Span
	start   time.Time
	outcome outcome       // if it succeeds
	size    int           // encoded bytes of the values loaded or saved; -1 for none
	retries int           // writes after the first that met a concurrent save
	met     bool          // a save met a concurrent save (merged, gave up, or found the session gone)
	count   int64         // sessions deleted (gc_sweep), listed or ended
	wait    time.Duration // how long a load waited for the session's lock; -1 if it took none
	ended   bool
}

// start starts op, a child of ctx's span, and returns the context its
// commands are to run in. Until an application installs a provider, the
// global one's spans would record nothing: none is made.
func (t *telemetry) start(ctx context.Context, op operation) (context.Context, span) {
	sp := span{t: t, op: op, ctx: ctx, start: time.Now(), size: -1, wait: -1}
	if t.untraced == nil || otel.GetTracerProvider() != t.untraced {
		ctx, sp.span = t.tracer.Start(ctx, t.spanNames[op])
		sp.ctx = ctx
	}
	return ctx, sp
}

// end records the operation, which returned err, and ends its span.
func (s *span) end(err error) {
	s.ended = true
	out, kind := s.outcome, -1
	switch {
	case err != nil:
		kind = errorKind(err)
		out = errorKinds[kind].outcome
	case s.retries > 0:
		out = outcomeMerged
	}
	s.measure(err, out, kind)
	if s.span == nil {
		return
	}
	if s.span.IsRecording() {
		s.annotate(out, kind)
	}
	s.span.End()
}

// errPanicked is the error of an operation a panic cut short.
var errPanicked = errors.New("mongostore: the operation panicked")

// endPanicked, deferred, ends the span of an operation that panicked (a
// custom codec's) with errPanicked; after end, it does nothing.
func (s *span) endPanicked() {
	if !s.ended {
		s.end(errPanicked)
	}
}

// writes reports whether the operation writes the session's values.
func (s *span) writes() bool { return s.op == opSave || s.op == opRegenerate }

// measure records the operation's metrics; kind is its error's, or -1.
func (s *span) measure(err error, out outcome, kind int) {
	t := s.t
	t.duration.Record(s.ctx, time.Since(s.start).Seconds(), t.byOutcome[s.op][out]...)
	if s.writes() && err == nil && s.size >= 0 {
		t.size.Record(s.ctx, int64(s.size), t.byOutcome[s.op][out]...)
	}
	if s.met || s.retries > 0 {
		t.conflicts.Add(s.ctx, 1, t.byOp[s.op]...)
	}
	if s.retries > 0 {
		t.retries.Add(s.ctx, int64(s.retries), t.byOp[s.op]...)
	}
	if s.op == opGCSweep && s.count > 0 {
		t.gcDeleted.Add(s.ctx, s.count)
	}
	if kind >= 0 {
		t.errors.Add(s.ctx, 1, t.byError[s.op][kind]...)
	}
}

// annotate sets the span's attributes and status.
func (s *span) annotate(out outcome, kind int) {
	s.span.SetAttributes(attrOperation.String(operationNames[s.op]), attrOutcome.String(outcomeNames[out]))
	if s.size >= 0 {
		s.span.SetAttributes(attrSize.Int(s.size))
	}
	if s.wait >= 0 {
		s.span.SetAttributes(attrLockWait.Float64(s.wait.Seconds()))
	}
	if s.writes() {
		s.span.SetAttributes(attrRetries.Int(s.retries))
	}
	if s.op == opGCSweep || s.op == opListSessions || s.op == opEndOtherSessions {
		s.span.SetAttributes(attrCount.Int64(s.count))
	}
	if kind >= 0 {
		s.span.SetAttributes(attrErrorType.String(errorKinds[kind].name))
		s.span.SetStatus(codes.Error, errorKinds[kind].name)
	}
}

// untraced returns ctx without its span: spans started from it begin
// traces of their own.
func untraced(ctx context.Context) context.Context {
	return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
}
