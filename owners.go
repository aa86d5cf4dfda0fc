package mongostore

import (
	"cmp"
	"context"
	"crypto/hmac"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The owner is a session value, like gorilla's flashes: authenticated and
// encrypted with the others. Each save copies a keyed digest of it into the
// document's owner field, which an index covers.

// maxDeviceLength is the longest device label SetOwner keeps, in bytes.
const maxDeviceLength = 200

// SetOwner ties the session to owner, a user ID, with a device label for
// the owner's list of sessions ("Firefox on Linux"; at most 200 bytes), at
// the next save; "" unties it. Call it at login. Label devices, not people:
// an IP address is personal data in many jurisdictions. Both are session
// values, under the keys "_mongostore_owner" and "_mongostore_device".
func SetOwner(session *sessions.Session, owner, device string) {
	if session == nil {
		panic("mongostore: SetOwner: nil session") // as net/http does for a nil handler: no error to return
	}
	if session.Values == nil {
		session.Values = make(map[any]any)
	}
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
// authenticated values name owner are listed, at most 1,000, and those
// whose values the codec cannot decode, by their owner digest, with no
// device. Errors wrap ErrDatabase, or ErrInvalidConfig for a nil ctx.
func (s *Store) ListSessions(ctx context.Context, owner string, current *sessions.Session) ([]OwnedSession, error) {
	if ctx == nil {
		return nil, errNil("context")
	}
	if owner == "" {
		return nil, nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opListSessions)
	defer sp.endPanicked()
	listed, _, err := s.ownedSessions(ctx, owner, s.chainOf(current))
	out := make([]OwnedSession, len(listed))
	for i, o := range listed {
		out[i] = o.OwnedSession
	}
	sp.count = int64(len(out))
	sp.end(err)
	return out, err
}

// ownedSession is a live session of an owner, with its state.
type ownedSession struct {
	OwnedSession
	st sessionState
}

// chainOf returns the chain ID of session, which may be nil, or "".
func (s *Store) chainOf(session *sessions.Session) string {
	if session == nil {
		return ""
	}
	return s.states.get(session).id
}

// ownedSessions returns the live sessions of owner, the latest saved first,
// marking the one of chain current, and whether the listing held them all
// (fewer than the cap of a listing, maxOwned). It reads past the sessions
// it cannot read, and logs them, and those it lists undecoded.
func (s *Store) ownedSessions(ctx context.Context, owner, current string) ([]ownedSession, bool, error) {
	var out []ownedSession
	var skipped, undecoded int
	var skipErr, decodeErr error
	now, digests := s.cfg.Now(), s.sealer.ownerDigests(owner)
	complete, err := s.coll.findOwned(ctx, digests, now, func(raw bson.Raw) bool {
		o, ok, err := s.owned(raw, owner, digests, current, now)
		switch {
		case ok && err != nil:
			out, undecoded, decodeErr = append(out, o), undecoded+1, err
		case ok:
			out = append(out, o)
		case err != nil:
			skipped, skipErr = skipped+1, err
		}
		return ok
	})
	s.logListing(ctx, "skipped unreadable ones", skipped, skipErr)
	s.logListing(ctx, "listed by their owner digest ones whose values the codec cannot decode", undecoded, decodeErr)
	if err != nil {
		return nil, false, err
	}
	slices.SortFunc(out, func(a, b ownedSession) int {
		return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(a.Handle, b.Handle))
	})
	return out, complete, nil
}

// owned describes raw if it is a session of owner's live at now, or gives
// the error that keeps it from being read; digests are owner's digests,
// current is the chain of the request's own session. A session the keys
// verify but whose values the codec cannot decode (saved by a newer
// instance, or one with types this process has not registered) is owner's
// if its owner digest is one of digests, with no device, and the decode's
// error.
func (s *Store) owned(raw bson.Raw, owner string, digests []string, current string, now time.Time) (ownedSession, bool, error) {
	d, encoded, err := s.unseal(raw)
	if err != nil {
		return ownedSession{}, false, err
	}
	values, err := s.cfg.Codec.Decode(encoded)
	st := stateOf(&d, encoded, values, &sessions.Options{MaxAge: d.maxAge})
	if err != nil && slices.Contains(digests, d.owner) {
		st.owner, err = owner, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if st.owner != owner || !s.live(&d, now) {
		return ownedSession{}, false, nil
	}
	return ownedSession{OwnedSession: OwnedSession{Handle: handle(d.id), Current: current != "" && current == d.id,
		Device: st.device, SessionTimes: st.times()}, st: st}, true, err
}

// logListing logs, if n > 0, the n sessions of a listing that what says,
// and the last one's error.
func (s *Store) logListing(ctx context.Context, what string, n int, err error) {
	if n > 0 {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: listing sessions: "+what,
			slog.Int("count", n), slog.String("error", err.Error()))
	}
}

// EndSession ends the session of owner named by handle (from ListSessions)
// and returns it: its device's next request gets a fresh session, and a
// save under way there fails with ErrSessionGone. It never ends the
// request's own session (current; log out instead: ended is false, and the
// session returned has Current set), nor one another owner signed in to
// since it was listed (ended is false, the session zero). Errors wrap
// ErrDatabase, or ErrInvalidConfig for a nil ctx.
func (s *Store) EndSession(ctx context.Context, owner, handle string, current *sessions.Session) (session OwnedSession, ended bool, err error) {
	if ctx == nil {
		return OwnedSession{}, false, errNil("context")
	}
	if owner == "" || handle == "" {
		return OwnedSession{}, false, nil
	}
	ctx, cancel := s.opContext(ctx, true)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opEndSession)
	defer sp.endPanicked() // a custom codec's panic
	session, ended, err = s.endByHandle(ctx, owner, handle, current)
	if sp.outcome = outcomeNotEnded; ended {
		sp.outcome = outcomeEnded
	}
	sp.end(err)
	return session, ended, err
}

