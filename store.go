// Package mongostore is a gorilla/sessions store that keeps sessions in
// MongoDB (or a MongoDB-compatible server such as FerretDB) through the
// official Go driver.
//
// The cookie holds only a random 256-bit session ID, signed (and optionally
// encrypted) with securecookie. The database holds a hash of that ID, the
// encoded session values, and an expiresAt date that a TTL index (or the
// store's GC goroutine) uses to delete expired sessions. Reads never return
// an expired session, whatever the state of the TTL monitor.
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Store is a sessions.Store backed by a MongoDB collection. It is safe for
// concurrent use by many goroutines, and many processes may share one
// collection.
type Store struct {
	// Options are the default cookie options of new sessions. Each session
	// gets its own copy. NewStore sets Path "/", MaxAge DefaultMaxAge (one
	// day), HttpOnly and SameSite Lax. Set Secure in production (HTTPS).
	// Change MaxAge with the MaxAge method, which also updates the cookie
	// codecs.
	Options *sessions.Options

	coll   *mongo.Collection
	codecs []securecookie.Codec
	cfg    Config
	hasher idHasher
	sealer dataSealer
	states *sessionTable[sessionState]
	// pending holds the middleware's writer of each session it manages,
	// until the request ends, so that Times can tell what it will save.
	pending *sessionTable[*sessionWriter]
	expiry  ExpiryMode // the mode in effect (ExpiryAuto resolved)

	life      context.Context // cancelled by Close
	closeLife context.CancelFunc
	gcDone    chan struct{} // closed when the background GC has stopped; nil if none
	closeOnce sync.Once
}

var _ sessions.Store = (*Store)(nil)

