package mongostore

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
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
	opened  *memo[openedDocument] // by chain: documents loads opened
	expiry  ExpiryMode            // in effect: ExpiryAuto resolved
	tel     *telemetry
	buffers sync.Pool // of *[encodeBufferSize]byte, lent to the middleware's change checks

	stop       context.CancelFunc // stops the background work
	background sync.WaitGroup
	warnOnce   sync.Once // warnNonAtomic
	keysOnce   sync.Once // warnKeys
}

var _ sessions.Store = (*Store)(nil)

// Get returns the session called name for the request, loading it at most
// once per request through sessions.GetRegistry. See New for errors.
func (s *Store) Get(r *http.Request, name string) (*sessions.Session, error) {
	if r == nil || checkCookieName(name) != nil { // the registry would panic, or return no session
		return s.New(r, name)
	}
	return sessions.GetRegistry(r).Get(s, name)
}

// New returns the session called name: the stored one if the request's
// cookie names a live document, else a new one (never nil). An unusable
// cookie gives ErrInvalidCookie, an unreadable document ErrDecode, a
// database failure ErrDatabase, a nil request or a cookie name browsers
// would not send back ErrInvalidConfig, with a new session. Of several
// cookies called name (a sibling domain may toss one in), the first that
// verifies is loaded, and ending the session ends the others too.
func (s *Store) New(r *http.Request, name string) (*sessions.Session, error) {
	return s.newSession(r, name, false, false)
}

// newSession is New for the middleware if managed, holding the session's
// lock if locked (exclusive.go).
func (s *Store) newSession(r *http.Request, name string, managed, locked bool) (*sessions.Session, error) {
	session := sessions.NewSession(s, name)
	*session.Options, session.IsNew = *s.newOptions(), true
	if r == nil {
		return session, errNil("request")
	}
	if err := checkCookieName(name); err != nil {
		return session, err
	}
	ctx, sp := s.tel.start(r.Context(), opLoad)
	defer sp.endPanicked()
	var room [1]cookieToken // most requests carry one cookie of a name
	tokens, err := s.cookies.tokens(r, name, room[:0])
	s.warnKeys(ctx, err)
	sp.outcome = outcomeNew
	if len(tokens) > 0 {
		l, timeout := loading{session: session, managed: managed}, s.cfg.Timeout
		if locked {
			l.holder, timeout = newHolderID(), timeout+s.cfg.LockWait
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		var waited time.Duration
		sp.outcome, sp.size, waited, err = s.load(ctx, &l, tokens)
		if l.holder != "" {
			sp.wait = waited
		}
		cancel()
	}
	sp.end(err)
	return session, err
}

// warnKeys logs once a cookie error that says the key pairs are wrong
// (errBlockAsHash): every user is signed out, and the middleware logs no
// invalid cookie.
func (s *Store) warnKeys(ctx context.Context, err error) {
	if errors.Is(err, errBlockAsHash) {
		s.keysOnce.Do(func() {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "mongostore: a session cookie was "+errBlockAsHash.Error())
		})
	}
}

// loading is one load of a session under way.
type loading struct {
	session *sessions.Session
	holder  string // the lock's holder ID, to take it; "" not to
	managed bool   // for the middleware, which releases the lock after its save
}

// load reads into the session the first live session of tokens (the
// request's cookies', apart from l: their array can stay on the stack), in
// order (a dead cookie tossed in ahead must not hide the live one), taking
// its lock for l.holder if any, and returns the outcome, the size of its
// values and how long it waited for the lock. The others never give the
// session their chain, and ending the session ends them too, even after a
// database error.
func (s *Store) load(ctx context.Context, l *loading, tokens []cookieToken) (outcome, int, time.Duration, error) {
	var decodeErrs oneLine
	var waited time.Duration
	for _, t := range tokens {
		raw, wait, err := s.fetch(ctx, t.chain, t.secret, l.holder)
		if waited += wait; err != nil {
			s.states.set(l.session, sessionState{others: chainsOf(tokens, ""), loadFailed: true})
			return outcomeError, -1, waited, err
		}
		if raw == nil {
			continue
		}
		d, encoded, values, err := s.openFetched(ctx, raw, t.chain, l.holder)
		if err != nil || !sidMatches(d.sid, t.secret) || !s.live(&d, s.cfg.Now()) {
			s.refused(ctx, raw, &d, values, err, l.holder)
			if err != nil { // else another secret: regenerated since, and never loaded again
				decodeErrs = append(decodeErrs, err)
			}
			continue
		}
		session := l.session
		session.ID, session.Values, session.IsNew = t.token, values, false
		session.Options.MaxAge = d.maxAge // the session's own lifetime ("remember me")
		st := stateOf(&d, encoded, values, session.Options)
		st.token, st.cookie, st.others, st.lock, st.managed = t.token, t.value, chainsOf(tokens, d.id), l.holder, l.managed
		s.states.set(session, st)
		if l.holder != "" {
			s.emitWait(ctx, st, waited)
		}
		return outcomeLoaded, len(encoded), waited, nil
	}
	s.states.set(l.session, sessionState{others: chainsOf(tokens, "")})
	return outcomeExpired, -1, waited, decodeErrs.orNil()
}