// endByHandle is EndSession's work, under its span.
func (s *Store) endByHandle(ctx context.Context, owner, handle string, current *sessions.Session) (OwnedSession, bool, error) {
	listed, _, err := s.ownedSessions(ctx, owner, s.chainOf(current))
	i := slices.IndexFunc(listed, func(o ownedSession) bool { return hmac.Equal([]byte(o.Handle), []byte(handle)) })
	if i < 0 {
		return OwnedSession{}, false, err
	}
	if listed[i].Current {
		return listed[i].OwnedSession, false, nil
	}
	n, err := s.endListed(ctx, owner, listed[i:i+1], EndByHandle)
	if n == 0 {
		return OwnedSession{}, false, err
	}
	return listed[i].OwnedSession, true, err
}

// EndOtherSessions ends every session of owner but current ("sign out
// everywhere else"), however many, and returns how many it ended. A nil
// current ends them all (after a password change, say). Sessions saved
// meanwhile are ended too, but if they keep coming (a script signing in
// again and again) it gives up, with ErrConflict. Each of its commands (a
// listing of at most 1,000 sessions, a delete) has its own Config.Timeout,
// and ctx's cancellation does not stop it; if one fails, the error
// (wrapping ErrDatabase) says how many were ended and left. Sessions its
// keys do not verify are left: no request can load them. Those whose
// values its codec cannot decode (another instance's types) are ended by
// their owner digest. A nil ctx gives ErrInvalidConfig.
func (s *Store) EndOtherSessions(ctx context.Context, owner string, current *sessions.Session) (int64, error) {
	if ctx == nil {
		return 0, errNil("context")
	}
	if owner == "" {
		return 0, nil
	}
	ctx, sp := s.tel.start(context.WithoutCancel(ctx), opEndOtherSessions)
	defer sp.endPanicked()
	n, err := s.endOwned(ctx, owner, s.chainOf(current), 0, EndEverywhere)
	if sp.outcome, sp.count = outcomeEnded, n; n == 0 {
		sp.outcome = outcomeNotEnded
	}
	sp.end(err)
	return n, err
}

const (
	maxIdleRounds = 3 // bounds the rounds of endOwned that end nothing of what it missed before
	maxChases     = 3 // bounds its rounds after the first that found nothing left from before it began
)

