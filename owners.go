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
	return ownerOf(session.Values)
}

// ownerOf returns the owner and device label session values hold.
func ownerOf(values map[any]any) (owner, device string) {
	owner, _ = values[OwnerKey].(string)
	if owner == "" {
		return "", ""
	}
	device, _ = values[DeviceKey].(string)
	return owner, device
}

// hasOwner reports whether session values tie the session to an owner.
func hasOwner(values map[any]any) bool {
	owner, _ := ownerOf(values)
	return owner != ""
}

// ownerDigest returns the owner digest a document of a session with these
// values holds in its owner field: "" for a session without an owner.
func (s *Store) ownerDigest(values map[any]any) string {
	owner, _ := ownerOf(values)
	if owner == "" {
		return ""
	}
	return s.sealer.ownerDigest(s.sealer.ownerKeys[0], owner)
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
	// argument of ListSessions or EndSession).
	Current bool
	// Device is the label given to SetOwner.
	Device string
	// CreatedAt is when the session began (at login, with Restart or
	// RegenerateID), LastActive when it was last saved, and ExpiresAt when
	// it ends unless it is used again. For the current session they are
	// what Store.Times says: as they stand once the request is done.
	CreatedAt, LastActive, ExpiresAt time.Time
}

// ListSessions returns the live sessions of owner, the most recently active
// first: one find on the owner index (expiry is checked on what comes
// back). current, if not nil, is the session of the request, marked
// Current in the list. Only sessions whose stored values name owner are
// listed (the index holds a keyed digest of the owner, trusted only once
// the values, authenticated by the document's MAC, agree), and never an
// expired one. Errors wrap ErrDatabase.
func (s *Store) ListSessions(ctx context.Context, owner string, current *sessions.Session) ([]OwnedSession, error) {
	if owner == "" {
		return nil, nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	docs, err := s.coll.findOwned(ctx, s.sealer.ownerDigests(owner))
	if err != nil {
		return nil, err
	}
	var out []OwnedSession
	for _, raw := range docs {
		if info, ok := s.ownedSession(ctx, raw, owner, current); ok {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b OwnedSession) int { return b.LastActive.Compare(a.LastActive) })
	return out, nil
}

// ownedSession describes the stored session raw for owner's list. ok is
// false if raw is not a live session of owner's: unreadable (logged),
// expired, or with values naming someone else.
func (s *Store) ownedSession(ctx context.Context, raw bson.Raw, owner string, current *sessions.Session) (info OwnedSession, ok bool) {
	docID, ok := raw.Lookup(fieldID).StringValueOK()
	if !ok {
		return info, false
	}
	doc, _, values, err := s.decodeStored(docID, raw)
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: listing sessions: skipping an unreadable session",
			slog.String("error", err.Error()))
		return info, false
	}
	o, device := ownerOf(values)
	if o != owner || !doc.expiresAt.After(s.cfg.Now()) {
		return info, false
	}
	info = OwnedSession{
		Handle:     s.sealer.handle(docID),
		Device:     device,
		CreatedAt:  doc.createdAt,
		LastActive: doc.updatedAt,
		ExpiresAt:  doc.expiresAt,
	}
	if docID == s.documentOf(current) {
		info.Current = true
		if t, ok := s.Times(current); ok {
			info.CreatedAt, info.LastActive, info.ExpiresAt = t.CreatedAt, t.UpdatedAt, t.ExpiresAt
		}
	}
	return info, true
}

// EndSession ends the session of owner named by handle (from
// ListSessions) and returns what it ended, with ended true. Ended means
// deleted: the device's next request gets a fresh session, and a save
// already under way there fails with ErrSessionGone instead of bringing it
// back. The session of the request itself (current, if not nil) is not
// ended this way, since the request's own save would then fail: ended is
// false and the session returned has Current set; log out instead
// (Options.MaxAge = -1). A handle that names no live session of owner's
// (ended meanwhile, or another owner's) ends nothing: ended is false and
// the session returned is zero. One find on the owner index and one delete
// by _id. Errors wrap ErrDatabase.
func (s *Store) EndSession(ctx context.Context, owner, handle string, current *sessions.Session) (session OwnedSession, ended bool, err error) {
	if owner == "" || handle == "" {
		return OwnedSession{}, false, nil
	}
	ctx, cancel := s.opContext(ctx, false)
	defer cancel()
	docs, err := s.coll.findOwned(ctx, s.sealer.ownerDigests(owner))
	if err != nil {
		return OwnedSession{}, false, err
	}
	for _, raw := range docs {
		docID, ok := raw.Lookup(fieldID).StringValueOK()
		if !ok || !hmac.Equal([]byte(s.sealer.handle(docID)), []byte(handle)) {
			continue
		}
		info, ok := s.ownedSession(ctx, raw, owner, current)
		if !ok || info.Current {
			return info, false, nil
		}
		digest, _ := raw.Lookup(fieldOwner).StringValueOK()
		ended, err := s.coll.deleteOwned(ctx, digest, docID)
		if !ended {
			info = OwnedSession{}
		}
		return info, ended, err
	}
	return OwnedSession{}, false, nil
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
	return s.coll.deleteOthers(ctx, s.sealer.ownerDigests(owner), s.documentOf(current))
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

// ensureOwnerIndex makes sure the sparse index {owner: 1} exists among
// specs, the collection's indexes. A server that cannot create it (or, like
// FerretDB v1, ignores sparse and uses no index but _id's anyway) still
// lists and ends sessions, by a scan.
func (s *Store) ensureOwnerIndex(ctx context.Context, specs []bson.Raw) error {
	for _, spec := range specs {
		if name, _ := spec.Lookup("name").StringValueOK(); name == ownerIndexName {
			return nil
		}
	}
	err := s.coll.createOwnerIndex(ctx)
	if unsupported(err) {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: server refuses the owner index; listing a user's sessions scans the collection",
			slog.String("collection", s.coll.c.Name()), slog.String("error", err.Error()))
		return nil
	}
	return err
}

// digestLength is the length in bytes of a session handle's or an owner
// digest's MAC: 128 bits.
const digestLength = 16

// digest returns the HMAC-SHA256 of s under key, truncated to digestLength
// bytes and base64url-encoded.
func digest(key []byte, s string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:digestLength])
}

// handle returns the handle of document docID: a keyed digest of it.
func (d *dataSealer) handle(docID string) string { return digest(d.handleKey, docID) }

// ownerDigest returns what the owner field of a document of owner's holds
// under the owner key key: a keyed digest, so that the database never holds
// the owner (nor can a dump be searched for one without the app's keys).
func (d *dataSealer) ownerDigest(key []byte, owner string) string { return digest(key, owner) }

// ownerDigests returns owner's digests under every key pair's owner key,
// the current one first: documents saved before a key rotation hold an
// older one until their next save.
func (d *dataSealer) ownerDigests(owner string) []string {
	out := make([]string, len(d.ownerKeys))
	for i, k := range d.ownerKeys {
		out[i] = d.ownerDigest(k, owner)
	}
	return out
}
