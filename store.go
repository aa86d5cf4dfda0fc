package mongostore

import (
	"context"
	"fmt"
	"net/http"
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
	Options *sessions.Options

	coll   collection
	codecs []securecookie.Codec
	cfg    Config
	hasher idHasher
	sealer *dataSealer
	states *sessionTable[sessionState]
	// pending holds the middleware's writer of each session it manages,
	// until the request ends, so that Times can tell what it will save.
	pending *sessionTable[*sessionWriter]
	expiry  ExpiryMode // the mode in effect (ExpiryAuto resolved)
	// buffers holds *[]byte for the middleware's change-check encodings,
	// most of which are compared and dropped.
	buffers sync.Pool

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
	sealer, err := newDataSealer(hashKeys)
	if err != nil {
		return nil, err
	}
	s := &Store{
		Options: defaultOptions(),
		coll:    collection{coll},
		codecs:  codecs,
		cfg:     cfg,
		hasher:  newIDHasher(cfg.IDHashKey),
		sealer:  sealer,
		states:  newSessionTable[sessionState](),
		pending: newSessionTable[*sessionWriter](),
	}
	setupCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if s.expiry, err = s.setupIndexes(setupCtx); err != nil {
		return nil, err
	}
	s.life, s.closeLife = context.WithCancel(context.WithoutCancel(ctx))
	if s.expiry == ExpiryGC {
		s.startGC()
	}
	return s, nil
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

	id, cookie, err := s.cookieSessionID(r, name)
	if id == "" {
		return session, err // nil without a cookie: a new session
	}
	ctx, cancel := s.opContext(r.Context(), false)
	defer cancel()
	return session, s.load(ctx, session, id, cookie)
}

// requestInstantKey is the context key of the instant Store.Middleware
// pins for its request.
type requestInstantKey struct{}

// instant returns the time a save in ctx writes: the instant the middleware
// pinned for the request (so that Times, called earlier in the handler,
// predicts the save exactly), or now. Whether a session is still live is
// always checked against the clock itself.
func (s *Store) instant(ctx context.Context) time.Time {
	if t, ok := ctx.Value(requestInstantKey{}).(time.Time); ok {
		return t
	}
	return s.cfg.Now()
}

// encodeBuffer returns a buffer for an encoding, from s.buffers.
func (s *Store) encodeBuffer() *[]byte {
	if b, ok := s.buffers.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 512)
	return &b
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

// load reads the document of session ID id into session. A missing or
// expired document leaves session new: its ID is never adopted (strict
// mode), so the next save gets a fresh one.
//
// The expiry is checked here, so an expired document the TTL monitor or the
// GC has not removed yet is never served.
// cookie is the cookie value the client sent, if the current key signed it.
func (s *Store) load(ctx context.Context, session *sessions.Session, id, cookie string) error {
	docID := s.hasher.docID(id)
	raw, err := s.coll.find(ctx, docID)
	if raw == nil {
		return err
	}
	doc, encoded, values, err := s.decodeStored(docID, raw)
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
		encoded:   encoded,
		options:   *session.Options,
		owned:     hasOwner(values),
		cookie:    cookie,
	})
	return nil
}