// refused handles raw, a document that load found but does not serve: an
// expired session is reported, and a lock taken for holder released.
func (s *Store) refused(ctx context.Context, raw bson.Raw, d *document, values map[any]any, openErr error, holder string) {
	if openErr == nil && !s.live(d, s.cfg.Now()) {
		s.expired(ctx, raw, d, values)
	}
	if lock, _ := raw.Lookup(fieldLock).StringValueOK(); holder != "" && lock == holder {
		s.release(ctx, d.id, holder)
	}
}

// chainsOf returns the chains of tokens, but chain skip, each with the
// hash of its secret: a chain once per secret (a cookie from before a
// RegenerateID may come ahead of the live one).
func chainsOf(tokens []cookieToken, skip string) []otherCookie {
	var others []otherCookie
	for _, t := range tokens {
		if t.chain == skip {
			continue
		}
		if o := (otherCookie{t.chain, hashHex(t.secret)}); !slices.Contains(others, o) {
			others = append(others, o)
		}
	}
	return others
}

// Save writes the session and sets its cookie. Options.MaxAge < 0 ends it. A
// loaded session is updated only if its document is still live, never
// inserted again (else ErrSessionGone: it stays ended); a new one is
// inserted under a fresh chain; one whose ID the application changed is
// saved as RegenerateID would. Values that cannot be encoded, or are larger
// than Config.MaxSize, give ErrEncode. Save is bounded by Config.Timeout,
// not by the request's context. Nil arguments, a cookie name or Options that
// browsers would refuse give ErrInvalidConfig, and nothing is stored, as
// does a new session or a regeneration saved through the middleware's writer
// once its response has started (the new cookie would be lost). A session
// whose load failed on a database error gives ErrDatabase: saved as new, it
// would sign its user out (Restart starts anew; a logout still ends the
// cookie's session). A save that tied the session to its owner then applies
// Config.MaxSessionsPerOwner, and returns ErrLimit if it could not.
func (s *Store) Save(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	if err := checkArgs(r, w, session); err != nil {
		return err
	}
	sv, err := s.prepare(session)
	ctx, sp := s.tel.start(r.Context(), sv.op)
	defer sp.endPanicked()
	ctx, cancel := s.opContext(ctx, true)
	defer cancel()
	ending, loadedOwner := sv.outcome == outcomeEnded, sv.st.owner
	switch {
	case err != nil:
	case ending:
		var ended bool
		if ended, err = s.end(ctx, w, session, sv.st, EndLogout); !ended {
			sv.outcome = outcomeNotEnded // not stored, or ended by another request already
		}
	case (sv.outcome == outcomeInserted || sv.outcome == outcomeRegenerated) && responseStarted(w):
		err = errResponseStarted
	case sv.st.id == "":
		err = s.insert(ctx, w, sv)
	default: // an update, or a regeneration with a new secret
		if err = s.update(ctx, w, sv); err == nil && sv.outcome == outcomeRegenerated {
			s.emit(ctx, EventRegenerated, "", s.states.get(session)) // the chain's lock released: the subscriber may end it
		}
	}
	sp.outcome, sp.retries, sp.met = sv.outcome, sv.retries, sv.met
	if !ending {
		sp.size = len(sv.data)
	}
	sp.end(err)
	if owner, _ := ownerOf(session.Values); err == nil && !ending && owner != "" && owner != loadedOwner {
		err = s.limit(r.Context(), session) // the session has just been tied to its owner
	}
	return err
}

// errResponseStarted is Save's error for a new cookie the response can no
// longer carry.
var errResponseStarted = fmt.Errorf("%w: the response has started, so the session's new cookie could not be set: "+
	"save it before writing the response", ErrInvalidConfig)

// errLoadFailed is Save's error for a session whose load failed: saved as
// new, it would take the place of the stored one in the browser.
var errLoadFailed = fmt.Errorf("%w: the session's load failed, and saving it as a new one would sign its user out", ErrDatabase)

// saving is one save of a session under way.
type saving struct {
	session    *sessions.Session
	st         sessionState // the version it builds on
	token      string       // the session's token once saved: a new one inserts or regenerates
	chain, sid string       // its document's _id, and the hash of its secret
	data       []byte       // the values to write, encoded
	now        time.Time
	ownOptions bool // the request changed the session's options
	op         operation
	outcome    outcome  // if it succeeds
	retries    int      // writes after the first, each after another save
	met        bool     // a write met another save
	mine       *changes // this request's changes, once a conflict needs them (merge.go)
}

