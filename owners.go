package mongostore

import (
	"cmp"
	"context"
	"crypto/hmac"
	"log/slog"
	"slices"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The owner is a session value, like gorilla's flashes: authenticated and
// encrypted with the others. Each save copies a keyed digest of it into the
// document's owner field, which an index covers.

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

// maxDeviceLength is the longest device label SetOwner keeps, in bytes.
const maxDeviceLength = 200

// SetOwner ties the session to owner, a user ID, with a device label for
// the owner's list of sessions ("Firefox on Linux"; at most 200 bytes), at
// the next save; "" unties it. Call it at login. Label devices, not people:
// an IP address is personal data in many jurisdictions.
func SetOwner(session *sessions.Session, owner, device string) {
	delete(session.Values, ownerKey)
	delete(session.Values, deviceKey)
	if owner == "" {
		return
	}
	session.Values[ownerKey] = owner
	if len(device) > maxDeviceLength {
		n := maxDeviceLength
		for n > 0 && device[n]&0xC0 == 0x80 { // do not split a character
			n--
		}
		device = device[:n]
	}
	if device != "" {
		session.Values[deviceKey] = device
	}
}

// OwnedSession is one live session of an owner.
type OwnedSession struct {
	// Handle names the session for EndSession, for its owner only; it can
	// never become a session ID or a cookie.
	Handle string
	// Current says this is the request's own session.
	Current bool
	// Device is the label given to SetOwner.
	Device string
	SessionTimes
}

// ListSessions returns the live sessions of owner, the latest saved first,
// marking the request's own (current, may be nil). Only sessions whose
// authenticated values name owner are listed. Errors wrap ErrDatabase.
func (s *Store) ListSessions(ctx context.Context, owner string, current *sessions.Session) ([]OwnedSession, error) {
	if owner == "" {
		return nil, nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opListSessions)
	listed, err := s.ownedSessions(ctx, owner, s.stateOf(current))
	out := make([]OwnedSession, len(listed))
	for i, o := range listed {
		out[i] = o.OwnedSession
	}
	sp.count = int64(len(out))
	sp.end(err)
	return out, err
}

// ownedSession is a live session of an owner, with its chain's state.
type ownedSession struct {
	OwnedSession
	st sessionState
}

// stateOf returns the state of session, which may be nil.
func (s *Store) stateOf(session *sessions.Session) sessionState {
	if session == nil {
		return sessionState{}
	}
	return s.states.get(session)
}

// ownedSessions returns the live sessions of owner, the latest saved first,
// marking the chain of cur, one per chain (a RegenerateID under way has two documents for a moment).
func (s *Store) ownedSessions(ctx context.Context, owner string, cur sessionState) ([]ownedSession, error) {
	docs, err := s.coll.findOwned(ctx, s.sealer.ownerDigests(owner), s.cfg.Now())
	if err != nil {
		return nil, err
	}
	var out []ownedSession
	for _, raw := range docs {
		if o, ok := s.owned(ctx, raw, owner, cur); ok {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b ownedSession) int {
		return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(a.Handle, b.Handle))
	})
	seen := map[string]bool{} // a chain being moved by RegenerateID has two documents for a moment
	return slices.DeleteFunc(out, func(o ownedSession) bool { dup := seen[o.Handle]; seen[o.Handle] = true; return dup }), nil
}

// owned describes raw if it is a live session of owner's; cur is the
// state of the request's own session.
func (s *Store) owned(ctx context.Context, raw bson.Raw, owner string, cur sessionState) (ownedSession, bool) {
	d, encoded, values, err := s.open(raw)
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: listing sessions: skipping an unreadable one", slog.String("error", err.Error()))
		return ownedSession{}, false
	}
	st := stateOf(&d, encoded, values, &sessions.Options{})
	if st.owner != owner || !s.live(&d, s.cfg.Now()) {
		return ownedSession{}, false
	}
	return ownedSession{OwnedSession: OwnedSession{Handle: s.sealer.handle(st.lineage), Current: cur.id != "" && cur.lineage == st.lineage,
		Device: st.device, SessionTimes: st.times()}, st: st}, true
}

