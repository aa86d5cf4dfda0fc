package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// This file is the home of expiry: the modes, when a session expires, and
// the set-up of the index that lets the server delete expired documents.
// The GC goroutine, for servers without TTL indexes, is in gc.go.

// ExpiryMode says how expired session documents are removed from the
// collection. Whatever the mode, the store never loads an expired session:
// it checks expiresAt on every document it reads.
type ExpiryMode int

const (
	// ExpiryAuto (the default) uses a TTL index where the server supports it
	// and the GC goroutine where it does not (FerretDB v1, some hosted
	// services), and logs which it chose. It works unchanged on MongoDB,
	// FerretDB v2 and FerretDB v1.
	ExpiryAuto ExpiryMode = iota

	// ExpiryTTL makes sure a TTL index {expiresAt: 1} with
	// expireAfterSeconds: 0 exists, so that MongoDB deletes each document at
	// its own expiresAt (within about a minute: the TTL monitor's period).
	// NewStore fails with ErrTTLUnsupported if the server refuses TTL
	// indexes, rather than falling back to the GC goroutine.
	ExpiryTTL

	// ExpiryGC runs a goroutine that deletes expired sessions every
	// Config.GCInterval. It makes sure a plain (non-TTL) index on expiresAt
	// exists so that sweeps need not scan the collection on servers that
	// plan queries.
	ExpiryGC

	// ExpiryNone creates no index and starts no goroutine: the application
	// deletes expired sessions itself, for example with Store.DeleteExpired
	// from a cron job, or with Store.RunGC on a single instance.
	ExpiryNone
)

// String returns the mode's name, for logs.
func (m ExpiryMode) String() string {
	switch m {
	case ExpiryAuto:
		return "auto"
	case ExpiryTTL:
		return "ttl"
	case ExpiryGC:
		return "gc"
	case ExpiryNone:
		return "none"
	default:
		return fmt.Sprintf("ExpiryMode(%d)", int(m))
	}
}

// ExpiryMode returns the expiry mode in effect: the configured one, or for
// ExpiryAuto, ExpiryTTL or ExpiryGC according to what the server supports.
func (s *Store) ExpiryMode() ExpiryMode { return s.expiry }

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

// ttlExpireAfterSeconds is the TTL index's expireAfterSeconds: each
// document expires at its own expiresAt.
const ttlExpireAfterSeconds = 0

// expiresAtIndexName is the name of the index the store creates on
// expiresAt: the server's default name for {expiresAt: 1}.
const expiresAtIndexName = "expiresAt_1"

// expiresAtIndex describes an existing single-field index on expiresAt.
type expiresAtIndex struct {
	name string
	// ttl is the index's expireAfterSeconds, or nil for a plain index.
	ttl *int64
	// plain is true for an index exactly as the store creates it in GC
	// mode: named expiresAt_1, ascending, with no option at all.
	plain bool
}

// setupIndexes lists the collection's indexes once, makes sure the ones
// the configured expiry mode needs exist (setupExpiry), and the owner index
// (ensureOwnerIndex), and returns the expiry mode in effect. ExpiryNone
// sends no command at all.
func (s *Store) setupIndexes(ctx context.Context) (ExpiryMode, error) {
	if s.cfg.Expiry == ExpiryNone {
		return ExpiryNone, nil
	}
	specs, err := s.coll.indexSpecs(ctx)
	if err != nil {
		return s.cfg.Expiry, err
	}
	mode, err := s.setupExpiry(ctx, specs)
	if err != nil {
		return mode, err
	}
	return mode, s.ensureOwnerIndex(ctx, specs)
}

// setupExpiry prepares the collection, whose indexes are specs, for the
// configured expiry mode (not ExpiryNone) and returns the mode in effect.
func (s *Store) setupExpiry(ctx context.Context, specs []bson.Raw) (ExpiryMode, error) {
	switch s.cfg.Expiry {
	case ExpiryGC:
		return ExpiryGC, s.ensurePlainIndex(ctx, specs)
	case ExpiryTTL:
		return ExpiryTTL, s.explainTTLRefusal(s.ensureTTLIndex(ctx, specs))
	default: // ExpiryAuto
		err := s.ensureTTLIndex(ctx, specs)
		if errors.Is(err, ErrTTLUnsupported) {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: server refuses TTL indexes; expired sessions are deleted by the GC goroutine",
				slog.String("collection", s.coll.c.Name()), slog.Duration("interval", s.cfg.GCInterval))
			return ExpiryGC, s.ensurePlainIndex(ctx, specs) // the refused TTL index created nothing
		}
		if err == nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: expired sessions are deleted by the server's TTL index",
				slog.String("collection", s.coll.c.Name()), slog.String("index", expiresAtIndexName))
		}
		return ExpiryTTL, err
	}
}

// explainTTLRefusal adds to an ErrTTLUnsupported error, in ExpiryTTL mode,
// what the application can do about it. Other errors pass unchanged.
func (s *Store) explainTTLRefusal(err error) error {
	if !errors.Is(err, ErrTTLUnsupported) {
		return err
	}
	return fmt.Errorf("%w; Config.Expiry is ExpiryTTL, which insists on a TTL index: "+
		"leave Expiry unset (ExpiryAuto) to fall back to the GC goroutine on such servers, or set ExpiryGC", err)
}

