// Package mongostore is a gorilla/sessions store that keeps sessions in
// MongoDB, or a MongoDB-compatible server such as FerretDB, through the
// official Go driver (go.mongodb.org/mongo-driver/v2).
//
// # Keys
//
// NewStore takes key pairs as sessions.NewCookieStore does: a hash key of at
// least 32 bytes, which signs the cookie, and an optional block key, which
// encrypts it; more pairs rotate keys. The cookie holds only a random
// 256-bit session ID. The database holds the SHA-256 of that ID (or its
// HMAC with Config.IDHashKey), never the ID itself, and a MAC over the
// fields the store trusts, with a key derived (HKDF) from the hash key, so
// that data written by anyone without the app's keys is never decoded. All
// of it is in keys.go.
//
//	store, err := mongostore.NewStore(ctx, client.Database("app").Collection("sessions"),
//		mongostore.Config{}, hashKey)
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//
// # What a request does
//
// Store.Get loads the session once per request: one find by _id, the
// expiry and the MAC checked by the store (store.go, collection.go). A
// missing, expired, tampered or foreign cookie gives a new, empty session;
// its ID is never adopted. Session.Save writes it back with one
// findAndModify by _id that never inserts, so a session ended meanwhile
// (logged out elsewhere, expired) stays ended: Save returns ErrSessionGone.
// A new session is inserted under a fresh ID. At login, Store.Restart
// starts a fresh session under a new ID (Store.RegenerateID does so keeping
// the values). Saves outlive a client that hangs up, and every
// database operation is bounded by Config.Timeout.
//
//	session, _ := store.Get(r, "session")
//	session.Values["user"] = "ada"
//	if err := session.Save(r, w); err != nil {
//		http.Error(w, "cannot save the session", http.StatusInternalServerError)
//		return
//	}
//
// # Expiry
//
// Each document carries expiresAt: the session's idle timeout (its
// Options.MaxAge) from its last save, never past its absolute limit from its
// creation. The zero Config (ExpiryAuto) makes the server delete expired
// documents with a TTL index where it can (MongoDB, FerretDB v2) and starts
// a GC goroutine where it cannot (FerretDB v1), logging which (expiry.go,
// gc.go). Whatever deletes them, the store never serves an expired session.
//
// # The middleware
//
// Store.Middleware loads the session for a handler and saves it, only if it
// changed (or its expiry is due to slide forward), just before the response
// headers go out, so the cookie is never lost (middleware.go, writer.go).
// Handlers read it with Session.
//
//	mux := http.NewServeMux()
//	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
//		session := mongostore.Session(r, "session")
//		fmt.Fprintf(w, "hello %v\n", session.Values["user"])
//	})
//	handler := store.Middleware("session", mongostore.MiddlewareOptions{})(mux)
//
// # Per-user sessions
//
// SetOwner ties a session to its user (at login), so that the user can see
// their sessions and end them: Store.ListSessions, Store.EndSession,
// Store.EndOtherSessions ("sign out everywhere else") and
// Store.EndAllSessions, all answered from a sparse index on the owner
// (owners.go). Ended sessions stay ended.
//
//	mongostore.SetOwner(session, userID, "Firefox on Linux")
//	others, err := store.EndOtherSessions(ctx, userID, session)
//
// Every error wraps one of the sentinel errors in errors.go; test for them
// with errors.Is.
package mongostore