// EndSession ends the session of owner named by handle (from ListSessions)
// and returns it: its device's next request gets a fresh session, and a
// save under way there fails with ErrSessionGone. It never ends the
// request's own session (current; log out instead): ended is false then,
// and the session returned has Current set. Errors wrap ErrDatabase.
func (s *Store) EndSession(ctx context.Context, owner, handle string, current *sessions.Session) (session OwnedSession, ended bool, err error) {
	if owner == "" || handle == "" {
		return OwnedSession{}, false, nil
	}
	ctx, cancel := s.opContext(ctx, true)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opEndSession)
	defer func() {
		if sp.outcome = outcomeNotEnded; ended {
			sp.outcome = outcomeEnded
		}
		sp.end(err)
	}()
	listed, err := s.ownedSessions(ctx, owner, s.stateOf(current))
	for _, o := range listed {
		if !hmac.Equal([]byte(o.Handle), []byte(handle)) {
			continue
		}
		if o.Current {
			return o.OwnedSession, false, nil
		}
		n, err := s.endOwned(ctx, []ownedSession{o}, EndByHandle)
		if n == 0 {
			return OwnedSession{}, false, err
		}
		return o.OwnedSession, true, err
	}
	return OwnedSession{}, false, err
}

// EndOtherSessions ends every session of owner but current ("sign out
// everywhere else"), and returns how many. A nil current ends them all
// (after a password change, say). Errors wrap ErrDatabase.
func (s *Store) EndOtherSessions(ctx context.Context, owner string, current *sessions.Session) (int64, error) {
	if owner == "" {
		return 0, nil
	}
	ctx, cancel := s.opContext(ctx, true)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opEndOtherSessions)
	sp.outcome = outcomeEnded
	n, err := s.endOthers(ctx, owner, s.stateOf(current), 0, EndEverywhere)
	sp.count = n
	sp.end(err)
	return n, err
}

// endOthers ends the sessions of owner but the chain of cur and the keep
// most recently saved others, and looks again until none is left: a
// session saved or moved meanwhile is ended too. It returns how many it
// ended.
func (s *Store) endOthers(ctx context.Context, owner string, cur sessionState, keep int, reason EndReason) (int64, error) {
	var total int64
	for range maxEndRounds {
		listed, err := s.ownedSessions(ctx, owner, cur)
		if err != nil {
			return total, err
		}
		listed = slices.DeleteFunc(listed, func(o ownedSession) bool { return o.Current })
		if len(listed) <= keep {
			return total, nil
		}
		n, err := s.endOwned(ctx, listed[keep:], reason)
		if total += n; err != nil {
			return total, err
		}
	}
	return total, nil
}

// endOwned ends the chains of listed and returns how many it ended.
func (s *Store) endOwned(ctx context.Context, listed []ownedSession, reason EndReason) (int64, error) {
	var n int64
	for _, o := range listed {
		ended, err := s.coll.endChain(ctx, o.st.id, o.st.lineage)
		if ended {
			n++
			s.emit(ctx, EventEnded, reason, o.st)
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// limit ends the least recently saved sessions of st's owner beyond
// Config.MaxSessionsPerOwner, never st's own: a session has just been tied
// to the owner. Failures are logged: the save itself succeeded.
func (s *Store) limit(ctx context.Context, st sessionState) {
	if s.cfg.MaxSessionsPerOwner <= 0 {
		return
	}
	if _, err := s.endOthers(ctx, st.owner, st, s.cfg.MaxSessionsPerOwner-1, EndLimit); err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "mongostore: ending sessions over MaxSessionsPerOwner", slog.String("error", err.Error()))
	}
}
