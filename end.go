package mongostore

import (
	"context"
	"net/http"
	"time"

	"github.com/gorilla/sessions"
)

// A session ends by a logout (a save with Options.MaxAge < 0), Restart,
// EndSession, EndOtherSessions or the per-owner limit (owners.go): its
// whole sign-in chain is deleted, wherever a concurrent RegenerateID has
// moved it, and a later save of it finds it gone.

// end deletes the session's documents and those of the request's other
// cookies of its name, expires the cookie, and forgets the ID.
func (s *Store) end(ctx context.Context, w http.ResponseWriter, sv *saving) error {
	if err := s.endLoaded(ctx, sv.session, sv.st, EndLogout); err != nil {
		return err
	}
	s.detach(sv.session)
	setCookie(w, sv.session.Name(), "", sv.session.Options, time.Time{}, time.Time{})
	return nil
}

// endLoaded ends the chain of session, st, wherever a concurrent
// RegenerateID has moved it, and the sessions of st.others.
func (s *Store) endLoaded(ctx context.Context, session *sessions.Session, st sessionState, reason EndReason) error {
	ids := st.others
	if st.id == "" && validSessionID(session.ID) {
		ids = append(ids, docID(session.ID))
	}
	for _, id := range ids {
		if err := s.endOther(ctx, id, reason); err != nil {
			return err
		}
	}
	if st.id == "" {
		return nil
	}
	ended, err := s.coll.endChain(ctx, st.id, st.lineage)
	if ended {
		s.emit(ctx, EventEnded, reason, st)
	}
	return err
}

// endOther deletes the document id, named by another cookie of the
// request, and reports its session ended if it was live.
func (s *Store) endOther(ctx context.Context, id string, reason EndReason) error {
	raw, err := s.coll.remove(ctx, id)
	if raw == nil || s.cfg.OnEvent == nil {
		return err
	}
	if d, _, values, err := s.open(raw); err == nil && s.live(&d, s.cfg.Now()) {
		s.emit(ctx, EventEnded, reason, stateOf(&d, nil, values, &sessions.Options{}))
	}
	return nil
}

// detach forgets the session's ID and state: its next save inserts it
// under a fresh ID.
func (s *Store) detach(session *sessions.Session) {
	s.states.forget(session)
	session.ID = ""
}

// Restart ends the session's stored life and empties it, so that its next
// save stores it under a fresh ID with the store's Options: call it at
// login when nothing of the anonymous session is kept. Unlike RegenerateID,
// it succeeds whatever became of the old session (a login racing a logout
// gets a fresh one). A database failure gives ErrDatabase; the session is
// emptied all the same.
func (s *Store) Restart(r *http.Request, session *sessions.Session) error {
	ctx, cancel := s.opContext(r.Context(), true)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opEnd)
	sp.outcome = outcomeEnded
	err := s.endLoaded(ctx, session, s.states.get(session), EndRestart)
	sp.end(err)
	s.detach(session)
	clear(session.Values)
	session.IsNew, session.Options = true, s.newOptions()
	return err
}
