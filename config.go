package mongostore

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Config is the store's configuration; the zero value gives the defaults.
// Cookie attributes are in Store.Options: a session lives unused for its
// Options.MaxAge.
type Config struct {
	// Expiry says how expired documents are deleted. Default ExpiryAuto.
	Expiry ExpiryMode

	// GCInterval is the time between two sweeps of the GC goroutine.
	// Default one minute; at least 100ms.
	GCInterval time.Duration

	// IdleTimeout is how long a session whose cookie lasts until the
	// browser closes (Options.MaxAge 0) lives unused. Default 24 hours.
	IdleTimeout time.Duration

	// AbsoluteTimeout is the longest a session lives from its creation,
	// however active: by default 7 days or its own MaxAge if longer;
	// negative for no limit.
	AbsoluteTimeout time.Duration

	// TouchInterval is how long after its last save the middleware saves an
	// unchanged session again, to slide its expiry. Default a tenth of its
	// idle timeout, at most a minute; negative for never.
	TouchInterval time.Duration

	// Timeout bounds each operation's database commands (a load, a save,
	// NewStore's set-up). Default 5 seconds.
	Timeout time.Duration

	// LockWait bounds how long a request waits for its session's lock
	// (Exclusive, Lock) before ErrLocked. Default 15 seconds; at least a
	// millisecond.
	LockWait time.Duration

	// LockLease is how long a session's lock outlives a holder that never
	// released it (its process died): another request may take it then,
	// so a section must end within it. Default 10 seconds; at least a
	// second.
	LockLease time.Duration

	// MaxSize is the largest encoded size of a session's values, in bytes;
	// Save refuses more with ErrEncode. Default 1 MiB; at most 15 MiB.
	MaxSize int

	// Codec encodes session values. The default encodes common types
	// compactly, anything else with gob.
	Codec Codec

	// Logger receives the store's logs, which never hold session IDs,
	// values or owners. Default slog.Default().
	Logger *slog.Logger

	// TracerProvider makes the store's OpenTelemetry spans, one per
	// operation, each a child of the span in its context (the request's).
	// Default otel.GetTracerProvider() at NewStore: the global provider,
	// which hands over to one installed later. Spans never hold session
	// IDs, cookies, values or owners.
	TracerProvider trace.TracerProvider

	// MeterProvider makes the store's OpenTelemetry metrics
	// (mongostore.operation.duration and others; see the README). Default
	// otel.GetMeterProvider() at NewStore, as for TracerProvider.
	MeterProvider metric.MeterProvider

	// MaxSessionsPerOwner, if positive, is how many live sessions one
	// owner (SetOwner) may have: when a save ties a session to an owner
	// who has more, the least recently saved others end (EndLimit).
	// Concurrent logins leave at most this many.
	MaxSessionsPerOwner int

	// OnEvent, if set, is called at every transition of a session
	// (created, regenerated, ended, expired), inside the operation that
	// made it, after its database command, with the caller's ctx: keep it
	// quick. A panic in it is logged, not passed on.
	OnEvent func(ctx context.Context, e Event)

	// Now returns the current time (tests may fake it); keep servers'
	// clocks in sync. Default time.Now.
	Now func() time.Time

	afterSweep func() // run after each GC sweep (tests)
}

// ExpiryMode says how expired documents are deleted. The store never
// serves an expired session, whatever the mode.
type ExpiryMode int

const (
	// ExpiryAuto uses a TTL index where the server has them, else the GC
	// goroutine (FerretDB v1), and logs which.
	ExpiryAuto ExpiryMode = iota

	// ExpiryTTL insists on the TTL index, which deletes each document at
	// its expiresAt (within the TTL monitor's minute).
	ExpiryTTL

	// ExpiryGC runs a goroutine that deletes expired sessions every
	// GCInterval, with a plain index on expiresAt.
	ExpiryGC

	// ExpiryNone creates no index and starts no goroutine: the application
	// calls Store.DeleteExpired (from a cron job, say).
	ExpiryNone
)

// Defaults and bounds of Config.
const (
	defaultGCInterval      = time.Minute
	minGCInterval          = 100 * time.Millisecond
	defaultIdleTimeout     = 24 * time.Hour
	defaultAbsoluteTimeout = 7 * 24 * time.Hour
	maxTouchInterval       = time.Minute
	defaultTimeout         = 5 * time.Second
	defaultLockWait        = 15 * time.Second
	defaultLockLease       = 10 * time.Second
	defaultMaxSize         = 1 << 20
	maxMaxSize             = 15 << 20 // leaves room for the rest of a 16 MiB document
)

// withDefaults validates c and returns it with the defaults filled in.
func (c Config) withDefaults() (Config, error) {
	c.GCInterval = cmp.Or(c.GCInterval, defaultGCInterval)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, defaultIdleTimeout)
	c.Timeout = cmp.Or(c.Timeout, defaultTimeout)
	c.MaxSize = cmp.Or(c.MaxSize, defaultMaxSize)
	c.LockWait = cmp.Or(c.LockWait, defaultLockWait)
	c.LockLease = cmp.Or(c.LockLease, defaultLockLease)
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Expiry < ExpiryAuto || c.Expiry > ExpiryNone:
		return bad("unknown Expiry mode %d", int(c.Expiry))
	case c.GCInterval < minGCInterval:
		return bad("GCInterval %v is shorter than %v", c.GCInterval, minGCInterval)
	case c.IdleTimeout < time.Second:
		return bad("IdleTimeout %v is shorter than a second", c.IdleTimeout)
	case c.AbsoluteTimeout > 0 && c.AbsoluteTimeout < time.Second:
		return bad("AbsoluteTimeout %v is shorter than a second", c.AbsoluteTimeout)
	case c.Timeout < 0:
		return bad("Timeout %v is negative", c.Timeout)
	case c.LockWait < time.Millisecond:
		return bad("LockWait %v is shorter than a millisecond", c.LockWait)
	case c.LockLease < time.Second:
		return bad("LockLease %v is shorter than a second", c.LockLease)
	case c.MaxSize < 0 || c.MaxSize > maxMaxSize:
		return bad("MaxSize %d is not between 1 and %d", c.MaxSize, maxMaxSize)
	}
	c.Codec = cmp.Or[Codec](c.Codec, compactCodec{})
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.TracerProvider = cmp.Or(c.TracerProvider, otel.GetTracerProvider())
	c.MeterProvider = cmp.Or(c.MeterProvider, otel.GetMeterProvider())
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