// NewStore returns a store that keeps sessions in coll.
//
// keyPairs are the cookie codecs' keys, as for sessions.NewCookieStore:
// pairs of a hash key (at least 32 bytes; it signs the cookie) and an
// optional block key (16, 24 or 32 bytes for AES-128/192/256; it encrypts the
// cookie; nil for none). Give several pairs to rotate keys: cookies are
// written with the first pair and read with any.
//
// ctx bounds the set-up commands (the expiry index). According to
// cfg.Expiry, NewStore makes sure the TTL index exists or starts the GC
// goroutine, which runs until Close; the zero Config picks whichever the
// server supports. Invalid configuration or keys give an error wrapping
// ErrInvalidConfig; a server that refuses TTL indexes gives
// ErrTTLUnsupported in ExpiryTTL mode.
func NewStore(ctx context.Context, coll *mongo.Collection, cfg Config, keyPairs ...[]byte) (*Store, error) {
	if coll == nil {
		return nil, fmt.Errorf("%w: nil collection", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	codecs, hashKeys, err := newCookieCodecs(keyPairs)
	if err != nil {
		return nil, err
	}
	s := &Store{
		Options: defaultOptions(),
		coll:    coll,
		codecs:  codecs,
		cfg:     cfg,
		hasher:  idHasher{key: cfg.IDHashKey},
		sealer:  newDataSealer(hashKeys),
		states:  newSessionTable[sessionState](),
		pending: newSessionTable[*sessionWriter](),
	}
	setupCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if s.expiry, err = s.setupExpiry(setupCtx); err != nil {
		return nil, err
	}
	s.life, s.closeLife = context.WithCancel(context.WithoutCancel(ctx))
	if s.expiry == ExpiryGC {
		s.gcDone = make(chan struct{})
		go func() {
			defer close(s.gcDone)
			_ = s.RunGC(s.life, cfg.GCInterval)
		}()
	}
	return s, nil
}

// newCookieCodecs validates the key pairs and builds the cookie codecs. It
// also returns the pairs' hash keys, from which the document MAC keys are
// derived.
func newCookieCodecs(keyPairs [][]byte) ([]securecookie.Codec, [][]byte, error) {
	if len(keyPairs) == 0 {
		return nil, nil, fmt.Errorf("%w: no keys: give at least a hash key", ErrInvalidConfig)
	}
	codecs := make([]securecookie.Codec, 0, (len(keyPairs)+1)/2)
	hashKeys := make([][]byte, 0, cap(codecs))
	for i := 0; i < len(keyPairs); i += 2 {
		hashKey := keyPairs[i]
		if len(hashKey) < minKeyLength {
			return nil, nil, fmt.Errorf("%w: hash key %d has %d bytes, want at least %d", ErrInvalidConfig, i/2, len(hashKey), minKeyLength)
		}
		var blockKey []byte
		if i+1 < len(keyPairs) && len(keyPairs[i+1]) > 0 {
			blockKey = keyPairs[i+1]
			switch len(blockKey) {
			case 16, 24, 32:
			default:
				return nil, nil, fmt.Errorf("%w: block key %d has %d bytes, want 16, 24 or 32", ErrInvalidConfig, i/2, len(blockKey))
			}
		}
		c := securecookie.New(hashKey, blockKey)
		c.SetSerializer(securecookie.NopEncoder{})
		c.MaxLength(defaultCookieMaxLength)
		// No check of the cookie's signed timestamp: the document's expiresAt
		// decides when a session ends, and a per-session MaxAge may be longer
		// than any store-wide bound (gorilla's stores cut such sessions short).
		c.MaxAge(0)
		codecs = append(codecs, c)
		hashKeys = append(hashKeys, hashKey)
	}
	return codecs, hashKeys, nil
}

// newOptions returns a copy of the store's default options for a session.
func (s *Store) newOptions() *sessions.Options {
	if s.Options == nil { // a caller cleared them: fall back to the defaults
		return defaultOptions()
	}
	opts := *s.Options
	return &opts
}

// defaultOptions are the cookie options NewStore starts with.
func defaultOptions() *sessions.Options {
	return &sessions.Options{
		Path:     "/",
		MaxAge:   DefaultMaxAge,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
}

// ExpiryMode returns the expiry mode in effect: the configured one, or for
// ExpiryAuto, ExpiryTTL or ExpiryGC according to what the server supports.
func (s *Store) ExpiryMode() ExpiryMode { return s.expiry }

// MaxAge sets the maximum age, in seconds, of new sessions' cookies
// (Options.MaxAge), as sessions.CookieStore.MaxAge does; setting
// store.Options.MaxAge, or a session's own Options.MaxAge, is the same. It
// is also the sessions' idle timeout on the server. Zero means a cookie that
// lasts until the browser closes, with Config.DefaultIdleTimeout on the
// server. Unlike gorilla's stores, the cookie's signed timestamp is not
// checked against it: the document's expiresAt alone decides when a session
// ends, so a longer per-session MaxAge is never cut short.
func (s *Store) MaxAge(age int) {
	if s.Options == nil {
		s.Options = defaultOptions()
	}
	s.Options.MaxAge = age
}

// Get returns the session called name for the request, loading it at most
// once per request through sessions.GetRegistry (the same call returns the
// same *sessions.Session). See New for what it returns on errors.
func (s *Store) Get(r *http.Request, name string) (*sessions.Session, error) {
	return sessions.GetRegistry(r).Get(s, name)
}

// New returns the session called name for the request: the stored session if
// the request carries a valid cookie for a live document, otherwise a new
// session (IsNew true). It never returns a nil session.
//
// When the request carries several cookies called name (a sibling domain
// may have tossed one in), the first that verifies is used. An unusable
// cookie (tampered, foreign key, malformed), with no usable one beside it,
// gives a new session and an error wrapping ErrInvalidCookie and the
// securecookie error; no database query is made. A database failure gives a
// new session and an error wrapping ErrDatabase (within Config.Timeout). An
// expired or deleted session gives a new session and no error.
func (s *Store) New(r *http.Request, name string) (*sessions.Session, error) {
	session := sessions.NewSession(s, name)
	session.Options = s.newOptions()
	session.IsNew = true

	var firstErr error
	for _, c := range r.CookiesNamed(name) {
		id, err := s.decodeCookie(name, c.Value)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		ctx, cancel := s.opContext(r.Context(), false)
		defer cancel()
		return session, s.load(ctx, session, id)
	}
	return session, firstErr // nil without a cookie: a new session
}

// opContext bounds one operation on the database by Config.Timeout. A
// detached operation keeps ctx's values but not its cancellation: a save
// must not be lost because the client hung up.
func (s *Store) opContext(ctx context.Context, detached bool) (context.Context, context.CancelFunc) {
	if detached {
		ctx = context.WithoutCancel(ctx)
	}
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// decodeCookie verifies a cookie value and returns the session ID it holds.
func (s *Store) decodeCookie(name, value string) (string, error) {
	var raw []byte
	if err := securecookie.DecodeMulti(name, value, &raw, s.codecs...); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidCookie, unwrapMulti(err))
	}
	id := string(raw)
	if !validSessionID(id) {
		return "", fmt.Errorf("%w: malformed session ID", ErrInvalidCookie)
	}
	return id, nil
}

// unwrapMulti turns securecookie's MultiError, which errors.Is cannot see
// into, into a joined error that it can.
func unwrapMulti(err error) error {
	var multi securecookie.MultiError
	if errors.As(err, &multi) {
		return errors.Join(multi...)
	}
	return err
}

// load reads the document of session ID id into session. A missing or
// expired document leaves session new: its ID is never adopted (strict
// mode), so the next save gets a fresh one.
//
// The query is exactly {_id: docID}, the one shape every server answers
// from its _id index (FerretDB v1 scans the collection for any other); the
// expiry is checked here, so an expired document the TTL monitor or the GC
// has not removed yet is never served.
func (s *Store) load(ctx context.Context, session *sessions.Session, id string) error {
	docID := s.hasher.docID(id)
	raw, err := s.coll.FindOne(ctx, idFilter(docID)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: load session: %w", ErrDatabase, err)
	}
	doc, values, err := s.decodeStored(docID, raw)
	if err != nil {
		return err
	}
	if !doc.expiresAt.After(s.cfg.Now()) {
		return nil // expired: as good as gone
	}
	session.ID = id
	session.Values = values
	session.IsNew = false
	s.states.set(session, sessionState{
		docID:     docID,
		createdAt: doc.createdAt,
		savedAt:   doc.updatedAt,
		expiresAt: doc.expiresAt,
		data:      doc.data,
		options:   *session.Options,
	})
	return nil
}

// decodeStored parses the raw document stored under docID, checks the MAC
// of its data and decodes the session values. Untrusted bytes never reach
// the codec.
func (s *Store) decodeStored(docID string, raw []byte) (storedSession, map[any]any, error) {
	doc, err := decodeDocument(raw)
	if err != nil {
		return doc, nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if !s.sealer.verify(docID, doc.createdAt, doc.expiresAt, doc.data, doc.mac) {
		return doc, nil, fmt.Errorf("%w: session data fails its integrity check (written without this app's keys)", ErrDecode)
	}
	values, err := s.cfg.Codec.Decode(doc.data)
	if err != nil {
		return doc, nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return doc, values, nil
}

// Save writes the session to the database and sets its cookie.
//
// A session with Options.MaxAge < 0 is deleted and its cookie expired. A
// session loaded from the database is updated only if its document still
// exists and has not expired (one findAndModify by _id, no upsert);
// otherwise Save returns ErrSessionGone and the session stays ended. Any
// other session is inserted under a freshly generated ID. Values that cannot be encoded give ErrEncode,
// values larger than Config.MaxSize give ErrTooLarge; nothing is written
// then either. A loaded session whose ID the application changed (for
// example cleared, to rotate it) is saved as RegenerateID would.
//
// Save is not stopped by the request's context: a client that hangs up, or
// a request deadline that passes, does not lose the change. It is bounded by
// Config.Timeout instead. A cookie name with the __Host- prefix needs
// Options with Secure, Path "/" and no Domain (__Secure-: Secure), or
// browsers drop the cookie; Save refuses other options with an error
// wrapping ErrInvalidConfig before writing anything.
func (s *Store) Save(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	ctx, cancel := s.opContext(r.Context(), true)
	defer cancel()
	deleting, err := s.prepare(session)
	if err != nil {
		return err
	}
	if deleting {
		return s.delete(ctx, w, session)
	}
	st, stored := s.states.get(session)
	if stored && st.docID != s.hasher.docID(session.ID) {
		return s.RegenerateID(r, w, session)
	}
	data, err := s.encode(session.Values)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	if stored {
		expiresAt := s.expiresAt(session.Options, st.createdAt, now)
		if !expiresAt.After(now) {
			return fmt.Errorf("%w: absolute timeout reached", ErrSessionGone)
		}
		mac := s.sealer.seal(st.docID, st.createdAt, expiresAt, data)
		if err := s.update(ctx, st.docID, updateDocument(data, mac, now, expiresAt), now); err != nil {
			return err
		}
		st.savedAt, st.expiresAt, st.data, st.options = now, expiresAt, data, *session.Options
		s.states.set(session, st)
		return s.writeCookie(w, session, expiresAt, now)
	}

	expiresAt, err := s.insert(ctx, session, newSessionID(), data, now)
	if err != nil {
		return err
	}
	return s.writeCookie(w, session, expiresAt, now)
}

// update applies change to the document docID if it exists and has not
// expired at now, in one findAndModify by _id (the shape every server
// answers from its _id index). It never inserts: a deleted session stays
// deleted. The command returns the document's expiry as it was before the
// change; if that shows the document had already expired, the change
// reached an ended session, which is then deleted, as the TTL monitor or
// the GC would have, and ErrSessionGone is returned. An expired session is
// thus never extended or revived.
func (s *Store) update(ctx context.Context, docID string, change bson.D, now time.Time) error {
	before, err := s.coll.FindOneAndUpdate(ctx, idFilter(docID), change, preImage()).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return ErrSessionGone
	}
	if err != nil {
		return fmt.Errorf("%w: save session: %w", ErrDatabase, err)
	}
	if live(before, now) {
		return nil
	}
	if _, err := s.coll.DeleteOne(ctx, idFilter(docID)); err != nil {
		return fmt.Errorf("%w: %w; delete it: %w", ErrDatabase, ErrSessionGone, err)
	}
	return ErrSessionGone
}

// insert stores session as a new document under session ID id, created at
// now, and records its state.
func (s *Store) insert(ctx context.Context, session *sessions.Session, id string, data []byte, now time.Time) (time.Time, error) {
	docID := s.hasher.docID(id)
	expiresAt := s.expiresAt(session.Options, now, now)
	mac := s.sealer.seal(docID, now, expiresAt, data)
	if _, err := s.coll.InsertOne(ctx, newDocument(docID, data, mac, now, expiresAt)); err != nil {
		return time.Time{}, fmt.Errorf("%w: insert session: %w", ErrDatabase, err)
	}
	session.ID = id
	s.states.set(session, sessionState{
		docID:     docID,
		createdAt: now,
		savedAt:   now,
		expiresAt: expiresAt,
		data:      data,
		options:   *session.Options,
	})
	return expiresAt, nil
}

// encode encodes session values and enforces the size limit.
func (s *Store) encode(values map[any]any) ([]byte, error) {
	data, err := s.cfg.Codec.Encode(values)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEncode, err)
	}
	if len(data) > s.cfg.MaxSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d", ErrTooLarge, len(data), s.cfg.MaxSize)
	}
	return data, nil
}

