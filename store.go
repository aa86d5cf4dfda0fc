package mongostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Store is a sessions.Store that keeps sessions in a MongoDB collection.
// It is safe for concurrent use, and many processes may share one
// collection.
type Store struct {
	// Options are the default cookie options of new sessions; each session
	// gets a copy. NewStore sets Path "/", MaxAge one day, HttpOnly and
	// SameSite Lax. Set Secure in production.
	Options *sessions.Options

	coll    collection
	cookies cookieCodec
	sealer  *sealer
	cfg     Config
	states  *sessionTable
	saving  idLocks    // FerretDB v1: one save of a session at a time
	expiry  ExpiryMode // in effect: ExpiryAuto resolved
	tel     *telemetry

	stop       context.CancelFunc // stops the background work
	background sync.WaitGroup
}

var _ sessions.Store = (*Store)(nil)

// SessionTimes are the times the store keeps for a session.
type SessionTimes struct {
	// CreatedAt is when the session began (the absolute timeout counts from
	// it), UpdatedAt its last save, ExpiresAt its end unless saved again.
	CreatedAt, UpdatedAt, ExpiresAt time.Time
}

// Get returns the session called name for the request, loading it at most
// once per request through sessions.GetRegistry. See New for errors.
func (s *Store) Get(r *http.Request, name string) (*sessions.Session, error) {
	return sessions.GetRegistry(r).Get(s, name)
}

// New returns the session called name: the stored one if the request's
// cookie names a live document, else a new one (never nil). An unusable
// cookie gives ErrInvalidCookie, an unreadable document ErrDecode, a
// database failure ErrDatabase, with a new session. Of several cookies
// called name (a sibling domain may toss one in), the first that verifies
// is loaded, and ending the session ends the others too.
func (s *Store) New(r *http.Request, name string) (*sessions.Session, error) {
	session := sessions.NewSession(s, name)
	session.Options = s.newOptions()
	session.IsNew = true
	ctx, sp := s.tel.start(r.Context(), opLoad)
	sp.outcome = outcomeNew
	ids, reusable, err := s.cookies.sessionIDs(r, name)
	if len(ids) > 0 {
		ctx, cancel := s.opContext(ctx, false)
		err = s.load(ctx, session, ids, reusable, &sp)
		cancel()
	}
	sp.end(err)
	return session, err
}

// load reads into session the first live document of ids, the request's
// cookies' session IDs in order (a dead cookie tossed in ahead must not hide
// the live one). The others never give the session their ID, and ending the
// session ends them too, even after a database error. sp learns the
// outcome.
func (s *Store) load(ctx context.Context, session *sessions.Session, ids, reusable []string, sp *span) error {
	sp.outcome = outcomeExpired
	st := sessionState{}
	for _, id := range ids {
		st.others = append(st.others, docID(id))
	}
	defer func() { s.states.set(session, st) }()
	var decodeErr error
	for i, id := range ids {
		raw, err := s.coll.find(ctx, st.others[i])
		if raw == nil {
			if err != nil {
				return err
			}
			continue
		}
		d, encoded, values, err := s.open(raw)
		if err != nil || !s.live(&d, s.cfg.Now()) {
			decodeErr = cmp.Or(decodeErr, err)
			continue
		}
		session.ID, session.Values, session.IsNew = id, values, false
		session.Options.MaxAge = d.maxAge // the session's own lifetime ("remember me")
		sp.outcome, sp.size = outcomeLoaded, len(encoded)
		st = stored(&d, encoded, session, reusable[i], slices.Delete(st.others, i, i+1))
		return nil
	}
	return decodeErr
}

