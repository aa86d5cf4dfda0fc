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
	expiry  ExpiryMode // in effect: ExpiryAuto resolved
	tel     *telemetry

	stop       context.CancelFunc // stops the background work
	background sync.WaitGroup
}

var _ sessions.Store = (*Store)(nil)

// Get returns the session called name for the request, loading it at most
// once per request through sessions.GetRegistry. See New for errors.
func (s *Store) Get(r *http.Request, name string) (*sessions.Session, error) {
	if err := checkCookieName(name); err != nil { // the registry would return no session
		return s.New(r, name)
	}
	return sessions.GetRegistry(r).Get(s, name)
}

// New returns the session called name: the stored one if the request's
// cookie names a live document, else a new one (never nil). An unusable
// cookie gives ErrInvalidCookie, an unreadable document ErrDecode, a
// database failure ErrDatabase, a cookie name browsers would not send back
// ErrInvalidConfig, with a new session. Of several cookies called name (a
// sibling domain may toss one in), the first that verifies is loaded, and
// ending the session ends the others too.
func (s *Store) New(r *http.Request, name string) (*sessions.Session, error) {
	session := sessions.NewSession(s, name)
	session.Options = s.newOptions()
	session.IsNew = true
	if err := checkCookieName(name); err != nil {
		return session, err
	}
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
			if err == nil {
				s.expired(ctx, &d, values)
			}
			continue
		}
		session.ID, session.Values, session.IsNew = id, values, false
		session.Options.MaxAge = d.maxAge // the session's own lifetime ("remember me")
		sp.outcome, sp.size = outcomeLoaded, len(encoded)
		others := slices.Delete(st.others, i, i+1)
		st = stateOf(&d, encoded, values, session.Options)
		st.cookie, st.others = reusable[i], others
		return nil
	}
	return decodeErr
}

// Save writes the session and sets its cookie. Options.MaxAge < 0 ends it.
// A loaded session is updated only if its document is still live, never
// inserted again (else ErrSessionGone: it stays ended); a new one is
// inserted under a fresh ID; one whose ID the application changed is saved
// as RegenerateID would. Values that cannot be encoded, or are larger than
// Config.MaxSize, give ErrEncode. Save is bounded by Config.Timeout, not
// by the request's context. A cookie name or Options that browsers would
// refuse give ErrInvalidConfig, and nothing is stored.
func (s *Store) Save(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	return s.save(r.Context(), opSave, w, session, nil, false)
}

// saving is one save of a session under way.
type saving struct {
	session    *sessions.Session
	st         sessionState // the version it builds on
	data       []byte       // the values to write, encoded
	now        time.Time
	ownOptions bool // the request changed the session's options
	sp         *span
}

// save commits session as operation op, bounded by Config.Timeout and not
// by ctx's cancellation; encoded, if not nil, is its values encoded; touch
// says it is the middleware's save of an unchanged session.
func (s *Store) save(ctx context.Context, op operation, w http.ResponseWriter, session *sessions.Session, encoded []byte, touch bool) error {
	ctx, cancel := s.opContext(ctx, true)
	defer cancel()
	ctx, sp := s.tel.start(ctx, op)
	sp.touch = touch
	err := s.commit(ctx, w, session, encoded, &sp)
	sp.end(err)
	return err
}

// commit ends, inserts, regenerates or updates session.
func (s *Store) commit(ctx context.Context, w http.ResponseWriter, session *sessions.Session, encoded []byte, sp *span) error {
	if session.Options == nil {
		session.Options = s.newOptions()
	}
	sv := &saving{session: session, st: s.states.get(session), now: s.cfg.Now(), sp: sp}
	if session.Options.MaxAge < 0 {
		sp.outcome = outcomeEnded
		return s.end(ctx, w, sv) // whatever the cookie's options: deleting needs none
	}
	if err := errors.Join(checkCookieName(session.Name()), checkCookiePrefix(session.Name(), session.Options)); err != nil {
		return err
	}
	data, err := s.encode(session.Values, encoded)
	if err != nil {
		return err
	}
	sv.data, sp.size, sv.ownOptions = data, len(data), *session.Options != sv.st.options
	if sv.st.id == "" {
		sp.outcome = outcomeInserted
		err = s.insert(ctx, w, sv)
	} else {
		err = s.rewrite(ctx, w, sv)
	}
	if st := s.states.get(session); err == nil && st.owner != "" && st.owner != sv.st.owner {
		s.limit(ctx, st) // the session has just been tied to its owner
	}
	return err
}

// rewrite regenerates or updates a stored session, one save of it at a
// time in this process where the server needs that.
func (s *Store) rewrite(ctx context.Context, w http.ResponseWriter, sv *saving) error {
	unlock, err := s.coll.serialize(ctx, sv.st.id)
	if err != nil {
		return err
	}
	defer unlock()
	if sv.session.ID == "" || docID(sv.session.ID) != sv.st.id {
		sv.sp.outcome = outcomeRegenerated
		return s.regenerate(ctx, w, sv)
	}
	sv.sp.outcome = outcomeUpdated
	return s.update(ctx, w, sv)
}

// insert stores the session as a new document under a fresh ID, the first
// of its chain.
func (s *Store) insert(ctx context.Context, w http.ResponseWriter, sv *saving) error {
	id := newSessionID()
	d := s.document(sv, docID(id), "", 1, sv.now)
	if err := s.coll.insert(ctx, &d); err != nil {
		return err
	}
	sv.session.ID = id
	if err := s.sent(w, sv, &d); err != nil {
		return err
	}
	s.emit(ctx, EventCreated, "", s.states.get(sv.session))
	return nil
}

