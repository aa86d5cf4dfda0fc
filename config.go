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
	// Default (0) one minute; else at least 100ms.
	GCInterval time.Duration

	// IdleTimeout is how long a session whose cookie lasts until the
	// browser closes (Options.MaxAge 0) lives unused. Default (0) 24
	// hours; else at least a second.
	IdleTimeout time.Duration

	// AbsoluteTimeout is the longest a session lives from its creation,
	// however active: by default (0) 7 days, or its idle timeout (its own
	// MaxAge, or IdleTimeout) if longer; negative for no limit; else at
	// least a second.
	AbsoluteTimeout time.Duration

	// TouchInterval is how long after its last save the middleware saves an
	// unchanged session again, to slide its expiry, at most half its idle
	// timeout. Default (0) a tenth of its idle timeout, at most a minute;
	// negative for never.
	TouchInterval time.Duration

	// Timeout bounds each operation's database commands (a load, a save;
	// NewStore's set-up if its context has no deadline). Default (0) 5
	// seconds; else at least a millisecond.
	Timeout time.Duration

	// LockWait bounds how long a request waits for its session's lock
	// (Exclusive, Lock) before ErrLocked. Default (0) 15 seconds; else at
	// least a millisecond.
	LockWait time.Duration

	// LockLease is how long a session's lock outlives a holder that never
	// released it (its process died): another request may take it then,
	// so a section must end within it. Default (0) 10 seconds; else at
	// least a second.
	LockLease time.Duration

	// MaxSize is the largest encoded size of a session's values, in bytes;
	// Save refuses more with ErrEncode. Default (0) 1 MiB; else 1 to 15
	// MiB.
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
	// Concurrent logins leave at most this many. Default (0) no limit;
	// at most 1,000, what one listing holds.
	MaxSessionsPerOwner int

	// OnEvent, if set, is called at every transition of a session
	// (created, regenerated, ended, expired, locked), inside the operation that
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

// String returns the mode's name: "auto", "ttl", "gc" or "none".
func (m ExpiryMode) String() string {
	if names := [...]string{"auto", "ttl", "gc", "none"}; m >= 0 && int(m) < len(names) {
		return names[m]
	}
	return fmt.Sprintf("ExpiryMode(%d)", int(m))
}

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
	for _, b := range [...]struct {
		field string
		bad   bool
		value any
		want  string
	}{
		{"Expiry", c.Expiry < ExpiryAuto || c.Expiry > ExpiryNone, int(c.Expiry), "one of the Expiry constants"},
		{"GCInterval", c.GCInterval < minGCInterval, c.GCInterval, "0 (the default) or at least 100ms"},
		{"IdleTimeout", c.IdleTimeout < time.Second, c.IdleTimeout, "0 (the default) or at least 1s"},
		{"AbsoluteTimeout", c.AbsoluteTimeout > 0 && c.AbsoluteTimeout < time.Second, c.AbsoluteTimeout,
			"0 (the default), negative (no limit) or at least 1s"},
		{"Timeout", c.Timeout < time.Millisecond, c.Timeout, "0 (the default) or at least 1ms"},
		{"LockWait", c.LockWait < time.Millisecond, c.LockWait, "0 (the default) or at least 1ms"},
		{"LockLease", c.LockLease < time.Second, c.LockLease, "0 (the default) or at least 1s"},
		{"MaxSize", c.MaxSize < 0 || c.MaxSize > maxMaxSize, c.MaxSize, "0 (the default) or 1 to 15728640 bytes"},
		{"MaxSessionsPerOwner", c.MaxSessionsPerOwner < 0 || c.MaxSessionsPerOwner > maxOwned, c.MaxSessionsPerOwner,
			"0 (no limit) to 1000 (a listing)"},
	} {
		if b.bad {
			return c, fmt.Errorf("%w: Config.%s is %v: want %s", ErrInvalidConfig, b.field, b.value, b.want)
		}
	}
	c.Codec = cmp.Or[Codec](c.Codec, compactCodec{&keyCache{}})
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.TracerProvider = cmp.Or(c.TracerProvider, otel.GetTracerProvider())
	c.MeterProvider = cmp.Or(c.MeterProvider, otel.GetMeterProvider())
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
