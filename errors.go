package mongostore

import "errors"

// Sentinel errors. Every error the store returns wraps one of these (and,
// where there is one, the underlying driver, codec or securecookie error), so
// callers can test for them with errors.Is; the exception is a context's own
// error, which RunGC and DeleteExpired return as it is.
var (
	// ErrInvalidConfig is returned by NewStore for invalid configuration or
	// keys.
	ErrInvalidConfig = errors.New("mongostore: invalid configuration")

	// ErrInvalidCookie is returned by Get and New when the session cookie is
	// present but cannot be used: tampered, truncated, signed with an unknown
	// key, expired by its signed timestamp, or holding a malformed ID. The
	// session returned alongside it is a fresh, new session; no database
	// query was made.
	ErrInvalidCookie = errors.New("mongostore: invalid session cookie")

	// ErrTTLUnsupported is returned by NewStore in ExpiryTTL mode when the
	// server refuses TTL indexes (for example FerretDB v1, which answers
	// NotImplemented). ExpiryAuto, the default, falls back to the GC
	// goroutine on such servers instead.
	ErrTTLUnsupported = errors.New("mongostore: server does not support TTL indexes")

	// ErrIndexConflict is returned by NewStore when an existing index on
	// expiresAt that the store did not create has TTL options that differ
	// from the ones the store needs, and collMod could not change them. The
	// error names the index and the command that drops it.
	ErrIndexConflict = errors.New("mongostore: conflicting index on expiresAt")

	// ErrTooLarge is returned by Save when the encoded session values exceed
	// Config.MaxSize. Nothing is written.
	ErrTooLarge = errors.New("mongostore: session too large")

	// ErrEncode is returned by Save when the session values cannot be
	// encoded by the store's codec (for example a type that was not
	// registered with gob). Nothing is written.
	ErrEncode = errors.New("mongostore: cannot encode session values")

	// ErrDecode is returned by Get and New when a stored session cannot be
	// decoded (a corrupt document, or data written with another codec). The
	// session returned alongside it is a fresh, new session.
	ErrDecode = errors.New("mongostore: cannot decode stored session")

	// ErrSessionGone is returned by Save and RegenerateID when the session was
	// loaded from the database but its document has since been deleted (a
	// logout elsewhere, the GC, or the TTL monitor) or has expired. The store
	// never recreates such a session; the client's next request gets a new
	// one.
	ErrSessionGone = errors.New("mongostore: session was deleted or expired after it was loaded")

	// ErrDatabase wraps failures of database operations (network errors,
	// timeouts, server errors).
	ErrDatabase = errors.New("mongostore: database error")

	// ErrClosed is returned by RunGC and DeleteExpired after Close.
	ErrClosed = errors.New("mongostore: store closed")
)
