package mongostore

import (
	"fmt"
	"log/slog"
	"time"
)

// DefaultMaxAge is the Max-Age, in seconds, of new sessions' cookies
// (Store.Options.MaxAge), and so their idle timeout: one day.
const DefaultMaxAge = 24 * 60 * 60

// Defaults of the Config fields of the same names.
const (
	DefaultIdleTimeout     = 24 * time.Hour
	DefaultAbsoluteTimeout = 7 * 24 * time.Hour
	DefaultMaxSize         = 1 << 20 // bytes of encoded session values
	DefaultGCInterval      = time.Minute
	DefaultTimeout         = 5 * time.Second
)

const (
	minKeyLength           = 32       // bytes of a hash key or IDHashKey
	maxMaxSize             = 15 << 20 // leaves room for the rest of a 16 MiB BSON document
	minGCInterval          = 100 * time.Millisecond
	defaultCookieMaxLength = 4096
)

// Config is the store's configuration. The zero value is valid and gives the
// defaults documented on each field. Cookie attributes are not here: they are
// in Store.Options, as with sessions.CookieStore.
type Config struct {
	// Expiry says how expired documents are removed. Default ExpiryAuto.
	Expiry ExpiryMode

	// GCInterval is the time between two sweeps of the GC goroutine
	// (ExpiryGC, and ExpiryAuto on a server without TTL).
	// Default one minute; at least 100ms.
	GCInterval time.Duration

	// DefaultIdleTimeout is the server-side idle timeout of sessions whose
	// Options.MaxAge is 0 (cookies that last until the browser closes). For
	// sessions with MaxAge > 0 the idle timeout is MaxAge. Each save moves the
	// expiry forward by the idle timeout. Default 24 hours.
	DefaultIdleTimeout time.Duration

	// AbsoluteTimeout is the longest a session may live from its creation,
	// whatever its activity: a save never moves expiresAt past
	// creation + AbsoluteTimeout. Set, it applies to every session, even one
	// whose MaxAge is longer. Unset (zero), a session lives at most
	// DefaultAbsoluteTimeout (7 days) or its own idle timeout (MaxAge),
	// whichever is longer, so a lifetime the application sets explicitly
	// (a 30-day "remember me") is honoured in full. Negative disables the
	// absolute timeout.
	AbsoluteTimeout time.Duration

	// Timeout bounds each operation the store performs on the database: a
	// load, a save, a delete, the index set-up in NewStore. (A GC sweep's
	// delete may take GCInterval if that is longer.) Past it the operation fails with an error wrapping
	// ErrDatabase (and context.DeadlineExceeded), instead of waiting out the
	// driver's 30-second server selection when the database is down. Saves
	// do not stop when the request's context is cancelled (a client that
	// hangs up keeps the change it asked for), only after Timeout. Default
	// DefaultTimeout (5 seconds).
	Timeout time.Duration

	// MaxSize is the largest encoded size, in bytes, of a session's values.
	// Save refuses larger sessions with ErrTooLarge. Default 1 MiB; at most
	// 15 MiB (MongoDB documents are limited to 16 MiB).
	MaxSize int

	// Codec encodes session values. Default CompactCodec, which encodes
	// common values compactly and anything else with gob, as gorilla's
	// stores do. (Sessions stored by releases before document format
	// version 3, when the default was GobCodec, are still read with gob.)
	Codec Codec

	// IDHashKey, when set, makes the document _id HMAC-SHA256(IDHashKey, ID)
	// instead of SHA-256(ID). Either way the database never holds a raw
	// session ID. Changing it invalidates all sessions.
	IDHashKey []byte

	// Logger receives the store's logs (GC sweeps, expiry mode decisions).
	// Logs never contain session IDs or values. Default slog.Default().
	Logger *slog.Logger

	// legacyGob says Codec was left to its default, so documents older than
	// format version 3 hold gob, the default of their time.
	legacyGob bool

	// afterSweep, when set (by tests), runs after each GC sweep.
	afterSweep func()

	// Now returns the current time. The store computes expiresAt and checks
	// what it reads with it, so application servers' clocks should be in sync with
	// each other and with the database server. Default time.Now; tests may
	// set a fake clock.
	Now func() time.Time
}

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Expiry < ExpiryAuto || c.Expiry > ExpiryNone {
		return c, fmt.Errorf("%w: unknown Expiry mode %d", ErrInvalidConfig, int(c.Expiry))
	}
	if c.GCInterval == 0 {
		c.GCInterval = DefaultGCInterval
	}
	if c.GCInterval < minGCInterval {
		return c, fmt.Errorf("%w: GCInterval %v is shorter than %v", ErrInvalidConfig, c.GCInterval, minGCInterval)
	}
	if c.DefaultIdleTimeout == 0 {
		c.DefaultIdleTimeout = DefaultIdleTimeout
	}
	if c.DefaultIdleTimeout < time.Second {
		return c, fmt.Errorf("%w: DefaultIdleTimeout %v is shorter than a second", ErrInvalidConfig, c.DefaultIdleTimeout)
	}
	if c.AbsoluteTimeout > 0 && c.AbsoluteTimeout < time.Second {
		return c, fmt.Errorf("%w: AbsoluteTimeout %v is shorter than a second", ErrInvalidConfig, c.AbsoluteTimeout)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Timeout < 0 {
		return c, fmt.Errorf("%w: Timeout %v is negative", ErrInvalidConfig, c.Timeout)
	}
	if c.MaxSize == 0 {
		c.MaxSize = DefaultMaxSize
	}
	if c.MaxSize < 0 || c.MaxSize > maxMaxSize {
		return c, fmt.Errorf("%w: MaxSize %d is not between 1 and %d", ErrInvalidConfig, c.MaxSize, maxMaxSize)
	}
	if c.Codec == nil {
		c.Codec = CompactCodec{}
		c.legacyGob = true
	}
	if c.IDHashKey != nil && len(c.IDHashKey) < minKeyLength {
		return c, fmt.Errorf("%w: IDHashKey has %d bytes, want at least %d", ErrInvalidConfig, len(c.IDHashKey), minKeyLength)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
