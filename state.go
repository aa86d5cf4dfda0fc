package mongostore

import (
	"runtime"
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
}

// sessionTable maps sessions to values without keeping the sessions alive:
// entries go away when the garbage collector reclaims the session. The store
// keeps each session's sessionState in one, and the middleware its pending
// writer in another.
type sessionTable[V any] struct {
	mu sync.Mutex
	m  map[weak.Pointer[sessions.Session]]V
}

func newSessionTable[V any]() *sessionTable[V] {
	return &sessionTable[V]{m: make(map[weak.Pointer[sessions.Session]]V)}
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
	_, existed := t.m[wp]
	t.m[wp] = st
	t.mu.Unlock()
	if !existed {
		runtime.AddCleanup(s, t.drop, wp)
	}
}

// forget removes the value of s. The cleanup registered by set still runs
// later and finds nothing to do, unless s was set again meanwhile; then the
// entry lives until s is collected, which is what we want.
func (t *sessionTable[V]) forget(s *sessions.Session) {
	t.mu.Lock()
	delete(t.m, weak.Make(s))
	t.mu.Unlock()
}

func (t *sessionTable[V]) drop(wp weak.Pointer[sessions.Session]) {
	t.mu.Lock()
	delete(t.m, wp)
	t.mu.Unlock()
}

// len returns the number of sessions with a value (for tests).
func (t *sessionTable[V]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
