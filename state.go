package mongostore

import (
	"sync"
	"time"
	"weak"

	"github.com/gorilla/sessions"
)

// SessionTimes are the times the store keeps for a session.
type SessionTimes struct {
	// CreatedAt is when the session began (the absolute timeout counts from
	// it), UpdatedAt its last save, ExpiresAt its end unless saved again.
	CreatedAt, UpdatedAt, ExpiresAt time.Time
}

// sessionState is what the store remembers of a session's document
// between loading (or first saving) it and saving it again, as last read or
// written: gorilla's Session has no room for it.
type sessionState struct {
	id            string // the document's _id, its chain ID; "" for none
	token         string // the session.ID it was loaded or saved with
	sid           string // the hash of the token's secret, as stored
	version              // of the document
	createdAt     time.Time
	updatedAt     time.Time
	encoded       []byte // the values, encoded
	staged        []byte // the values' encoding the middleware made just before its save, for it
	options       sessions.Options
	owner, device string        // as SetOwner left them in the values
	cookie        string        // the cookie value to send back, signed with the current key
	others        []otherCookie // the request's other cookies of the session's name
	managed       bool          // the middleware loaded the session, has not finished with it, and releases its lock after its save
	cookieSet     bool          // the store has set the session's cookie in this request
	released      bool          // the middleware has finished with the session: encoded is dropped
	loadFailed    bool          // a database error cut its load short: the stored session is unknown
	lock          string        // the holder ID of the session's lock this request holds (exclusive.go)
	attempted     [][]byte      // the MACs of this request's writes whose answers were lost since its last load or save: they may have committed
}

// otherCookie is another cookie of a request's session name: its chain,
// and the hash of its secret, without which it ends nothing.
type otherCookie struct{ chain, sid string }

// stateOf returns the state of a session stored as d, its values encoded.
func stateOf(d *document, encoded []byte, values map[any]any, options *sessions.Options) sessionState {
	st := sessionState{id: d.id, sid: d.sid, version: d.version(), createdAt: d.createdAt, updatedAt: d.updatedAt, encoded: encoded, options: *options}
	st.owner, st.device = ownerOf(values)
	return st
}

// storedState returns the state of a session as d stores it, values
// decoded, for an event about it: no encoding, and d's own MaxAge.
func storedState(d *document, values map[any]any) sessionState {
	return stateOf(d, nil, values, &sessions.Options{MaxAge: d.maxAge})
}

// times returns the session's times as st holds them.
func (st *sessionState) times() SessionTimes {
	return SessionTimes{CreatedAt: st.createdAt, UpdatedAt: st.updatedAt, ExpiresAt: st.expiresAt}
}

// sessionTable maps sessions to their state without keeping the sessions
// alive. Entries of sessions the garbage collector has reclaimed are swept
// out when the table has doubled since its last sweep: O(1) per set,
// amortized.
type sessionTable struct {
	mu        sync.Mutex
	m         map[weak.Pointer[sessions.Session]]sessionState
	nextSweep int
}

// minSweep is the table size below which it is never swept.
const minSweep = 1024

func newSessionTable() *sessionTable {
	return &sessionTable{m: make(map[weak.Pointer[sessions.Session]]sessionState), nextSweep: minSweep}
}

// get returns the state of session, or the zero state.
func (t *sessionTable) get(session *sessions.Session) sessionState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[weak.Make(session)]
}

// set records the state of session. Only its first state (the
// middleware's load) can make it managed; release ends that.
func (t *sessionTable) set(session *sessions.Session, st sessionState) {
	wp := weak.Make(session)
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.m[wp]; ok {
		st.managed = old.managed
	}
	t.m[wp] = st
	if len(t.m) >= t.nextSweep {
		t.sweep()
	}
}

// managed reports whether the middleware manages session.
func (t *sessionTable) managed(session *sessions.Session) (managed, known bool) {
	wp := weak.Make(session)
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.m[wp]
	return st.managed, ok
}

// manage records that the middleware manages session from now on, as if
// its load had been the middleware's.
func (t *sessionTable) manage(session *sessions.Session) {
	wp := weak.Make(session)
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.m[wp]
	st.managed = true
	t.m[wp] = st
	if len(t.m) >= t.nextSweep {
		t.sweep()
	}
}

// sweep removes the entries of reclaimed sessions. t.mu is held.
func (t *sessionTable) sweep() {
	for wp := range t.m {
		if wp.Value() == nil {
			delete(t.m, wp)
		}
	}
	t.nextSweep = max(2*len(t.m), minSweep)
}

// stage records enc, the encoding of session's values, for the save about
// to be made (the middleware's), or drops it (nil).
func (t *sessionTable) stage(session *sessions.Session, enc []byte) {
	wp := weak.Make(session)
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.m[wp]; ok {
		st.staged = enc
		t.m[wp] = st
	}
}

// rebase records that session, whose values now hold the changes of the
// version of st, builds on that version, as st holds it.
func (t *sessionTable) rebase(session *sessions.Session, st sessionState) {
	wp := weak.Make(session)
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.m[wp]; ok {
		old.version, old.createdAt, old.encoded, old.options = st.version, st.createdAt, st.encoded, st.options
		t.m[wp] = old
	}
}

// attempt records mac, that of a write of session whose answer was lost
// (it may have committed): a later save that meets it builds on it.
func (t *sessionTable) attempt(session *sessions.Session, mac []byte) {
	wp := weak.Make(session)
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.m[wp]; ok {
		st.attempted = append(st.attempted, mac)
		t.m[wp] = st
	}
}

// release drops the encoded values (up to MaxSize) and the lock of
// session's state, which the middleware no longer manages, and returns its
// chain and that lock, for the caller to release.
func (t *sessionTable) release(session *sessions.Session) (chain, lock string) {
	wp := weak.Make(session)
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.m[wp]; ok {
		chain, lock = st.id, st.lock
		st.encoded, st.staged, st.lock, st.released, st.managed = nil, nil, "", true, false
		t.m[wp] = st
	}
	return chain, lock
}

// forget removes the state of session.
func (t *sessionTable) forget(session *sessions.Session) {
	t.mu.Lock()
	delete(t.m, weak.Make(session))
	t.mu.Unlock()
}

// Session values that tie a session to its owner (SetOwner).
const (
	ownerKey  = "_mongostore_owner"
	deviceKey = "_mongostore_device"
)

// ownerOf returns the owner and device label session values hold.
func ownerOf(values map[any]any) (owner, device string) {
	if owner, _ = values[ownerKey].(string); owner != "" {
		device, _ = values[deviceKey].(string)
	}
	return owner, device
}
