package mongostore

import (
	"context"
	"crypto/hmac"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// A session's lock lets the requests that ask for it (the middleware with
// Exclusive, Lock) run one at a time, across every process that shares the
// collection: a handler that reads a value, decides on it and writes (a
// one-time token, a counter with a limit) cannot act twice. The lock is a
// lease on the session's document, taken by one conditional update, which
// returns the document as the last holder left it, and released by
// another; a holder that dies leaves a lease that lapses after
// Config.LockLease. Requests without it neither wait nor change, endings
// never wait for it, and an expired session is never locked.

// Exclusive returns a Middleware option that loads each request's session
// holding its lock, waiting at most Config.LockWait for it (else
// ErrLocked), and releases the lock when the handler returns, panics or
// its request is cancelled. Give it to the middleware of the routes whose
// handlers must run one at a time per session.
func Exclusive() MiddlewareOption { return func(o *middlewareOptions) { o.exclusive = true } }

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middlewareOptions)

type middlewareOptions struct{ exclusive bool }

// middlewareLoader loads sessions for the middleware through gorilla's
// registry (the handler's Get then returns the session it loaded), holding
// their lock with Exclusive.
type middlewareLoader struct {
	*Store
	exclusive bool
}

func (l middlewareLoader) New(r *http.Request, name string) (*sessions.Session, error) {
	return l.newSession(r, name, true, l.exclusive)
}

// Lock takes the lock of the session, loaded by Get, reloading its values
// as the last holder left them, with this request's changes since its load
// applied over them (as a save's merge does; its MaxAge and a pending
// regeneration stay), and returns what releases it
// (call it when done, as with a sync.Mutex): without the middleware, or
// for part of a handler. Under the middleware, the lock is released after
// the middleware's save, when the handler returns, and unlock does nothing
// (after it, from work that outlived the handler, unlock releases it). It
// waits at most Config.LockWait (else ErrLocked). A session not stored has
// nothing to share: unlock does nothing. One that ended meanwhile gives
// ErrSessionGone, one stored meanwhile in a form it cannot read ErrDecode
// (the session stays as loaded), one whose load failed or whose last
// write's answer was lost ErrDatabase (save it again first); nil
// arguments ErrInvalidConfig.
func (s *Store) Lock(r *http.Request, session *sessions.Session) (unlock func(), err error) {
	unlock = func() {}
	if r == nil || session == nil {
		return unlock, errNil("request or session")
	}
	if session.Options == nil {
		session.Options = s.newOptions()
	}
	st := s.states.get(session)
	if err := st.unsure(); err != nil || st.id == "" || st.lock != "" {
		return unlock, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout+s.cfg.LockWait)
	defer cancel()
	mine, err := s.ownChanges(ctx, session, st)
	if err != nil {
		return unlock, err
	}
	ctx, sp := s.tel.start(ctx, opLoad)
	defer sp.endPanicked()
	l := loading{session: session, holder: newHolderID()} // managed or not as before: the table keeps it
	sp.outcome, sp.size, sp.wait, err = s.load(ctx, &l, []cookieToken{newCookieToken(st.token, st.cookie)})
	if err == nil && sp.outcome != outcomeLoaded {
		err = fmt.Errorf("%w: it ended before its lock was taken", ErrSessionGone)
	}
	sp.end(err)
	if err != nil { // the session stays as loaded: a later save finds what became of it
		s.states.set(session, st)
		return unlock, err
	}
	if err := s.relocked(ctx, session, st, mine); err != nil {
		return unlock, err
	}
	return func() {
		if !s.states.get(session).managed { // else the middleware releases it after its save
			s.unlock(r.Context(), session)
		}
	}, nil
}

// own is what a request changed of its session since it loaded it, for
// Lock to keep over the reload.
type own struct {
	id     string   // session.ID: "" while a regeneration is pending
	maxAge int      // session.Options.MaxAge: a logout's, or a "remember me"
	values *changes // nil if no longer known (the middleware has finished with it)
}

// unsure returns why what is stored of the session is unknown to the
// request, which must not lock it then: its load failed, or a write's
// answer was lost (a save tells what it did); nil if known.
func (st *sessionState) unsure() error {
	switch {
	case st.loadFailed:
		return errLoadFailed
	case st.attempted != nil:
		return errAnswerLost
	}
	return nil
}

// errAnswerLost is Lock's error for a session whose last write's answer
// was lost: a save sorts out whether it committed.
var errAnswerLost = fmt.Errorf("%w: the answer to the session's last write was lost, so what is stored is unknown: save the session again first", ErrDatabase)

// ownChanges returns what this request changed of the session, in state
// st, since it loaded it.
func (s *Store) ownChanges(ctx context.Context, session *sessions.Session, st sessionState) (own, error) {
	mine := own{id: session.ID, maxAge: session.Options.MaxAge}
	if st.released {
		return mine, nil
	}
	c, err := s.changes(ctx, &saving{session: session, st: st})
	mine.values = &c
	return mine, err
}