// expiresAt is when a session saved at now expires: after the idle timeout,
// but never past its absolute limit counted from createdAt.
func (s *Store) expiresAt(opts *sessions.Options, createdAt, now time.Time) time.Time {
	t := now.Add(s.idleTimeout(opts))
	if limit, ok := s.absoluteLimit(opts, createdAt); ok && limit.Before(t) {
		t = limit
	}
	return t.Truncate(time.Millisecond) // BSON dates have millisecond precision
}

// absoluteLimit is when a session with these options, created at createdAt,
// ends whatever its activity (see Config.AbsoluteTimeout), and false if it
// has no such limit.
func (s *Store) absoluteLimit(opts *sessions.Options, createdAt time.Time) (time.Time, bool) {
	switch d := s.cfg.AbsoluteTimeout; {
	case d < 0:
		return time.Time{}, false
	case d > 0:
		return createdAt.Add(d), true
	default:
		return createdAt.Add(max(DefaultAbsoluteTimeout, s.idleTimeout(opts))), true
	}
}

// idleTimeout is the idle timeout of a session with these options: its
// MaxAge, or Config.DefaultIdleTimeout for browser-session cookies.
func (s *Store) idleTimeout(opts *sessions.Options) time.Duration {
	if opts != nil && opts.MaxAge > 0 {
		return time.Duration(opts.MaxAge) * time.Second
	}
	return s.cfg.DefaultIdleTimeout
}