// decodeStored parses the raw document stored under docID, checks its MAC,
// decrypts its data if need be, and decodes the session values: it returns
// the document, the values' encoding and the values. Untrusted bytes never
// reach the codec.
func (s *Store) decodeStored(docID string, raw []byte) (storedSession, []byte, map[any]any, error) {
	doc, err := decodeDocument(docID, raw)
	if err != nil {
		return doc, nil, nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if !s.sealer.verify(doc.sealedFields, doc.mac) {
		return doc, nil, nil, fmt.Errorf("%w: session data fails its integrity check (written without this app's keys)", ErrDecode)
	}
	encoded, codec := doc.data, s.cfg.Codec
	if doc.version >= 3 {
		if encoded, err = s.sealer.unwrap(docID, doc.data); err != nil {
			return doc, nil, nil, fmt.Errorf("%w: %w", ErrDecode, err)
		}
	} else if s.cfg.legacyGob {
		codec = GobCodec{}
	}
	values, err := codec.Decode(encoded)
	if err != nil {
		return doc, nil, nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return doc, encoded, values, nil
}

// Save writes the session to the database and sets its cookie.
//
// A session with Options.MaxAge < 0 is deleted and its cookie expired. A
// session loaded from the database is updated only if its document still
// exists and has not expired (one findAndModify by _id, no upsert);
// otherwise Save returns ErrSessionGone and the session stays ended. Any
// other session is inserted under a freshly generated ID. Values that
// cannot be encoded give ErrEncode, values larger than Config.MaxSize give
// ErrTooLarge; nothing is written then either. A loaded session whose ID
// the application changed (for example cleared, to rotate it) is saved as
// RegenerateID would.
//
// Save is not stopped by the request's context: a client that hangs up, or
// a request deadline that passes, does not lose the change. It is bounded by
// Config.Timeout instead. A cookie name with the __Host- prefix needs
// Options with Secure, Path "/" and no Domain (__Secure-: Secure), or
// browsers drop the cookie; Save refuses other options with an error
// wrapping ErrInvalidConfig before writing anything.
func (s *Store) Save(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	return s.write(r, w, session, func(ctx context.Context, w http.ResponseWriter, session *sessions.Session) error {
		return s.save(ctx, w, session, nil)
	})
}

// write runs op, the save or the regeneration of session, after what both
// share: a context bounded by Config.Timeout but not cancelled with the
// request, the options checked, and the deletion of a session whose
// Options.MaxAge is negative.
func (s *Store) write(r *http.Request, w http.ResponseWriter, session *sessions.Session,
	op func(context.Context, http.ResponseWriter, *sessions.Session) error) error {
	ctx, cancel := s.opContext(r.Context(), true)
	defer cancel()
	deleting, err := s.prepare(session)
	if err != nil {
		return err
	}
	if deleting {
		return s.delete(ctx, w, session)
	}
	return op(ctx, w, session)
}

// save is Save once write has done its part. encoded, if not nil, is
// session.Values already encoded (by the middleware's change check).
func (s *Store) save(ctx context.Context, w http.ResponseWriter, session *sessions.Session, encoded []byte) error {
	st, stored := s.states.get(session)
	if stored && st.docID != s.hasher.docID(session.ID) {
		return s.regenerate(ctx, w, session)
	}
	data, err := s.encode(session.Values, encoded)
	if err != nil {
		return err
	}
	now := s.instant(ctx)
	if stored {
		expiresAt := s.expiresAt(session.Options, st.createdAt, now)
		if !expiresAt.After(s.cfg.Now()) {
			return fmt.Errorf("%w: absolute timeout reached", ErrSessionGone)
		}
		f := sealedFields{docID: st.docID, createdAt: st.createdAt, updatedAt: now, expiresAt: expiresAt,
			data: s.sealer.wrap(st.docID, data)}
		mac := s.sealer.seal(&f)
		owner := s.ownerDigest(session.Values)
		if err := s.update(ctx, st.docID, updateDocument(f, mac, owner, st.owned), s.cfg.Now(), st.expiresAt); err != nil {
			return err
		}
		if st.cookie == "" {
			if st.cookie, err = s.encodeCookie(session.Name(), session.ID); err != nil {
				return err
			}
		}
		st.savedAt, st.expiresAt, st.encoded, st.options, st.owned = now, expiresAt, data, *session.Options, owner != ""
		s.states.set(session, st)
		s.setCookie(w, session, st.cookie, expiresAt, now)
		return nil
	}
	return s.insert(ctx, w, session, data, now)
}

// update applies change to the document docID if it exists and has not
// expired at now, in one command that never inserts: a deleted session
// stays deleted. seenExpiry is the document's expiry as this process last
// saw it.
//
// Far from that expiry, the command filters on exactly {_id} (the shape
// every server answers from its index) and returns the document as it was
// before the change; if that shows the document had already expired (its
// expiry was shortened meanwhile, or clocks disagree), the change reached
// an ended session, which is then deleted, as the TTL monitor or the GC
// would have, and ErrSessionGone is returned. A session that may expire
// before the command reaches the server (seenExpiry within Config.Timeout
// of now: a request that outlived its session) is changed only if the
// server still finds it live, {_id, expiresAt: {$gt: now}}, so an expired
// session is never extended, not even for an instant. (That shape costs a
// scan on FerretDB v1, for these rare saves only.)
func (s *Store) update(ctx context.Context, docID string, change bson.D, now, seenExpiry time.Time) error {
	var liveAt time.Time
	if !seenExpiry.After(now.Add(s.cfg.Timeout)) {
		liveAt = now
	}
	before, err := s.coll.update(ctx, docID, change, liveAt)
	switch {
	case err != nil:
		return err
	case before == nil:
		return ErrSessionGone
	case live(before, now):
		return nil
	}
	if err := s.coll.delete(ctx, docID); err != nil {
		return fmt.Errorf("%w; %w", ErrSessionGone, err)
	}
	return ErrSessionGone
}

// insert stores session as a new document under a fresh session ID,
// created at now, records its state, and sets its cookie.
func (s *Store) insert(ctx context.Context, w http.ResponseWriter, session *sessions.Session, data []byte, now time.Time) error {
	id := newSessionID()
	cookie, err := s.encodeCookie(session.Name(), id)
	if err != nil {
		return err
	}
	docID := s.hasher.docID(id)
	expiresAt := s.expiresAt(session.Options, now, now)
	f := sealedFields{docID: docID, createdAt: now, updatedAt: now, expiresAt: expiresAt, data: s.sealer.wrap(docID, data)}
	mac := s.sealer.seal(&f)
	owner := s.ownerDigest(session.Values)
	if err := s.coll.insert(ctx, newDocument(f, mac, owner)); err != nil {
		return err
	}
	session.ID = id
	s.states.set(session, sessionState{
		docID:     docID,
		createdAt: now,
		savedAt:   now,
		expiresAt: expiresAt,
		encoded:   data,
		options:   *session.Options,
		owned:     owner != "",
		cookie:    cookie,
	})
	s.setCookie(w, session, cookie, expiresAt, now)
	return nil
}

// encode encodes session values (unless encoded already holds them) and
// enforces the size limit.
func (s *Store) encode(values map[any]any, encoded []byte) ([]byte, error) {
	data := encoded
	if data == nil {
		var err error
		if data, err = s.cfg.Codec.Encode(values); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEncode, err)
		}
	}
	if len(data) > s.cfg.MaxSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d", ErrTooLarge, len(data), s.cfg.MaxSize)
	}
	return data, nil
}

