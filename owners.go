package mongostore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"slices"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// This file ties sessions to their owners, so that an application can show
// a user their sessions ("your devices") and end them: one, all but the
// current one ("sign out everywhere else"), or all (after a password
// change).
//
// The owner is a value of the session, like gorilla's flashes: it is
// encoded, authenticated and (with a block key) encrypted with the other
// values, follows the session through RegenerateID and is cleared by
// Restart. Each save also copies it into the document's owner field, which
// a sparse index {owner: 1} covers: sessions without an owner have no entry
// in it and no owner field, so applications that never call SetOwner pay
// nothing for it.

// Session values that tie a session to its owner; SetOwner sets them.
const (
	// OwnerKey holds the owner's ID (a string the application chooses,
	// such as its user ID).
	OwnerKey = "_mongostore_owner"
	// DeviceKey holds a label for the device, for the owner's eyes (for
	// example "Firefox on Linux", made from the User-Agent).
	DeviceKey = "_mongostore_device"
)

// MaxDeviceLength is the longest device label SetOwner keeps, in bytes.
const MaxDeviceLength = 200

// SetOwner ties the session to owner, a user ID chosen by the application,
// with a device label to show in the owner's list of sessions (empty for
// none). Call it at login, after Restart or RegenerateID; the next save
// (Save, or the middleware's) records it. An empty owner unties the
// session. The label is cut to MaxDeviceLength bytes; store what the owner
// needs to recognise the device, not what identifies a person (the IP
// address is personal data in many jurisdictions: add it only if you mean
// to).
func SetOwner(session *sessions.Session, owner, device string) {
	if owner == "" {
		delete(session.Values, OwnerKey)
		delete(session.Values, DeviceKey)
		return
	}
	session.Values[OwnerKey] = owner
	if device == "" {
		delete(session.Values, DeviceKey)
		return
	}
	if len(device) > MaxDeviceLength {
		device = truncateUTF8(device, MaxDeviceLength)
	}
	session.Values[DeviceKey] = device
}

// Owner returns the owner and device label SetOwner gave the session; owner
// is "" if it has none.
func Owner(session *sessions.Session) (owner, device string) {
	o := ownershipOf(session.Values)
	return o.owner, o.device
}

// ownershipOf returns the ownership the values hold.
func ownershipOf(values map[any]any) ownership {
	owner, _ := values[OwnerKey].(string)
	if owner == "" {
		return ownership{}
	}
	device, _ := values[DeviceKey].(string)
	return ownership{owner: owner, device: device}
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// OwnedSession describes one live session of an owner, for a page that
// lists the owner's devices.
type OwnedSession struct {
	// Handle names the session for EndSession. It is derived from the
	// session's document with a key of the store's, so it can never be
	// turned into a session ID or a cookie, and it ends the session only
	// for its owner.
	Handle string
	// Current says this is the session of the request (the current
	// argument of ListSessions).
	Current bool
	// Device is the label given to SetOwner.
	Device string
	// CreatedAt is when the session began (at login, with Restart or
	// RegenerateID), LastActive when it was last saved, and ExpiresAt when
	// it ends unless it is used again.
	CreatedAt, LastActive, ExpiresAt time.Time
}

// ListSessions returns the live sessions of owner, the most recently active
// first: one find {owner} on the owner index (expiry is checked on what
// comes back). current, if not nil, is the session
// of the request, marked Current in the list. Only sessions whose stored
// values name owner are listed (the owner field of a document is a copy
// for the index, trusted only once the values, authenticated by the
// document's MAC, agree), and never an expired one. Errors wrap
// ErrDatabase.
func (s *Store) ListSessions(ctx context.Context, owner string, current *sessions.Session) ([]OwnedSession, error) {
	if owner == "" {
		return nil, nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	now := s.cfg.Now()
	docs, err := s.coll.findOwned(ctx, owner)
	if err != nil {
		return nil, err
	}
	currentID := s.documentOf(current)
	var out []OwnedSession
	for _, raw := range docs {
		docID, ok := bson.Raw(raw).Lookup(fieldID).StringValueOK()
		if !ok {
			continue
		}
		doc, _, values, err := s.decodeStored(docID, raw)
		if err != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: listing sessions: skipping an unreadable session",
				slog.String("error", err.Error()))
			continue
		}
		o := ownershipOf(values)
		if o.owner != owner || !doc.expiresAt.After(now) {
			continue
		}
		out = append(out, OwnedSession{
			Handle:     s.sealer.handle(docID),
			Current:    docID == currentID,
			Device:     o.device,
			CreatedAt:  doc.createdAt,
			LastActive: doc.updatedAt,
			ExpiresAt:  doc.expiresAt,
		})
	}
	slices.SortFunc(out, func(a, b OwnedSession) int { return b.LastActive.Compare(a.LastActive) })
	return out, nil
}