// relocked finishes a Lock that reloaded the session: the request's own
// cookies, ID, MaxAge and changes (mine) over what it reloaded. If these
// cannot be applied, the lock is released.
func (s *Store) relocked(ctx context.Context, session *sessions.Session, st sessionState, mine own) error {
	locked := s.states.get(session)
	locked.others, locked.cookieSet = st.others, st.cookieSet // as the request had them
	s.states.set(session, locked)
	if mine.id != st.token {
		session.ID = mine.id // a regeneration pending: the next save tries it again
	}
	if mine.maxAge != st.options.MaxAge {
		session.Options.MaxAge = mine.maxAge // set by the request since its load
	}
	if mine.values == nil {
		return nil
	}
	if err := apply(ctx, s.cfg.Codec, mine.values, session.Values); err != nil {
		s.unlock(ctx, session)
		return fmt.Errorf("this request's changes over the session reloaded: %w", err) // ErrDatabase or ErrEncode
	}
	return nil
}

// fetch reads the document chain, taking its lock for holder if not "":
// it waits, at most Config.LockWait, while another request holds it. It
// returns the document (nil if there is none) and how long it waited. A
// document that load will not serve (of another secret, no longer live) is
// returned unlocked.
func (s *Store) fetch(ctx context.Context, chain, secret, holder string) (bson.Raw, time.Duration, error) {
	if holder == "" {
		raw, err := s.coll.find(ctx, chain)
		return raw, 0, err
	}
	s.warnNonAtomic(ctx)
	start, sid := time.Now(), hashHex(secret)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		now := s.cfg.Now()
		raw, maybeTaken, err := s.coll.acquire(ctx, chain, sid, holder, now, now.Add(s.cfg.LockLease))
		if maybeTaken { // the server may have taken it as the request went away: no lock left for LockLease
			s.release(ctx, chain, holder)
		}
		if err != nil {
			return nil, time.Since(start), err
		}
		if raw == nil {
			raw, err = s.coll.find(ctx, chain)
		}
		if err != nil || raw == nil {
			return raw, time.Since(start), err
		}
		if lock, _ := raw.Lookup(fieldLock).StringValueOK(); lock == holder || !s.lockable(raw, sid, now) {
			return raw, time.Since(start), nil // taken; or a document load refuses, left unlocked
		}
		if time.Since(start)+pause > s.cfg.LockWait { // another request holds it
			return nil, time.Since(start), fmt.Errorf("%w: waited %v", ErrLocked, s.cfg.LockWait)
		}
		select {
		case <-ctx.Done():
			return nil, time.Since(start), dbError("wait for the session's lock", ctx.Err())
		case <-time.After(pause):
		}
	}
}

// openFetched opens raw, the document chain as fetch returned it for
// holder: if the codec panics, the lock fetch may have taken is released
// as the panic goes on, not left to lapse after LockLease.
func (s *Store) openFetched(ctx context.Context, raw bson.Raw, chain, holder string) (d document, encoded []byte, values map[any]any, err error) {
	if holder == "" {
		return s.openLoaded(raw, chain)
	}
	opened := false
	defer func() {
		if !opened {
			s.release(ctx, chain, holder)
		}
	}()
	d, encoded, values, err = s.open(raw)
	opened = true
	return d, encoded, values, err
}

// lockable reports whether raw is a session of the secret whose hash is
// sid, live at now: one a request may wait to lock.
func (s *Store) lockable(raw bson.Raw, sid string, now time.Time) bool {
	d, err := parseDocument(raw)
	return err == nil && hmac.Equal([]byte(d.sid), []byte(sid)) && s.live(&d, now) // in constant time, as secrets are compared
}

// unlock releases the lock the session's request holds, if any.
func (s *Store) unlock(ctx context.Context, session *sessions.Session) {
	st := s.states.get(session)
	if st.lock == "" {
		return
	}
	s.release(ctx, st.id, st.lock)
	st.lock = ""
	s.states.set(session, st)
}

// release releases holder's lock of chain, bounded by Config.Timeout even
// if ctx is cancelled; a failure is logged: the lease lapses.
func (s *Store) release(ctx context.Context, chain, holder string) {
	ctx, cancel := s.opContext(ctx, true)
	defer cancel()
	if err := s.coll.release(ctx, chain, holder); err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: releasing a session's lock (it lapses after LockLease)",
			slog.String("error", err.Error()))
	}
}

// warnNonAtomic logs once that the server's locks hold within one process
// only (FerretDB v1).
func (s *Store) warnNonAtomic(ctx context.Context) {
	s.warnOnce.Do(func() {
		if atomic, err := s.coll.atomicWrites(ctx); err == nil && !atomic {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: this server's findAndModify is not atomic across processes "+
				"(FerretDB v1): a session's lock holds within this process only", slog.String("collection", s.coll.c.Name()))
		}
	})
}
