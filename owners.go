package mongostore

import (
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
	docs, err := s.coll.findOwned(ctx, s.sealer.ownerDigests(owner), s.cfg.Now())
	if err != nil {
		sp.end(err)
		return nil, err
	}
	var out []OwnedSession
	for _, raw := range docs {
		if info, _, ok := s.owned(ctx, raw, owner, current); ok {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b OwnedSession) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	sp.count = int64(len(out))
	sp.end(nil)
	return out, nil
}

// owned describes raw, and returns its document, if it is a live session
// of owner's.
func (s *Store) owned(ctx context.Context, raw bson.Raw, owner string, current *sessions.Session) (OwnedSession, document, bool) {
	d, _, values, err := s.open(raw)
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: listing sessions: skipping an unreadable one", slog.String("error", err.Error()))
		return OwnedSession{}, d, false
	}
	o, device := ownerOf(values)
	if o != owner || !s.live(&d, s.cfg.Now()) {
		return OwnedSession{}, d, false
	}
	return OwnedSession{
		Handle:       s.sealer.handle(d.id),
		Current:      current != nil && s.states.get(current).id == d.id,
		Device:       device,
		SessionTimes: SessionTimes{CreatedAt: d.createdAt, UpdatedAt: d.updatedAt, ExpiresAt: d.expiresAt},
	}, d, true
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
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opEndSession)
	defer func() {
		if sp.outcome = outcomeNotEnded; ended {
			sp.outcome = outcomeEnded
		}
		sp.end(err)
	}()
	docs, err := s.coll.findOwned(ctx, s.sealer.ownerDigests(owner), s.cfg.Now())
	if err != nil {
		return OwnedSession{}, false, err
	}
	for _, raw := range docs {
		id, _ := raw.Lookup(fieldID).StringValueOK()
		if !hmac.Equal([]byte(s.sealer.handle(id)), []byte(handle)) {
			continue
		}
		info, d, ok := s.owned(ctx, raw, owner, current)
		if !ok || info.Current {
			return info, false, nil
		}
		if ended, err = s.coll.deleteOwned(ctx, d.owner, d.id); !ended {
			info = OwnedSession{}
		}
		return info, ended, err
	}
	return OwnedSession{}, false, nil
}

// EndOtherSessions ends every session of owner but current ("sign out
// everywhere else") in one delete, and returns how many. A nil current ends
// them all (after a password change, say). Errors wrap ErrDatabase.
func (s *Store) EndOtherSessions(ctx context.Context, owner string, current *sessions.Session) (int64, error) {
	if owner == "" {
		return 0, nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	except := ""
	if current != nil {
		except = s.states.get(current).id
	}
	ctx, sp := s.tel.start(ctx, opEndOtherSessions)
	n, err := s.coll.deleteOthers(ctx, s.sealer.ownerDigests(owner), except)
	sp.outcome, sp.count = outcomeEnded, n
	sp.end(err)
	return n, err
}