// EndSession ends the session of owner named by handle (from
// ListSessions), and reports whether there was such a session. Ended means
// deleted: the device's next request gets a fresh session, and a save
// already under way there fails with ErrSessionGone instead of bringing it
// back. A handle of another owner's session ends nothing. Errors wrap
// ErrDatabase.
func (s *Store) EndSession(ctx context.Context, owner, handle string) (bool, error) {
	if owner == "" || handle == "" {
		return false, nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	docs, err := s.coll.findOwned(ctx, owner)
	if err != nil {
		return false, err
	}
	for _, raw := range docs {
		docID, ok := bson.Raw(raw).Lookup(fieldID).StringValueOK()
		if ok && hmac.Equal([]byte(s.sealer.handle(docID)), []byte(handle)) {
			return s.coll.deleteOwned(ctx, owner, docID)
		}
	}
	return false, nil
}

// EndOtherSessions ends every session of owner except current ("sign out
// everywhere else"), in one delete on the owner index, and returns how
// many it ended. With a nil current, or one not stored yet, it ends them
// all. Errors wrap ErrDatabase.
func (s *Store) EndOtherSessions(ctx context.Context, owner string, current *sessions.Session) (int64, error) {
	if owner == "" {
		return 0, nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	return s.coll.deleteOthers(ctx, owner, s.documentOf(current))
}

// EndAllSessions ends every session of owner, for example after a password
// change or by an administrator, and returns how many it ended. A session
// of owner in the request that calls it is ended too: to keep it, use
// EndOtherSessions. Errors wrap ErrDatabase.
func (s *Store) EndAllSessions(ctx context.Context, owner string) (int64, error) {
	return s.EndOtherSessions(ctx, owner, nil)
}

// documentOf returns the _id of the document session was loaded from or
// saved as, or "" if it has none (nil, new, or ended).
func (s *Store) documentOf(session *sessions.Session) string {
	if session == nil {
		return ""
	}
	st, ok := s.states.get(session)
	if !ok {
		return ""
	}
	return st.docID
}

// ensureOwnerIndex makes sure the sparse index {owner: 1} exists. A server
// that cannot create it (or, like FerretDB v1, ignores sparse and uses no
// index but _id's anyway) still lists and ends sessions, by a scan.
func (s *Store) ensureOwnerIndex(ctx context.Context) error {
	specs, err := s.coll.indexSpecs(ctx)
	if err != nil {
		return err
	}
	for _, spec := range specs {
		if name, _ := spec.Lookup("name").StringValueOK(); name == ownerIndexName {
			return nil
		}
	}
	err = s.coll.createOwnerIndex(ctx)
	if unsupported(err) {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: server refuses the owner index; listing a user's sessions scans the collection",
			slog.String("collection", s.coll.c.Name()), slog.String("error", err.Error()))
		return nil
	}
	return err
}

// handleLength is the length in bytes of a session handle's MAC.
const handleLength = 16

// handle returns the handle of document docID: a truncated HMAC under a key
// of its own, base64url-encoded.
func (d *dataSealer) handle(docID string) string {
	m := hmac.New(sha256.New, d.handleKey)
	m.Write([]byte(docID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:handleLength])
}