// endOwned ends the sessions of owner but chain current and the keep most
// recently saved others, and looks again until none is left: a session
// saved meanwhile is ended too. Once a round finds nothing left from before
// it began (its listing held them all, or no target saved before then that
// no round has tried to end: logins can fill every listing), maxChases
// more rounds follow; then EndOtherSessions gives up with ErrConflict, and
// a limit (EndLimit) stops with no error, as each login still coming runs a
// limit of its own. It returns how many it ended. Each
// command is bounded by Config.Timeout, so that any number of sessions can
// end. A delete that finds nothing has lost to another ending (or to a
// sign-in of another owner), unless the session is listed again
// (DocumentDB can miss one saved meanwhile): only that is no progress.
func (s *Store) endOwned(ctx context.Context, owner, current string, keep int, reason EndReason) (int64, error) {
	var total int64
	var missed map[string]bool                      // the sessions the last round tried, if it ended none
	tried := map[string]bool{}                      // the sessions any round tried
	start := s.cfg.Now().Truncate(time.Millisecond) // as updatedAt is stored
	for idle, caughtUp := 0, 0; ; {
		lctx, cancel := s.opContext(ctx, false)
		listed, complete, err := s.ownedSessions(lctx, owner, current)
		cancel()
		listed = slices.DeleteFunc(listed, func(o ownedSession) bool { return o.Current })
		targets := listed[min(keep, len(listed)):]
		if complete || !slices.ContainsFunc(targets, func(o ownedSession) bool { return !o.UpdatedAt.After(start) && !tried[o.st.id] }) {
			caughtUp++ // nothing is left from before it began: the rest came meanwhile
		}
		var n int64
		if err == nil && len(targets) > 0 && caughtUp <= 1+maxChases {
			n, err = s.endListed(ctx, owner, targets, reason)
		}
		left := int64(len(targets)) - n
		tried = withChainIDs(tried, targets)
		if total += n; n == 0 && slices.ContainsFunc(targets, func(o ownedSession) bool { return missed[o.st.id] }) {
			idle++ // a delete found nothing, yet the session is still there
		}
		if missed = nil; n == 0 {
			missed = withChainIDs(nil, targets)
		}
		switch {
		case err != nil:
			return total, fmt.Errorf("%w (%d ended, %d or more left)", err, total, left)
		case len(listed) <= keep, caughtUp > 1+maxChases && reason == EndLimit:
			return total, nil
		case caughtUp > 1+maxChases:
			return total, fmt.Errorf("%w: the owner's sessions kept being saved while they were ended (%d ended, %d or more left)",
				ErrConflict, total, left)
		case idle == maxIdleRounds:
			return total, fmt.Errorf("%w: %d sessions could not be ended (%d ended)", ErrDatabase, left, total)
		}
	}
}

// withChainIDs adds the chain IDs of listed to ids (a new set if nil), and
// returns it.
func withChainIDs(ids map[string]bool, listed []ownedSession) map[string]bool {
	if ids == nil {
		ids = make(map[string]bool, len(listed))
	}
	for _, o := range listed {
		ids[o.st.id] = true
	}
	return ids
}

// endListed ends the sessions of listed that are still owner's, one delete
// each (bounded by Config.Timeout), and returns how many it ended.
func (s *Store) endListed(ctx context.Context, owner string, listed []ownedSession, reason EndReason) (int64, error) {
	var n int64
	owners := s.sealer.ownerDigests(owner)
	for _, o := range listed {
		dctx, cancel := s.opContext(ctx, false)
		ended, err := s.coll.deleteOwned(dctx, o.st.id, owners)
		cancel()
		if err != nil {
			return n, err
		}
		if ended {
			n++
			s.emitEnd(ctx, reason, o.st)
		}
	}
	return n, nil
}

// limit ends the least recently saved sessions of the owner of session
// beyond Config.MaxSessionsPerOwner, never session itself, which has just
// been tied to its owner: with its own Config.Timeout, after the save and
// its event. It returns ErrLimit if it could not.
func (s *Store) limit(ctx context.Context, session *sessions.Session) error {
	if s.cfg.MaxSessionsPerOwner <= 0 {
		return nil
	}
	st := s.states.get(session)
	if _, err := s.endOwned(context.WithoutCancel(ctx), st.owner, st.id, s.cfg.MaxSessionsPerOwner-1, EndLimit); err != nil {
		return fmt.Errorf("%w: %w", ErrLimit, err)
	}
	return nil
}