// open parses a stored document, checks its MAC, decrypts its data and
// decodes the values, which it returns with their encoding. Bytes that fail
// the MAC never reach the codec. Errors wrap ErrDecode.
func (s *Store) open(raw bson.Raw) (d document, encoded []byte, values map[any]any, err error) {
	d, err = parseDocument(raw)
	if err == nil && !s.sealer.verify(&d) {
		err = errors.New("the document fails its integrity check (written without this application's keys)")
	}
	if err == nil {
		encoded, err = s.sealer.unwrap(d.id, d.data)
	}
	if err == nil {
		values, err = s.cfg.Codec.Decode(encoded)
	}
	if err != nil {
		return d, nil, nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return d, encoded, values, nil
}

// live reports whether d is live at now: not expired, nor past the
// absolute timeout in force (maybe shorter than when it was saved).
func (s *Store) live(d *document, now time.Time) bool {
	limit, ok := s.absoluteLimit(d.maxAge, d.createdAt)
	return d.expiresAt.After(now) && (!ok || limit.After(now))
}

// Save writes the session and sets its cookie. Options.MaxAge < 0 ends it.
// A loaded session is updated only if its document is still live, never
// inserted again (else ErrSessionGone: it stays ended); a new one is
// inserted under a fresh ID; one whose ID the application changed is saved
// as RegenerateID would. Values that cannot be encoded, or are larger than
// Config.MaxSize, give ErrEncode. Save is bounded by Config.Timeout, not
// by the request's context. Options that browsers would refuse for a
// __Host- or __Secure- cookie give ErrInvalidConfig.
func (s *Store) Save(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	return s.save(r.Context(), opSave, w, session, nil, false)
}

// save commits session as operation op, bounded by Config.Timeout and not
// by ctx's cancellation; touch says it is the middleware's save of an
// unchanged session.
func (s *Store) save(ctx context.Context, op operation, w http.ResponseWriter, session *sessions.Session, encoded []byte, touch bool) error {
	ctx, cancel := s.opContext(ctx, true)
	defer cancel()
	ctx, sp := s.tel.start(ctx, op)
	sp.touch = touch
	err := s.commit(ctx, w, session, encoded, &sp)
	sp.end(err)
	return err
}

// commit ends, inserts, regenerates or updates session; encoded, if not
// nil, is its values encoded. sp learns the outcome.
func (s *Store) commit(ctx context.Context, w http.ResponseWriter, session *sessions.Session, encoded []byte, sp *span) error {
	if session.Options == nil {
		session.Options = s.newOptions()
	}
	st := s.states.get(session)
	if session.Options.MaxAge < 0 {
		sp.outcome = outcomeEnded
		return s.end(ctx, w, session, st) // whatever the cookie's options: deleting needs none
	}
	if err := checkCookiePrefix(session.Name(), session.Options); err != nil {
		return err
	}
	data, err := s.encode(session.Values, encoded)
	if err != nil {
		return err
	}
	sp.size = len(data)
	if st.id == "" {
		sp.outcome = outcomeInserted
		now := s.cfg.Now()
		return s.insert(ctx, w, session, st, data, now, now)
	}
	if err := s.coll.detect(ctx); err != nil {
		return err
	}
	if s.coll.exactID() { // no atomic conditional update: one save at a time
		unlock, err := s.saving.lock(ctx, st.id)
		if err != nil {
			return err
		}
		defer unlock()
	}
	now := s.cfg.Now()
	switch {
	case session.ID == "" || docID(session.ID) != st.id:
		sp.outcome = outcomeRegenerated
		return s.regenerate(ctx, w, session, st, data, now, sp)
	}
	sp.outcome = outcomeUpdated
	return s.update(ctx, w, session, st, data, now, sp)
}

// encode encodes values, unless encoded holds them, and enforces
// Config.MaxSize.
func (s *Store) encode(values map[any]any, encoded []byte) ([]byte, error) {
	data := encoded
	if data == nil {
		var err error
		if data, err = s.cfg.Codec.Encode(values); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEncode, err)
		}
	}
	if len(data) > s.cfg.MaxSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, more than MaxSize (%d)", ErrEncode, len(data), s.cfg.MaxSize)
	}
	return data, nil
}

// newDocument returns session's sealed document id at revision rev.
func (s *Store) newDocument(session *sessions.Session, id string, rev int64, data []byte, createdAt, now time.Time) document {
	maxAge := session.Options.MaxAge
	d := document{id: id, rev: rev, createdAt: createdAt.Truncate(time.Millisecond), updatedAt: now.Truncate(time.Millisecond),
		expiresAt: s.expiresAt(maxAge, createdAt, now), maxAge: maxAge, data: s.sealer.wrap(id, data)}
	if owner, _ := ownerOf(session.Values); owner != "" {
		d.owner = s.sealer.ownerDigest(owner)
	}
	s.sealer.seal(&d)
	return d
}

// stored returns the state of session once d (data encoded) is stored.
func stored(d *document, data []byte, session *sessions.Session, cookie string, others []string) sessionState {
	return sessionState{id: d.id, rev: d.rev, mac: d.mac, createdAt: d.createdAt, updatedAt: d.updatedAt, expiresAt: d.expiresAt,
		encoded: data, options: *session.Options, owned: d.owner != "", cookie: cookie, others: others}
}

