// Package mongostore is a gorilla/sessions store that keeps sessions in
// MongoDB, or a compatible server such as FerretDB, through the official
// driver (go.mongodb.org/mongo-driver/v2).
//
//	store, err := mongostore.NewStore(ctx, client.Database("app").Collection("sessions"),
//		mongostore.Config{}, hashKey)
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//	handler := store.Middleware("session", nil)(mux)
//
// A session is one document per sign-in. Its _id, the chain ID, is 256
// random bits made at insert; the cookie holds the token
// "<chainID>.<secret>", signed (and with a block key, encrypted) as with
// sessions.NewCookieStore, and the document keeps only the SHA-256 of the
// 256-bit secret, so a chain ID alone loads nothing. A MAC derived from the
// hash key covers the values and the fields the store trusts, and a block
// key encrypts the values.
//
// Store.Get loads a session with one find by _id, its secret, MAC and
// expiry checked; a missing, expired or tampered cookie gives a new
// session, whose token is never adopted. Session.Save inserts a new
// session under a fresh chain ID, and updates a stored one with one
// conditional update, never an insert, so a session ended meanwhile stays
// ended (ErrSessionGone). RegenerateID gives a session a new secret at
// login with that same update; Restart starts afresh. Every ending is one
// delete of one document, and no document is ever inserted again. The
// middleware loads and saves for a handler, just before the response
// headers go out, and only what changed or is due to slide its expiry.
//
// Concurrent requests of one session have their changes merged key by key.
// A handler that reads, decides and writes (a one-time token) runs in an
// exclusive section instead, Middleware(name, onError, Exclusive()) or
// Store.Lock: the requests of one session that ask for it run one at a
// time across every process sharing the collection, holding a lease on its
// document (Config.LockWait, Config.LockLease, ErrLocked, EventLocked).
//
// A session lives unused for its Options.MaxAge, at most
// Config.AbsoluteTimeout from its creation. A TTL index deletes its document
// when it expires, or a GC goroutine on servers without TTL (ExpiryAuto
// picks), and the store never serves an expired session. SetOwner ties a
// session to its user, who can then list and end their sessions
// (ListSessions, EndSession, EndOtherSessions).
//
// Each operation is an OpenTelemetry span, a child of the request's, and a
// point of the metric mongostore.operation.duration, made by
// Config.TracerProvider and Config.MeterProvider; nothing recorded names a
// session. The README's Observability section lists the spans and metrics.
//
// Every error wraps one of the Err variables; test with errors.Is.
package mongostore