// checkCookiePrefix checks options against what browsers require of a
// cookie whose name has a __Host- or __Secure- prefix; they silently drop
// one that does not comply, which would lose the session at every request.
func checkCookiePrefix(name string, o *sessions.Options) error {
	hasPrefix := func(p string) bool { return len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) }
	switch {
	case hasPrefix("__Host-") && (!o.Secure || o.Path != "/" || o.Domain != ""):
		return fmt.Errorf("%w: cookie %q needs Options with Secure, Path \"/\" and no Domain (the __Host- prefix)", ErrInvalidConfig, name)
	case hasPrefix("__Secure-") && !o.Secure:
		return fmt.Errorf("%w: cookie %q needs Options with Secure (the __Secure- prefix)", ErrInvalidConfig, name)
	}
	return nil
}

// writeCookie sets the session cookie. A cookie with a Max-Age never
// outlives the session's document.
func (s *Store) writeCookie(w http.ResponseWriter, session *sessions.Session, expiresAt, now time.Time) error {
	encoded, err := securecookie.EncodeMulti(session.Name(), []byte(session.ID), s.codecs...)
	if err != nil {
		return fmt.Errorf("%w: cookie: %w", ErrEncode, unwrapMulti(err))
	}
	opts := *session.Options
	if opts.MaxAge > 0 {
		// Round up: expiresAt was truncated to whole milliseconds.
		if left := int((expiresAt.Sub(now) + time.Second - 1) / time.Second); left < opts.MaxAge {
			opts.MaxAge = max(left, 1)
		}
	}
	http.SetCookie(w, sessions.NewCookie(session.Name(), encoded, &opts))
	return nil
}