// prepare works out what saving session is: an ending, an insert, a
// regeneration or an update (or a touch, which changes nothing but times).
func (s *Store) prepare(session *sessions.Session) (*saving, error) {
	if session.Options == nil {
		session.Options = s.newOptions()
	}
	st := s.states.get(session)
	sv := &saving{session: session, st: st, token: session.ID, chain: st.id, sid: st.sid, now: s.cfg.Now(), op: opSave}
	if session.Options.MaxAge < 0 {
		sv.outcome = outcomeEnded // whatever the cookie's options: deleting needs none
		return sv, nil
	}
	if st.loadFailed {
		return sv, errLoadFailed
	}
	if err := errors.Join(checkCookieName(session.Name()), checkCookiePrefix(session.Name(), session.Options)); err != nil {
		return sv, err
	}
	data, err := s.encode(session.Values, st.staged)
	if st.staged != nil { // the middleware's, for this save only
		s.states.stage(session, nil)
	}
	sv.data, sv.ownOptions = data, *session.Options != sv.st.options
	switch {
	case st.id == "":
		sv.token, sv.sid = newToken("")
		sv.chain, _, _ = strings.Cut(sv.token, ".")
		sv.outcome = outcomeInserted
	case session.ID != st.token:
		sv.token, sv.sid = newToken(st.id)
		sv.outcome, sv.op = outcomeRegenerated, opRegenerate
	case bytes.Equal(data, st.encoded) && !sv.ownOptions:
		sv.outcome = outcomeTouched
	default:
		sv.outcome = outcomeUpdated
	}
	return sv, err
}

// insert stores the session as the first document of a new chain.
func (s *Store) insert(ctx context.Context, w http.ResponseWriter, sv *saving) error {
	d := s.document(sv)
	if err := s.coll.insert(ctx, &d); err != nil {
		return err
	}
	if err := s.sent(w, sv, &d); err != nil {
		return err
	}
	s.emit(ctx, EventCreated, "", s.states.get(sv.session))
	return nil
}

// update writes the session's document if it is still live and at the
// version sv builds on, with sv's secret (a new one regenerates it). If
// another save changed it meanwhile, this request's changes are applied
// over that one's (see merge.go) and written again, up to maxSaveAttempts
// writes; a session that ended meanwhile stays ended. One save of a chain
// runs at a time in this process.
func (s *Store) update(ctx context.Context, w http.ResponseWriter, sv *saving) (err error) {
	unlock, err := s.coll.locks.lock(ctx, sv.st.id)
	if err != nil {
		return err
	}
	defer func() { unlock() }()
	defer func() {
		if err != nil && sv.mine != nil { // the values hold another request's changes: build on its version from now
			s.states.rebase(sv.session, sv.st)
		}
	}()
	for attempt := 1; ; attempt++ {
		d := s.document(sv)
		if !d.expiresAt.After(sv.now) {
			return fmt.Errorf("%w: absolute timeout reached", ErrSessionGone)
		}
		theirs, err := s.coll.update(ctx, &d, sv.st.version, sv.now)
		switch {
		case err != nil && uncertain(err): // the write may still run on the server: this process's next one waits
			unlock = releaseAfter(unlock, s.cfg.Timeout)
			s.states.attempt(sv.session, d.mac)
			return err
		case err != nil:
			return err
		case theirs == nil:
			return s.updated(ctx, w, sv, &d)
		case attempt == maxSaveAttempts:
			return fmt.Errorf("%w: %d writes met concurrent saves", ErrConflict, attempt)
		}
		sv.met = true
		if err := s.merge(ctx, sv, theirs); err != nil {
			return err
		}
		sv.retries = attempt
	}
}

// maxSaveAttempts bounds the writes of one save that meets concurrent
// saves; after that it fails with ErrConflict. Each conflict means another
// save succeeded, so this many requests of one session can overlap.
const maxSaveAttempts = 32

