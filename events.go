package mongostore

import "time"

// Event is one transition of a session's life, given to Config.OnEvent.
// It never holds the session ID, the cookie or the values.
type Event struct {
	Kind   EventKind
	Reason EndReason // why an EventEnded session ended; "" for other kinds

	// Handle names the session's sign-in chain, as OwnedSession.Handle
	// does: it stays the same across RegenerateID and key rotation.
	Handle string
	// Owner and Device are as given to SetOwner; "" for none.
	Owner, Device string
	// Waited is how long an EventLocked request waited for the lock.
	Waited time.Duration
	SessionTimes
}

// EventKind says what happened to a session.
type EventKind string

// The kinds of Event.
const (
	EventCreated     EventKind = "created"     // first stored
	EventRegenerated EventKind = "regenerated" // given a new secret by RegenerateID
	EventEnded       EventKind = "ended"       // ended on purpose: see Event.Reason
	EventExpired     EventKind = "expired"     // met expired by a load, or deleted by a GC sweep
	EventLocked      EventKind = "locked"      // a request took the session's lock (Exclusive, Lock)
)

// EndReason says why a session ended.
type EndReason string

// The reasons of EventEnded.
const (
	EndLogout     EndReason = "logout"                // saved with Options.MaxAge < 0
	EndRestart    EndReason = "restart"               // Store.Restart
	EndByHandle   EndReason = "ended_by_handle"       // Store.EndSession
	EndEverywhere EndReason = "signed_out_everywhere" // Store.EndOtherSessions
	EndLimit      EndReason = "limit"                 // Config.MaxSessionsPerOwner
)