// ensureTTLIndex makes sure a TTL index {expiresAt: 1} with
// expireAfterSeconds 0 exists: it creates it, or brings an existing index on
// expiresAt in line with collMod, or replaces the store's own plain index
// where collMod cannot. specs are the collection's indexes.
func (s *Store) ensureTTLIndex(ctx context.Context, specs []bson.Raw) error {
	idx := findExpiresAtIndex(specs)
	if idx == nil {
		return s.createTTLIndex(ctx)
	}
	if idx.ttl != nil && *idx.ttl == ttlExpireAfterSeconds {
		return nil
	}
	err := s.coll.setTTL(ctx, idx.name)
	if err != nil && idx.plain && !unsupported(err) {
		// MongoDB before 5.1, and DocumentDB, cannot turn a plain index into a
		// TTL index. This one is the store's own, from an earlier start in GC
		// mode: replace it.
		return s.replacePlainIndex(ctx, idx, err)
	}
	if err != nil {
		return s.collModError(idx, err)
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: changed index to expire each session at its expiresAt",
		slog.String("collection", s.coll.c.Name()), slog.String("index", idx.name))
	return nil
}

// createTTLIndex creates the TTL index {expiresAt: 1} with
// expireAfterSeconds 0.
func (s *Store) createTTLIndex(ctx context.Context) error {
	err := s.coll.createExpiresAtIndex(ctx, true)
	if unsupported(err) {
		return fmt.Errorf("%w: createIndexes with expireAfterSeconds: %w", ErrTTLUnsupported, err)
	}
	return err
}

// replacePlainIndex drops the store's own plain index on expiresAt, which
// collMod failed (with collModErr) to turn into a TTL index, and creates
// the TTL index in its place. Several instances starting at once may race
// here: an index already dropped, or already created, is fine.
func (s *Store) replacePlainIndex(ctx context.Context, idx *expiresAtIndex, collModErr error) error {
	if err := s.coll.dropIndex(ctx, idx.name); err != nil {
		return fmt.Errorf("%w; dropping it to create the TTL index failed too: %w", s.collModError(idx, collModErr), err)
	}
	if err := s.createTTLIndex(ctx); err != nil {
		return err
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: replaced the plain index on expiresAt (from GC mode) with a TTL index",
		slog.String("collection", s.coll.c.Name()), slog.String("index", idx.name))
	return nil
}

// collModError explains why collMod could not make idx a TTL index with
// expireAfterSeconds 0.
func (s *Store) collModError(idx *expiresAtIndex, err error) error {
	if unsupported(err) {
		return fmt.Errorf("%w: collMod of index %q: %w", ErrTTLUnsupported, idx.name, err)
	}
	was := "no expireAfterSeconds"
	if idx.ttl != nil {
		was = fmt.Sprintf("expireAfterSeconds %d", *idx.ttl)
	}
	return fmt.Errorf("%w: index %q on %s has %s and collMod could not set expireAfterSeconds 0 (%w); "+
		"it is not the store's own, so it was left alone: drop it with db.getCollection(%q).dropIndex(%q) "+
		"(or make it a TTL index with expireAfterSeconds 0) and start the app again to let the store create its TTL index",
		ErrIndexConflict, idx.name, fieldExpiresAt, was, err, s.coll.c.Name(), idx.name)
}

// ensurePlainIndex makes sure some index on expiresAt exists, so that GC
// sweeps do not scan the collection on servers that plan queries. Any
// existing one will do. specs are the collection's indexes.
func (s *Store) ensurePlainIndex(ctx context.Context, specs []bson.Raw) error {
	if findExpiresAtIndex(specs) != nil {
		return nil
	}
	return s.coll.createExpiresAtIndex(ctx, false)
}

// findExpiresAtIndex returns the single-field index on expiresAt among
// specs, preferring one with expireAfterSeconds 0, or nil if there is none.
func findExpiresAtIndex(specs []bson.Raw) *expiresAtIndex {
	var found *expiresAtIndex
	for _, spec := range specs {
		idx, ok := parseExpiresAtIndex(spec)
		if !ok {
			continue
		}
		if found == nil || (idx.ttl != nil && *idx.ttl == ttlExpireAfterSeconds) {
			found = idx
		}
	}
	return found
}

// parseExpiresAtIndex returns the index described by spec if it is a
// single-field index on expiresAt.
func parseExpiresAtIndex(spec bson.Raw) (*expiresAtIndex, bool) {
	key, ok := spec.Lookup("key").DocumentOK()
	if !ok {
		return nil, false
	}
	elems, err := key.Elements()
	if err != nil || len(elems) != 1 || elems[0].Key() != fieldExpiresAt {
		return nil, false
	}
	name, ok := spec.Lookup("name").StringValueOK()
	if !ok {
		return nil, false
	}
	idx := &expiresAtIndex{name: name}
	idx.plain = name == expiresAtIndexName && onlyFields(spec, "v", "key", "name", "ns") &&
		isOne(elems[0].Value())
	if v, err := spec.LookupErr("expireAfterSeconds"); err == nil {
		if n, ok := v.AsInt64OK(); ok {
			idx.ttl = &n
		} else if f, ok := v.DoubleOK(); ok {
			n := int64(f)
			idx.ttl = &n
		}
	}
	return idx, true
}

// onlyFields reports whether doc has no fields but the allowed ones.
func onlyFields(doc bson.Raw, allowed ...string) bool {
	elems, err := doc.Elements()
	if err != nil {
		return false
	}
	for _, e := range elems {
		if !slices.Contains(allowed, e.Key()) {
			return false
		}
	}
	return true
}

// isOne reports whether an index key direction is ascending (1, as any
// numeric type).
func isOne(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeInt32:
		return v.Int32() == 1
	case bson.TypeInt64:
		return v.Int64() == 1
	case bson.TypeDouble:
		return v.Double() == 1
	}
	return false
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
		now := w.at
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
