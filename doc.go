// Package mongostore is a gorilla/sessions store that keeps sessions in
// MongoDB, or a MongoDB-compatible server such as FerretDB, through the
// official driver (go.mongodb.org/mongo-driver/v2).
//
//	store, err := mongostore.NewStore(ctx, client.Database("app").Collection("sessions"),
//		mongostore.Config{}, hashKey)
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//	handler := store.Middleware("session", nil)(mux)
//
// # A request
//
// Store.Get loads the session once per request: one find by _id, the
// document's MAC and expiry checked. A missing, expired or tampered cookie
// gives a new session; its ID is never adopted. Session.Save updates the
// document, never inserting it again, so a session ended meanwhile stays
// ended (ErrSessionGone); a new session is inserted under a fresh ID.
// Store.RegenerateID moves a session to a new ID at login, Store.Restart
// starts a fresh one. Every command is bounded by Config.Timeout, and saves
// outlive a client that hangs up.
//
// Store.Middleware does the loading and saving for a handler: it saves the
// session just before the response headers go out, only if it changed or
// its expiry is due to slide forward.
//
// # Keys and documents
//
// NewStore takes key pairs as sessions.NewCookieStore does: a hash key of
// at least 32 bytes and an optional block key; more pairs rotate keys. The
// cookie holds a random 256-bit session ID, signed (and encrypted with a
// block key). The document's _id is the SHA-256 of the ID, never the ID
// itself; a MAC derived from the hash key covers every field the store
// trusts, and a block key encrypts the values. Values are decoded only once
// the MAC checks out.
//
// # Expiry
//
// A session lives unused for its Options.MaxAge (Config.IdleTimeout for a
// cookie without one), at most Config.AbsoluteTimeout from its creation.
// Its document's expiresAt says when it ends: a TTL index deletes it then,
// or a GC goroutine on servers without TTL (ExpiryAuto picks), and the
// store never serves an expired session.
//
// # Owners
//
// SetOwner ties a session to its user at login, so that the user can list
// their sessions (Store.ListSessions) and end them (Store.EndSession,
// Store.EndOtherSessions), through an index of a keyed digest of the owner.
//
// Every error wraps one of the Err variables; test with errors.Is.
package mongostore