// update writes session's document, st.id, if it is still live and at the
// revision st holds. If another save changed it meanwhile, this request's
// changes are applied over that one's (see merge.go) and written again, up
// to maxSaveAttempts writes; a session that ended meanwhile stays ended.
// sp learns the extra writes and the size written.
func (s *Store) update(ctx context.Context, w http.ResponseWriter, session *sessions.Session, st sessionState, data []byte, now time.Time, sp *span) error {
	var mine *changes // this request's changes, once a conflict needs them
	ownOptions := *session.Options != st.options
	for attempt := 1; ; attempt++ {
		sp.retries, sp.size = attempt-1, len(data)
		d := s.newDocument(session, st.id, st.rev+1, data, st.createdAt, now)
		if !d.expiresAt.After(now) {
			return fmt.Errorf("%w: absolute timeout reached", ErrSessionGone)
		}
		theirs, err := s.write(ctx, &d, st, now)
		if err != nil {
			return err
		}
		if theirs == nil {
			if attempt > 1 {
				s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "mongostore: merged concurrent changes",
					slog.String("session", session.Name()), slog.Int("retries", attempt-1))
			}
			return s.sent(w, session, stored(&d, data, session, st.cookie, st.others), now)
		}
		if attempt == maxSaveAttempts {
			return fmt.Errorf("%w: %d writes met concurrent saves", ErrConflict, attempt)
		}
		if mine == nil {
			c := diff(s.baseValues(st), session.Values)
			mine = &c
		}
		od, merged, err := s.merge(session, theirs, mine, ownOptions)
		if err != nil {
			return err
		}
		data, st.createdAt = merged, od.createdAt
		if s.coll.exactID() { // this save wrote over theirs: the stored document is d
			st.rev, st.mac, st.owned = max(od.rev, d.rev), d.mac, d.owner != ""
		} else {
			st.rev, st.mac, st.owned = od.rev, od.mac, od.owner != ""
		}
	}
}

// write stores d over the document st describes, if it is still live, and
// returns nil; or, if another save changed it since, the document that
// save wrote. A session no longer live gives ErrSessionGone.
func (s *Store) write(ctx context.Context, d *document, st sessionState, now time.Time) (bson.Raw, error) {
	if !s.coll.exactID() {
		if ok, err := s.coll.updateAt(ctx, d, st.rev, st.owned, now); ok || err != nil {
			return nil, err
		}
		raw, err := s.coll.find(ctx, d.id)
		switch {
		case err != nil:
			return nil, err
		case raw == nil || !live(raw, now):
			return nil, ErrSessionGone
		}
		return raw, nil
	}
	// FerretDB v1: a write on exactly {_id} that returns the document it
	// replaced. Near its expiry (within Config.Timeout) the filter adds
	// expiresAt > now, so an expired session is never extended.
	var liveAt time.Time
	if !st.expiresAt.After(now.Add(s.cfg.Timeout)) {
		liveAt = now
	}
	before, err := s.coll.replace(ctx, d, st.owned, liveAt)
	switch {
	case err != nil:
		return nil, err
	case before == nil:
		return nil, ErrSessionGone
	case !live(before, now): // the write reached an ended session: delete it, as the TTL monitor would
		if _, err := s.coll.delete(ctx, st.id); err != nil {
			return nil, fmt.Errorf("%w; %w", ErrSessionGone, err)
		}
		return nil, ErrSessionGone
	case isVersion(before, st.mac):
		return nil, nil
	}
	return before, nil
}

// baseValues returns the values as st says they were loaded, or nil if it
// no longer holds them.
func (s *Store) baseValues(st sessionState) map[any]any {
	if st.encoded == nil {
		return nil
	}
	values, err := s.cfg.Codec.Decode(st.encoded)
	if err != nil {
		return nil
	}
	return values
}

// merge makes session's values mine applied over those of theirs, the
// document another save wrote, and returns that document and the values
// encoded. Unless this request changed the session's options
// (ownOptions), the MaxAge of theirs applies.
func (s *Store) merge(session *sessions.Session, theirs bson.Raw, mine *changes, ownOptions bool) (document, []byte, error) {
	od, _, values, err := s.open(theirs)
	if err != nil {
		return od, nil, err
	}
	mine.apply(values)
	if !ownOptions {
		session.Options.MaxAge = od.maxAge
	}
	session.Values = values
	data, err := s.encode(values, nil)
	return od, data, err
}

