package mongostore

import (
	"context"
	"net/http"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// A session ends by a logout (a save with Options.MaxAge < 0), Restart,
// EndSession, EndOtherSessions or the per-owner limit (owners.go): one
// delete of its one document, and a later save of it finds it gone. No
// command ever puts a deleted document back.

// end deletes the session's document and those of the request's other
// cookies of its name whose secret is still theirs, and reports each ended
// once (as expired if it had expired), and whether it deleted any. It then
// forgets the session's ID and state, and expires its cookie unless w is
// nil.
func (s *Store) end(ctx context.Context, w http.ResponseWriter, session *sessions.Session, st sessionState, reason EndReason) (ended bool, err error) {
	for _, o := range st.others {
		raw, err := s.coll.remove(ctx, o.chain, o.sid)
		if err != nil {
			return ended, err
		}
		ended = ended || raw != nil
		s.emitRemoved(ctx, reason, raw, nil)
	}
	if st.id != "" {
		raw, deleted, err := s.deleteChain(ctx, st.id)
		if err != nil {
			return ended, err
		}
		ended = ended || deleted
		s.emitRemoved(ctx, reason, raw, &st)
	}
	session.ID = ""
	s.states.set(session, sessionState{cookieSet: w != nil})
	if w != nil {
		setCookie(w, session.Name(), "", s.expiring(session.Options), time.Time{}, time.Time{})
	}
	return ended, nil
}

// deleteChain deletes the document id, and says whether this command
// deleted it; with a subscriber, it returns the document as deleted, to
// report (one delete command without).
func (s *Store) deleteChain(ctx context.Context, id string) (bson.Raw, bool, error) {
	if s.cfg.OnEvent == nil {
		deleted, err := s.coll.delete(ctx, id)
		return nil, deleted, err
	}
	raw, err := s.coll.take(ctx, id)
	return raw, raw != nil, err
}

// emitRemoved reports the end of raw, a document an ending for reason
// deleted (none if nil), as it was stored when deleted (another request
// may have saved it since this one loaded it): by fallback, if not nil,
// where it cannot be read.
func (s *Store) emitRemoved(ctx context.Context, reason EndReason, raw bson.Raw, fallback *sessionState) {
	if raw == nil || s.cfg.OnEvent == nil {
		return
	}
	if d, _, values, err := s.open(raw); err == nil {
		s.emitEnd(ctx, reason, storedState(&d, values))
	} else if fallback != nil {
		s.emitEnd(ctx, reason, *fallback)
	}
}

// expiring returns the options that expire a cookie: opts, or the store's
// scope if the application replaced them by some without a Path (as
// &sessions.Options{MaxAge: -1}), which would expire another path's cookie.
func (s *Store) expiring(opts *sessions.Options) *sessions.Options {
	if opts.Path != "" {
		return opts
	}
	o := s.newOptions()
	o.MaxAge = -1
	return o
}

// Restart ends the session's stored life and empties it, so that its next
// save stores it as a new chain with the store's Options: call it at
// login when nothing of the anonymous session is kept. Unlike RegenerateID,
// it succeeds whatever became of the old session (a login racing a logout
// gets a fresh one). A database failure gives ErrDatabase, nil arguments
// ErrInvalidConfig; the session is emptied all the same.
func (s *Store) Restart(r *http.Request, session *sessions.Session) error {
	if r == nil || session == nil {
		return errNil("request or session")
	}
	ctx, cancel := s.opContext(r.Context(), true)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opEnd)
	defer sp.endPanicked()
	ended, err := s.end(ctx, nil, session, s.states.get(session), EndRestart)
	if sp.outcome = outcomeEnded; !ended {
		sp.outcome = outcomeNotEnded
	}
	sp.end(err)
	if err != nil {
		s.unlock(ctx, session) // the document may stay: not its lock
	}
	s.states.forget(session)
	session.ID = ""
	clear(session.Values)
	session.IsNew, session.Options = true, s.newOptions()
	return err
}