// delete removes the session's document, expires its cookie and forgets
// its ID.
func (s *Store) delete(ctx context.Context, w http.ResponseWriter, session *sessions.Session) error {
	docID := ""
	if st, ok := s.states.get(session); ok {
		docID = st.docID
	} else if validSessionID(session.ID) {
		docID = s.hasher.docID(session.ID)
	}
	if docID != "" {
		if _, err := s.coll.DeleteOne(ctx, idFilter(docID)); err != nil {
			return fmt.Errorf("%w: delete session: %w", ErrDatabase, err)
		}
	}
	s.detach(session)
	http.SetCookie(w, sessions.NewCookie(session.Name(), "", session.Options))
	return nil
}

// prepare gives session the store's options if it has none, checks them
// against the cookie's name prefix, and reports whether the session is to
// be deleted (Options.MaxAge < 0).
func (s *Store) prepare(session *sessions.Session) (deleting bool, err error) {
	if session.Options == nil {
		session.Options = s.newOptions()
	}
	if err := checkCookiePrefix(session.Name(), session.Options); err != nil {
		return false, err
	}
	return session.Options.MaxAge < 0, nil
}

// RegenerateID gives the session a new ID, keeping its values, and deletes
// the document of the old ID: call it when privileges change (at login) to
// defeat session fixation. The session counts as created now for the
// absolute timeout. It sets the new cookie. A session that was never saved
// is simply saved under a fresh ID; one with Options.MaxAge < 0 is deleted.
//
// The old document is deleted first, and only if it is still live: if it
// was deleted (a logout elsewhere) or expired while the request ran,
// RegenerateID returns ErrSessionGone, creates nothing, and later saves of
// the session fail the same way; a logged-out session never comes back.
// After any other failure the session is detached from its old ID: a later
// Save (for example the middleware's) stores it under a fresh ID, never
// under the old one, so values set for new privileges cannot reach an ID an
// attacker may have planted.
func (s *Store) RegenerateID(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	ctx, cancel := s.opContext(r.Context(), true)
	defer cancel()
	deleting, err := s.prepare(session)
	if err != nil {
		return err
	}
	if deleting {
		return s.delete(ctx, w, session)
	}
	st, stored := s.states.get(session)
	if !stored {
		s.detach(session)
		return s.Save(r, w, session)
	}
	data, err := s.encode(session.Values)
	if err != nil {
		s.detach(session)
		return err
	}
	now := s.cfg.Now()
	before, err := s.coll.FindOneAndDelete(ctx, idFilter(st.docID)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && !live(before, now)) {
		return ErrSessionGone // deleted or expired meanwhile: never revived
	}
	if err != nil {
		s.detach(session)
		return fmt.Errorf("%w: delete old session: %w", ErrDatabase, err)
	}
	s.detach(session)
	expiresAt, err := s.insert(ctx, session, newSessionID(), data, now)
	if err != nil {
		return err
	}
	return s.writeCookie(w, session, expiresAt, now)
}