// insert stores session as a new document under a fresh ID.
func (s *Store) insert(ctx context.Context, w http.ResponseWriter, session *sessions.Session, st sessionState, data []byte, createdAt, now time.Time) error {
	id := newSessionID()
	d := s.newDocument(session, docID(id), 1, data, createdAt, now)
	if err := s.coll.insert(ctx, &d); err != nil {
		return err
	}
	session.ID = id
	return s.sent(w, session, stored(&d, data, session, "", st.others), now)
}

// regenerate moves session from st.id to a fresh ID, keeping its values
// and creation time. The new document goes in first and the old one out
// after, so that ending the owner's sessions meanwhile ends the new one
// too; if the old one had ended, the new one is deleted. sp learns of a
// merge.
func (s *Store) regenerate(ctx context.Context, w http.ResponseWriter, session *sessions.Session, st sessionState, data []byte, now time.Time, sp *span) error {
	id := newSessionID()
	d := s.newDocument(session, docID(id), 1, data, st.createdAt, now)
	if !d.expiresAt.After(now) {
		return fmt.Errorf("%w: absolute timeout reached", ErrSessionGone)
	}
	if err := s.coll.insert(ctx, &d); err != nil {
		s.detach(session)
		return err
	}
	before, err := s.coll.remove(ctx, st.id)
	if err != nil || before == nil || !live(before, now) {
		cleanCtx, cancel := s.opContext(ctx, true) // ctx may be what timed out
		defer cancel()
		_, derr := s.coll.delete(cleanCtx, d.id)
		if err != nil || derr != nil {
			s.detach(session) // a later save inserts afresh, never under the old ID
			return errors.Join(err, derr)
		}
		return ErrSessionGone // and the next save of this session says so again
	}
	session.ID = id
	moved := stored(&d, data, session, "", st.others)
	if isVersion(before, st.mac) {
		return s.sent(w, session, moved, now)
	}
	// Another save changed the old document since it was loaded: apply
	// this request's changes over it, in the new document.
	sp.merged = true
	mine := diff(s.baseValues(st), session.Values)
	if _, data, err = s.merge(session, before, &mine, *session.Options != st.options); err != nil {
		return err
	}
	return s.update(ctx, w, session, moved, data, now, sp)
}

// sent records st, the state of session as written, and sets its cookie.
func (s *Store) sent(w http.ResponseWriter, session *sessions.Session, st sessionState, now time.Time) error {
	if st.cookie == "" {
		var err error
		if st.cookie, err = s.cookies.encode(session.Name(), session.ID); err != nil {
			return err
		}
	}
	s.states.set(session, st)
	setCookie(w, session.Name(), st.cookie, session.Options, st.expiresAt, now)
	return nil
}

// end deletes the documents of session and of the request's other
// cookies of its name, expires the cookie, and forgets the ID.
func (s *Store) end(ctx context.Context, w http.ResponseWriter, session *sessions.Session, st sessionState) error {
	if err := s.deleteAll(ctx, session, st); err != nil {
		return err
	}
	s.detach(session)
	setCookie(w, session.Name(), "", session.Options, time.Time{}, time.Time{})
	return nil
}

// deleteAll deletes the documents of session and st.others.
func (s *Store) deleteAll(ctx context.Context, session *sessions.Session, st sessionState) error {
	ids := st.others
	if st.id != "" {
		ids = append(ids, st.id)
	} else if validSessionID(session.ID) {
		ids = append(ids, docID(session.ID))
	}
	_, err := s.coll.delete(ctx, ids...)
	return err
}

// detach forgets the session's ID and state: its next save inserts it
// under a fresh ID.
func (s *Store) detach(session *sessions.Session) {
	s.states.forget(session)
	session.ID = ""
}

// RegenerateID moves the session to a new ID, keeping its values and its
// creation time (the absolute timeout still counts from it), and sets the
// new cookie: call it when privileges change, to defeat session fixation.
// If the old session ended meanwhile, it returns ErrSessionGone and later
// saves do too; after any other failure, a later save stores the session
// under a fresh ID, never under the old one.
func (s *Store) RegenerateID(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	session.ID = ""
	return s.save(r.Context(), opRegenerate, w, session, nil, false)
}

