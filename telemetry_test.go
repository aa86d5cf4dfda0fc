package mongostore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel"
)

// TestErrorKinds: an error is recorded by the first kind it wraps, and
// gives its outcome.
func TestErrorKinds(t *testing.T) {
	for _, c := range []struct {
		err           error
		kind, outcome string
	}{
		{dbError("save session", errors.New(`E11000 dup key: { _id: "9f86d0" }`)), "database", "error"},
		{fmt.Errorf("%w; %w", ErrSessionGone, dbError("delete session", errors.New("timeout"))), "session_gone", "gone"},
		{fmt.Errorf("%w: 32 writes met concurrent saves", ErrConflict), "conflict", "conflict"},
		{fmt.Errorf("%w: bad", ErrInvalidCookie), "invalid_cookie", "invalid_cookie"},
		{fmt.Errorf("%w: bad", ErrDecode), "decode", "unreadable"},
		{fmt.Errorf("%w: too big", ErrEncode), "encode", "error"},
		{fmt.Errorf("%w: __Host- needs Secure", ErrInvalidConfig), "invalid_config", "error"},
		{errors.New("securecookie: something"), "_OTHER", "error"},
	} {
		k := errorKinds[errorKind(c.err)]
		if k.name != c.kind || outcomeNames[k.outcome] != c.outcome {
			t.Errorf("%v: kind %s, outcome %s; want %s, %s", c.err, k.name, outcomeNames[k.outcome], c.kind, c.outcome)
		}
	}
}

// BenchmarkTelemetryNoProvider is what an operation pays for its span and
// measurements when the application installed no provider (the global
// ones, which do nothing until one is set).
func BenchmarkTelemetryNoProvider(b *testing.B) {
	tel := newTelemetry(otel.GetTracerProvider(), otel.GetMeterProvider())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, sp := tel.start(ctx, opSave)
		sp.outcome, sp.size = outcomeUpdated, 100
		sp.end(nil)
	}
}
