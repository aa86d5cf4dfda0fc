package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Server error codes the expiry set-up recognises.
const (
	codeNamespaceNotFound    = 26
	codeIndexNotFound        = 27
	codeCommandNotFound      = 59
	codeCommandNotSupported  = 115
	codeNotImplemented       = 238
	ttlExpireAfterSeconds    = 0 // each document expires at its own expiresAt
	expiresAtIndexKeyPattern = 1
)

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

// setupExpiry prepares the collection for the configured expiry mode and
// returns the mode in effect.
func (s *Store) setupExpiry(ctx context.Context) (ExpiryMode, error) {
	switch s.cfg.Expiry {
	case ExpiryNone:
		return ExpiryNone, nil
	case ExpiryGC:
		return ExpiryGC, s.ensurePlainIndex(ctx)
	case ExpiryTTL:
		return ExpiryTTL, s.explainTTLRefusal(s.ensureTTLIndex(ctx))
	default: // ExpiryAuto
		err := s.ensureTTLIndex(ctx)
		if errors.Is(err, ErrTTLUnsupported) {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: server refuses TTL indexes; expired sessions are deleted by the GC goroutine",
				slog.String("collection", s.coll.Name()), slog.Duration("interval", s.cfg.GCInterval))
			return ExpiryGC, s.ensurePlainIndex(ctx)
		}
		if err == nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: expired sessions are deleted by the server's TTL index",
				slog.String("collection", s.coll.Name()), slog.String("index", expiresAtIndexName))
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
// expiresAt in line with collMod.
func (s *Store) ensureTTLIndex(ctx context.Context) error {
	idx, err := s.findExpiresAtIndex(ctx)
	if err != nil {
		return err
	}
	if idx == nil {
		return s.createTTLIndex(ctx)
	}
	if idx.ttl != nil && *idx.ttl == ttlExpireAfterSeconds {
		return nil
	}

	err = s.coll.Database().RunCommand(ctx, bson.D{
		{Key: "collMod", Value: s.coll.Name()},
		{Key: "index", Value: bson.D{
			{Key: "name", Value: idx.name},
			{Key: "expireAfterSeconds", Value: int64(ttlExpireAfterSeconds)},
		}},
	}).Err()
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
		slog.String("collection", s.coll.Name()), slog.String("index", idx.name))
	return nil
}

// createTTLIndex creates the TTL index {expiresAt: 1} with
// expireAfterSeconds 0.
func (s *Store) createTTLIndex(ctx context.Context) error {
	_, err := s.coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: fieldExpiresAt, Value: expiresAtIndexKeyPattern}},
		Options: options.Index().SetExpireAfterSeconds(ttlExpireAfterSeconds),
	})
	switch {
	case err == nil:
		return nil
	case unsupported(err):
		return fmt.Errorf("%w: createIndexes with expireAfterSeconds: %w", ErrTTLUnsupported, err)
	default:
		return fmt.Errorf("%w: create TTL index: %w", ErrDatabase, err)
	}
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
		ErrIndexConflict, idx.name, fieldExpiresAt, was, err, s.coll.Name(), idx.name)
}

// replacePlainIndex drops the store's own plain index on expiresAt, which
// collMod failed (with collModErr) to turn into a TTL index, and creates
// the TTL index in its place. Several instances starting at once may race
// here: an index already dropped, or already created, is fine.
func (s *Store) replacePlainIndex(ctx context.Context, idx *expiresAtIndex, collModErr error) error {
	err := s.coll.Indexes().DropOne(ctx, idx.name)
	if err != nil && !hasCode(err, codeIndexNotFound) {
		return fmt.Errorf("%w; dropping it to create the TTL index failed too: %w", s.collModError(idx, collModErr), err)
	}
	if err := s.createTTLIndex(ctx); err != nil {
		return err
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: replaced the plain index on expiresAt (from GC mode) with a TTL index",
		slog.String("collection", s.coll.Name()), slog.String("index", idx.name))
	return nil
}

// ensurePlainIndex makes sure some index on expiresAt exists, so that GC
// sweeps do not scan the collection. Any existing one will do.
func (s *Store) ensurePlainIndex(ctx context.Context) error {
	idx, err := s.findExpiresAtIndex(ctx)
	if err != nil || idx != nil {
		return err
	}
	_, err = s.coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: fieldExpiresAt, Value: expiresAtIndexKeyPattern}},
	})
	if err != nil {
		return fmt.Errorf("%w: create index on %s: %w", ErrDatabase, fieldExpiresAt, err)
	}
	return nil
}

// findExpiresAtIndex returns the collection's single-field index on
// expiresAt, preferring one with expireAfterSeconds 0, or nil if there is
// none.
func (s *Store) findExpiresAtIndex(ctx context.Context) (*expiresAtIndex, error) {
	cur, err := s.coll.Indexes().List(ctx)
	if err != nil {
		if hasCode(err, codeNamespaceNotFound) {
			return nil, nil // no collection yet: no index
		}
		return nil, fmt.Errorf("%w: list indexes: %w", ErrDatabase, err)
	}
	defer cur.Close(ctx)

	var found *expiresAtIndex
	for cur.Next(ctx) {
		idx, ok := parseExpiresAtIndex(cur.Current)
		if !ok {
			continue
		}
		if found == nil || (idx.ttl != nil && *idx.ttl == ttlExpireAfterSeconds) {
			found = idx
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("%w: list indexes: %w", ErrDatabase, err)
	}
	return found, nil
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

// unsupported reports whether err says the server does not implement what
// was asked (FerretDB v1 answers NotImplemented to TTL indexes).
func unsupported(err error) bool {
	return hasCode(err, codeNotImplemented) || hasCode(err, codeCommandNotSupported) || hasCode(err, codeCommandNotFound)
}

func hasCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}