// Restart ends the session's stored life and empties it, so that its next
// save stores it under a fresh ID: call it at login when nothing of the
// anonymous session is kept. Unlike RegenerateID, it succeeds whatever
// became of the old session (a login racing a logout gets a fresh one). A
// database failure gives ErrDatabase; the session is emptied all the same.
func (s *Store) Restart(r *http.Request, session *sessions.Session) error {
	ctx, cancel := s.opContext(r.Context(), true)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opEnd)
	sp.outcome = outcomeEnded
	err := s.deleteAll(ctx, session, s.states.get(session))
	sp.end(err)
	s.detach(session)
	clear(session.Values)
	session.IsNew = true
	return err
}

// Times returns the session's times as last loaded or saved by this
// store, and false for a session that is not stored.
func (s *Store) Times(session *sessions.Session) (SessionTimes, bool) {
	st := s.states.get(session)
	return SessionTimes{CreatedAt: st.createdAt, UpdatedAt: st.updatedAt, ExpiresAt: st.expiresAt}, st.id != ""
}

// MaxAge sets Options.MaxAge of new sessions, in seconds, as
// sessions.CookieStore.MaxAge does: how long a session lives unused (0:
// until the browser closes, Config.IdleTimeout on the server).
func (s *Store) MaxAge(age int) {
	if s.Options == nil {
		s.Options = defaultOptions()
	}
	s.Options.MaxAge = age
}

// Expiry returns how this store has expired documents deleted: ExpiryAuto
// resolved by NewStore to ExpiryTTL or ExpiryGC, as the server allows.
func (s *Store) Expiry() ExpiryMode { return s.expiry }

// Close stops the GC goroutine, if any, and waits for it. It does not
// disconnect the client; the store keeps serving requests.
func (s *Store) Close() error {
	s.stop()
	s.background.Wait()
	return nil
}

// newOptions returns a copy of the store's default options.
func (s *Store) newOptions() *sessions.Options {
	if s.Options == nil {
		return defaultOptions()
	}
	opts := *s.Options
	return &opts
}

// opContext bounds one operation by Config.Timeout; a detached one (a
// save) outlives ctx's cancellation.
func (s *Store) opContext(ctx context.Context, detached bool) (context.Context, context.CancelFunc) {
	if detached {
		ctx = context.WithoutCancel(ctx)
	}
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// expiresAt is when a session with this MaxAge, created at createdAt and
// saved at now, expires.
func (s *Store) expiresAt(maxAge int, createdAt, now time.Time) time.Time {
	t := now.Add(s.idleTimeout(maxAge))
	if limit, ok := s.absoluteLimit(maxAge, createdAt); ok && limit.Before(t) {
		t = limit
	}
	return t.Truncate(time.Millisecond) // BSON dates have millisecond precision
}

// idleTimeout is how long a session with this MaxAge lives unused.
func (s *Store) idleTimeout(maxAge int) time.Duration {
	if maxAge > 0 {
		return time.Duration(min(maxAge, 1<<33)) * time.Second // 272 years; more would overflow
	}
	return s.cfg.IdleTimeout
}

// absoluteLimit is when a session with this MaxAge, created at createdAt,
// ends however active, and false if it has no such limit.
func (s *Store) absoluteLimit(maxAge int, createdAt time.Time) (time.Time, bool) {
	switch d := s.cfg.AbsoluteTimeout; {
	case d < 0:
		return time.Time{}, false
	case d > 0:
		return createdAt.Add(d), true
	}
	return createdAt.Add(max(defaultAbsoluteTimeout, s.idleTimeout(maxAge))), true
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

// sessionState is what the store remembers of a session's document
// between loading (or first saving) it and saving it again, as last read or
// written: gorilla's Session has no room for it.
type sessionState struct {
	id                              string // the document's _id; "" for none
	rev                             int64
	mac                             []byte // the document's MAC: it names the version
	createdAt, updatedAt, expiresAt time.Time
	encoded                         []byte // the values, encoded
	options                         sessions.Options
	owned                           bool     // the document has an owner field
	cookie                          string   // the cookie value to send back, signed with the current key
	others                          []string // _ids of the request's other cookies of the session's name
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

// set records the state of session.
func (t *sessionTable) set(session *sessions.Session, st sessionState) {
	wp := weak.Make(session)
	t.mu.Lock()
	defer t.mu.Unlock()
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

// release drops the encoded values (up to MaxSize) of session's state.
func (t *sessionTable) release(session *sessions.Session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.m[weak.Make(session)]; ok {
		st.encoded = nil
		t.m[weak.Make(session)] = st
	}
}

// forget removes the state of session.
func (t *sessionTable) forget(session *sessions.Session) {
	t.mu.Lock()
	delete(t.m, weak.Make(session))
	t.mu.Unlock()
}