// update writes the session's document if it is still live and at the
// version sv builds on. If another save changed it meanwhile, this
// request's changes are applied over that one's (see merge.go) and written
// again, up to maxSaveAttempts writes; a session that ended meanwhile stays
// ended.
func (s *Store) update(ctx context.Context, w http.ResponseWriter, sv *saving) (err error) {
	var mine *changes   // this request's changes, once a conflict needs them
	var theirs bson.Raw // the last conflict's document, which FerretDB v1's write replaced
	var ours []byte     // the MAC of that write
	defer func() {
		if err != nil && theirs != nil {
			restoreCtx, cancel := s.opContext(ctx, true) // ctx may be what ran out
			defer cancel()
			err = errors.Join(err, s.coll.restore(restoreCtx, theirs, ours))
		}
	}()
	for attempt := 1; ; attempt++ {
		sv.sp.retries, sv.sp.size = attempt-1, len(sv.data)
		d := s.document(sv, sv.st.id, sv.st.lineage, sv.st.rev+1, sv.st.createdAt)
		if !d.expiresAt.After(sv.now) {
			return fmt.Errorf("%w: absolute timeout reached", ErrSessionGone)
		}
		conflict, next, err := s.coll.save(ctx, &d, sv.st.version, sv.now)
		switch {
		case err != nil:
			return err
		case conflict == nil:
			if attempt > 1 {
				s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "mongostore: merged concurrent changes",
					slog.String("session", sv.session.Name()), slog.Int("retries", attempt-1))
			}
			return s.sent(w, sv, &d)
		}
		if theirs, ours = conflict, d.mac; attempt == maxSaveAttempts {
			return fmt.Errorf("%w: %d writes met concurrent saves", ErrConflict, attempt)
		}
		if err := s.merge(ctx, sv, theirs, &mine); err != nil {
			return err
		}
		sv.st.version = next
	}
}

// regenerate moves the session to a fresh ID in the same chain, keeping
// its values and creation time. The new document goes in first and the old
// one out after, so that an ending meanwhile finds one of them; if the old
// one had ended, or anything fails, the new one is deleted: nothing is
// left that no cookie names.
func (s *Store) regenerate(ctx context.Context, w http.ResponseWriter, sv *saving) error {
	id := newSessionID()
	d := s.document(sv, docID(id), sv.st.lineage, 1, sv.st.createdAt)
	if !d.expiresAt.After(sv.now) {
		return fmt.Errorf("%w: absolute timeout reached", ErrSessionGone)
	}
	if err := s.coll.insert(ctx, &d); err != nil {
		s.detach(sv.session) // a later save inserts afresh, never under the old ID
		return err
	}
	err := s.move(ctx, w, sv, id, &d)
	if err != nil {
		cleanCtx, cancel := s.opContext(ctx, true) // ctx may be what timed out
		defer cancel()
		_, derr := s.coll.delete(cleanCtx, d.id)
		if sv.session.ID != "" || derr != nil || !errors.Is(err, ErrSessionGone) {
			s.detach(sv.session) // else the old one is gone, and the next save says so again
		}
		return errors.Join(err, derr)
	}
	s.emit(ctx, EventRegenerated, "", s.states.get(sv.session))
	return nil
}

// move takes the old document of a regenerating session out, and makes the
// new one, d, hold any changes another save made to the old one since it
// was loaded, with this request's applied over them.
func (s *Store) move(ctx context.Context, w http.ResponseWriter, sv *saving, id string, d *document) error {
	before, err := s.coll.remove(ctx, sv.st.id)
	switch {
	case err != nil:
		return err
	case before == nil || !live(before, sv.now):
		return ErrSessionGone
	}
	old := sv.st.mac
	sv.session.ID, sv.st.id, sv.st.version, sv.st.cookie = id, d.id, d.written(), ""
	if isVersion(before, old) {
		return s.sent(w, sv, d)
	}
	sv.sp.merged = true
	var mine *changes
	if err := s.merge(ctx, sv, before, &mine); err != nil {
		putCtx, cancel := s.opContext(ctx, true) // another save's session stays, unmerged
		defer cancel()
		return errors.Join(err, s.coll.insertRaw(putCtx, before))
	}
	return s.update(ctx, w, sv)
}

// sent records the state of the session as d stores it, and sets its
// cookie.
func (s *Store) sent(w http.ResponseWriter, sv *saving, d *document) error {
	st := stateOf(d, sv.data, sv.session.Values, sv.session.Options)
	st.cookie, st.others = sv.st.cookie, sv.st.others
	if st.cookie == "" {
		var err error
		if st.cookie, err = s.cookies.encode(sv.session.Name(), sv.session.ID); err != nil {
			return err
		}
	}
	s.states.set(sv.session, st)
	setCookie(w, sv.session.Name(), st.cookie, sv.session.Options, st.expiresAt, sv.now)
	return nil
}

// RegenerateID moves the session to a new ID, keeping its values and its
// creation time (the absolute timeout still counts from it), and sets the
// new cookie: call it when privileges change, to defeat session fixation.
// Its handle stays the same. If the old session ended meanwhile, it returns
// ErrSessionGone and later saves do too; after any other failure, a later
// save stores the session under a fresh ID, never under the old one.
func (s *Store) RegenerateID(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	session.ID = ""
	return s.save(r.Context(), opRegenerate, w, session, nil, false)
}

// Times returns the session's times as last loaded or saved by this
// store, and false for a session that is not stored.
func (s *Store) Times(session *sessions.Session) (SessionTimes, bool) {
	st := s.states.get(session)
	return st.times(), st.id != ""
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
// save, an ending) outlives ctx's cancellation.
func (s *Store) opContext(ctx context.Context, detached bool) (context.Context, context.CancelFunc) {
	if detached {
		ctx = context.WithoutCancel(ctx)
	}
	return context.WithTimeout(ctx, s.cfg.Timeout)
}