// detach forgets the session's ID and stored state, so that its next save
// inserts it under a fresh ID.
func (s *Store) detach(session *sessions.Session) {
	s.states.forget(session)
	session.ID = ""
}

// Close stops the background GC goroutine, if any, and waits for it. It
// does not disconnect the mongo client, which belongs to the caller. Close is
// idempotent; the store keeps serving Get and Save after it.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeLife()
		if s.gcDone != nil {
			<-s.gcDone
		}
	})
	return nil
}

// SessionTimes are the times the store keeps for a session, in its
// document.
type SessionTimes struct {
	// CreatedAt is when the session was first saved; the absolute timeout
	// counts from it (RegenerateID starts it anew).
	CreatedAt time.Time
	// UpdatedAt is when the session was last saved.
	UpdatedAt time.Time
	// ExpiresAt is when the session ends unless it is saved again: its idle
	// timeout from UpdatedAt, capped by AbsoluteExpiresAt.
	ExpiresAt time.Time
	// AbsoluteExpiresAt is when the session ends whatever its activity, or
	// zero if it has no absolute timeout.
	AbsoluteExpiresAt time.Time
}

// Times returns the session's times as they stand once this request is
// done: as last loaded or saved by this store, or, for a session that
// Store.Middleware is about to save (it changed, or its expiry is due to
// slide), as that save will write them. It returns false for a session that
// is not stored and will not be (new and unchanged, or deleted).
func (s *Store) Times(session *sessions.Session) (SessionTimes, bool) {
	st, stored := s.states.get(session)
	if w, ok := s.pending.get(session); ok && w.willSave() {
		now := s.cfg.Now().Truncate(time.Millisecond)
		created := now
		if stored {
			created = st.createdAt
		}
		return s.times(session.Options, created, now, s.expiresAt(session.Options, created, now)), true
	}
	if !stored {
		return SessionTimes{}, false
	}
	return s.times(&st.options, st.createdAt, st.savedAt, st.expiresAt), true
}

func (s *Store) times(opts *sessions.Options, createdAt, updatedAt, expiresAt time.Time) SessionTimes {
	t := SessionTimes{CreatedAt: createdAt, UpdatedAt: updatedAt, ExpiresAt: expiresAt}
	if limit, ok := s.absoluteLimit(opts, createdAt); ok {
		t.AbsoluteExpiresAt = limit.Truncate(time.Millisecond)
	}
	return t
}

// ExpiresAt returns when the session's document expires (see Times), and
// false for a session that is not stored and will not be.
func (s *Store) ExpiresAt(session *sessions.Session) (time.Time, bool) {
	t, ok := s.Times(session)
	return t.ExpiresAt, ok
}