// merge makes the session's values this request's changes applied over
// those of theirs, the document another save wrote (see merge.go), and the
// data to write, and makes theirs the version sv builds on. Unless this
// request changed the session's options, the MaxAge of theirs applies. If
// theirs is unreadable (a newer key or codec), this save is in conflict. If
// another request regenerated the session, or tied it to another owner
// than the session as loaded, the session is gone for this request; if
// this request changed the owner, its values replace theirs whole.
func (s *Store) merge(ctx context.Context, sv *saving, theirs bson.Raw) error {
	od, encoded, values, err := s.open(theirs)
	switch {
	case err != nil:
		return fmt.Errorf("%w: another request saved the session in a form this one cannot read: %w", ErrConflict, err)
	case slices.ContainsFunc(sv.st.attempted, func(m []byte) bool { return hmac.Equal(od.mac, m) }): // this request's own write, whose answer was lost
		sv.st.sid, sv.st.createdAt, sv.st.version, sv.st.encoded, sv.st.attempted = od.sid, od.createdAt, od.version(), encoded, nil
		sv.st.owner, _ = ownerOf(values)
		sv.mine = nil // what it wrote is what the session holds, but for changes since: sv.data writes them
		return nil
	case od.sid != sv.st.sid:
		return fmt.Errorf("%w: another request regenerated the session", ErrSessionGone)
	}
	if owner, _ := ownerOf(values); owner != sv.st.owner {
		return fmt.Errorf("%w: another request tied the session to another owner", ErrSessionGone)
	}
	if owner, _ := ownerOf(sv.session.Values); owner == sv.st.owner {
		if sv.mine == nil {
			c, err := s.changes(ctx, sv)
			if err != nil {
				return err
			}
			sv.mine = &c
		}
		if err := apply(ctx, s.cfg.Codec, sv.mine, values); err != nil {
			return err
		}
		sv.session.Values = values
	}
	if !sv.ownOptions {
		sv.session.Options.MaxAge, sv.st.options.MaxAge = od.maxAge, od.maxAge
	}
	sv.st.createdAt, sv.st.version, sv.st.encoded = od.createdAt, od.version(), encoded // theirs, with this request's changes over it
	sv.data, err = s.encode(sv.session.Values, nil)
	return err
}

// changes returns what this request changed of the session's values since
// it loaded them. Once the middleware has finished with the session (a
// save after its response), they are no longer known: ErrConflict.
func (s *Store) changes(ctx context.Context, sv *saving) (changes, error) {
	if sv.st.released {
		return changes{}, fmt.Errorf("%w: another request saved the session, and what this one changed is unknown once its middleware finished", ErrConflict)
	}
	base, err := s.cfg.Codec.Decode(sv.st.encoded)
	if err != nil {
		return changes{}, fmt.Errorf("%w: the session as this request loaded it: %w: %w", ErrConflict, ErrDecode, err)
	}
	return diff(ctx, s.cfg.Codec, base, sv.session.Values)
}

// updated finishes an update that wrote d: the session's new state and
// cookie.
func (s *Store) updated(ctx context.Context, w http.ResponseWriter, sv *saving, d *document) error {
	if sv.retries > 0 {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "mongostore: merged concurrent changes",
			slog.String("session", sv.session.Name()), slog.Int("retries", sv.retries))
	}
	if sv.outcome == outcomeRegenerated {
		sv.st.cookie = "" // the old secret's
	}
	return s.sent(w, sv, d)
}

// sent records the state of the session as d stores it, under sv's token,
// and sets its cookie.
func (s *Store) sent(w http.ResponseWriter, sv *saving, d *document) error {
	st := stateOf(d, sv.data, sv.session.Values, sv.session.Options)
	st.token, st.cookie, st.others, st.cookieSet, st.lock = sv.token, sv.st.cookie, sv.st.others, true, sv.st.lock // managed: the table keeps it
	if st.cookie == "" {
		var err error
		if st.cookie, err = s.cookies.encode(sv.session.Name(), sv.token); err != nil {
			return err
		}
	}
	sv.session.ID = sv.token
	s.states.set(sv.session, st)
	setCookie(w, sv.session.Name(), st.cookie, sv.session.Options, st.expiresAt, sv.now)
	return nil
}

// RegenerateID gives the session a new secret, keeping its document, its
// values and its creation time (the absolute timeout still counts from
// it), and sets the new cookie: call it when privileges change, to defeat
// session fixation. The old cookie loads nothing from then on, and a
// request that loaded the session with it can no longer save it
// (ErrSessionGone). Its handle stays the same. If the session ended
// meanwhile, it returns ErrSessionGone; once the middleware's response has
// started, ErrInvalidConfig (the new cookie could not be set). After any
// failure but ErrSessionGone the session keeps its old secret, and every
// later save tries the regeneration again (refused for good once the
// response has started): none goes through under the old secret.
func (s *Store) RegenerateID(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	if err := checkArgs(r, w, session); err != nil {
		return err
	}
	token := session.ID
	session.ID = ""
	err := s.Save(r, w, session)
	if errors.Is(err, ErrSessionGone) {
		session.ID = token // nothing left to regenerate
	}
	return err
}

// Times returns the session's times as last loaded or saved by this
// store, and false for a session that is not stored.
func (s *Store) Times(session *sessions.Session) (SessionTimes, bool) {
	if session == nil {
		return SessionTimes{}, false
	}
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