// delete removes the session's document, expires its cookie and forgets
// its ID.
func (s *Store) delete(ctx context.Context, w http.ResponseWriter, session *sessions.Session) error {
	if err := s.deleteDocument(ctx, session); err != nil {
		return err
	}
	s.detach(session)
	http.SetCookie(w, sessions.NewCookie(session.Name(), "", session.Options))
	return nil
}

// deleteDocument deletes the document of the session's ID, if it has one.
func (s *Store) deleteDocument(ctx context.Context, session *sessions.Session) error {
	docID := s.documentOf(session)
	if docID == "" && validSessionID(session.ID) {
		docID = s.hasher.docID(session.ID)
	}
	if docID == "" {
		return nil
	}
	return s.coll.delete(ctx, docID)
}

// Restart ends the session's stored life and makes it a new, empty
// session: it deletes the document of its ID (if there is one), clears its
// values and forgets its ID, so that its next save (Save, or the
// middleware's) stores it under a fresh ID with a new cookie. Call it at
// login when nothing of the anonymous session is to be kept, then set the
// logged-in values.
//
// Unlike RegenerateID, which carries the values over and so refuses
// (ErrSessionGone) when the session was ended elsewhere meanwhile, Restart
// succeeds whatever became of the old session: a login racing a logout in
// another tab gets a fresh session, and nothing of the logged-out one comes
// back. A database failure gives an error wrapping ErrDatabase; the session
// is emptied and detached all the same, so nothing is ever written under
// its old ID. Like Save, Restart is bounded by Config.Timeout, not by the
// request's context.
func (s *Store) Restart(r *http.Request, session *sessions.Session) error {
	ctx, cancel := s.opContext(r.Context(), true)
	defer cancel()
	err := s.deleteDocument(ctx, session)
	s.detach(session)
	clear(session.Values)
	session.IsNew = true
	return err
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
	return s.write(r, w, session, s.regenerate)
}

// regenerate is RegenerateID once write has done its part.
func (s *Store) regenerate(ctx context.Context, w http.ResponseWriter, session *sessions.Session) error {
	st, stored := s.states.get(session)
	if !stored {
		s.detach(session)
		return s.save(ctx, w, session, nil)
	}
	data, err := s.encode(session.Values, nil)
	if err != nil {
		s.detach(session)
		return err
	}
	now := s.instant(ctx)
	before, err := s.coll.remove(ctx, st.docID)
	if err != nil {
		s.detach(session)
		return err
	}
	if before == nil || !live(before, s.cfg.Now()) {
		return ErrSessionGone // deleted or expired meanwhile: never revived
	}
	s.detach(session)
	return s.insert(ctx, w, session, data, now)
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
