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
	// data is the encoded values as last read or written.
	data []byte
	// options is a copy of the session's options as last read or written.
	options sessions.Options
}

// stateTable maps sessions to their state without keeping the sessions
// alive: entries go away when the garbage collector reclaims the session.
type stateTable struct {
	mu sync.Mutex
	m  map[weak.Pointer[sessions.Session]]sessionState
}

func newStateTable() *stateTable {
	return &stateTable{m: make(map[weak.Pointer[sessions.Session]]sessionState)}
}

// get returns the state of s, if any.
func (t *stateTable) get(s *sessions.Session) (sessionState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.m[weak.Make(s)]
	return st, ok
}

// set records the state of s.
func (t *stateTable) set(s *sessions.Session, st sessionState) {
	wp := weak.Make(s)
	t.mu.Lock()
	_, existed := t.m[wp]
	t.m[wp] = st
	t.mu.Unlock()
	if !existed {
		runtime.AddCleanup(s, t.drop, wp)
	}
}

// forget removes the state of s. The cleanup registered by set still runs
// later and finds nothing to do, unless s was set again meanwhile; then the
// entry lives until s is collected, which is what we want.
func (t *stateTable) forget(s *sessions.Session) {
	t.mu.Lock()
	delete(t.m, weak.Make(s))
	t.mu.Unlock()
}

func (t *stateTable) drop(wp weak.Pointer[sessions.Session]) {
	t.mu.Lock()
	delete(t.m, wp)
	t.mu.Unlock()
}

// len returns the number of tracked sessions (for tests).
func (t *stateTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
