package mongostore

import (
	"sync"
	"time"
	"weak"

	"github.com/gorilla/sessions"
)

// sessionState is what the store remembers about a session between loading
// (or first saving) it and saving it again. gorilla's Session has no room for
// it, and keeping it in Values would leak into the application's data.
type sessionState struct {
	// docID is the _id of the document the session was loaded from or
	// inserted as. Save updates that document (and never inserts it again),
	// so a session deleted meanwhile is not resurrected.
	docID string
	// createdAt anchors the absolute timeout.
	createdAt time.Time
	// savedAt is when the document was last written.
	savedAt time.Time
	// expiresAt is the expiry as last read or written.
	expiresAt time.Time
	// encoded is the values as last read or written, encoded by the codec
	// (not encrypted).
	encoded []byte
	// options is a copy of the session's options as last read or written.
	options sessions.Options
	// owned says the document has an owner field (SetOwner).
	owned bool
	// cookie is a cookie value, signed with the current key pair, that
	// holds the session's ID: the one the client sent, or the last one sent
	// to it. Saves send it again rather than sign the same ID anew (the
	// signed timestamp is not checked: the document decides expiry).
	cookie string
}

// sessionTable maps sessions to values without keeping the sessions alive.
// The store keeps each session's sessionState in one, and the middleware
// its pending writer in another. Entries of sessions the garbage collector
// has reclaimed are swept out when the table has doubled since its last
// sweep, which costs O(1) per set, amortized, instead of a runtime cleanup
// registered for every session.
type sessionTable[V any] struct {
	mu        sync.Mutex
	m         map[weak.Pointer[sessions.Session]]V
	nextSweep int // sweep once the table holds this many entries
}

// minSweep is the table size below which it is never swept.
const minSweep = 1024

func newSessionTable[V any]() *sessionTable[V] {
	return &sessionTable[V]{m: make(map[weak.Pointer[sessions.Session]]V), nextSweep: minSweep}
}

// get returns the value of s, if any.
func (t *sessionTable[V]) get(s *sessions.Session) (V, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.m[weak.Make(s)]
	return st, ok
}

// set records the value of s.
func (t *sessionTable[V]) set(s *sessions.Session, st V) {
	wp := weak.Make(s)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[wp] = st
	if len(t.m) >= t.nextSweep {
		t.sweep()
	}
}

// sweep removes the entries of reclaimed sessions. t.mu is held.
func (t *sessionTable[V]) sweep() {
	for wp := range t.m {
		if wp.Value() == nil {
			delete(t.m, wp)
		}
	}
	t.nextSweep = max(2*len(t.m), minSweep)
}

// forget removes the value of s.
func (t *sessionTable[V]) forget(s *sessions.Session) {
	t.mu.Lock()
	delete(t.m, weak.Make(s))
	t.mu.Unlock()
}

// len returns the number of sessions with a value, once the entries of
// reclaimed sessions are swept out (for tests).
func (t *sessionTable[V]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep()
	return len(t.m)
}
