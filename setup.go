package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// NewStore returns a store that keeps sessions in coll. keyPairs are as for
// sessions.NewCookieStore: a hash key of at least 32 bytes (it signs the
// cookie, authenticates the document) and an optional block key of 16, 24
// or 32 (it encrypts both); more pairs rotate keys. NewStore prepares coll
// for cfg.Expiry (TTL index, or a GC goroutine until Close) and the owner
// index. Errors wrap ErrInvalidConfig (saying what to do) or ErrDatabase.
func NewStore(ctx context.Context, coll *mongo.Collection, cfg Config, keyPairs ...[]byte) (*Store, error) {
	if coll == nil {
		return nil, fmt.Errorf("%w: nil collection", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pairs, err := parseKeyPairs(keyPairs)
	if err != nil {
		return nil, err
	}
	s := &Store{Options: defaultOptions(), coll: newCollection(coll, cfg.Timeout), cookies: newCookieCodec(pairs), sealer: newSealer(pairs),
		cfg: cfg, states: newSessionTable(), expiry: cfg.Expiry, tel: newTelemetry(cfg.TracerProvider, cfg.MeterProvider),
		stop: func() {}}
	setupCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := s.setupIndexes(setupCtx); err != nil {
		return nil, err
	}
	if s.expiry == ExpiryGC {
		s.startGC(ctx)
	}
	return s, nil
}

// setupIndexes makes sure the indexes the expiry mode needs exist, and the
// owner index. ExpiryNone sends nothing.
func (s *Store) setupIndexes(ctx context.Context) error {
	if s.expiry == ExpiryNone {
		return nil
	}
	if err := s.coll.detect(ctx); err != nil {
		return err
	}
	specs, err := s.coll.indexSpecs(ctx)
	if err != nil {
		return err
	}
	if err := s.setupExpiry(ctx, specs); err != nil {
		return err
	}
	return s.ensureOwnerIndex(ctx, specs)
}

// errNoTTL says the server refuses TTL indexes.
var errNoTTL = errors.New("the server refuses TTL indexes")

// setupExpiry prepares the collection, whose indexes are specs, for the
// expiry mode, and resolves ExpiryAuto.
func (s *Store) setupExpiry(ctx context.Context, specs []bson.Raw) error {
	coll := slog.String("collection", s.coll.c.Name())
	switch s.expiry {
	case ExpiryGC:
		return s.ensurePlainIndex(ctx, specs)
	case ExpiryTTL:
		err := s.ensureTTLIndex(ctx, specs)
		if errors.Is(err, errNoTTL) {
			return fmt.Errorf("%w: %w; Config.Expiry is ExpiryTTL, which insists on a TTL index: "+
				"leave it unset (ExpiryAuto) to fall back to the GC goroutine, or set ExpiryGC", ErrInvalidConfig, err)
		}
		return err
	}
	err := s.ensureTTLIndex(ctx, specs)
	if errors.Is(err, errNoTTL) {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: the GC goroutine deletes expired sessions (this server has no TTL indexes)",
			coll, slog.Duration("interval", s.cfg.GCInterval))
		s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "mongostore: the server's answer to a TTL index", coll, slog.String("error", err.Error()))
		s.expiry = ExpiryGC
		return s.ensurePlainIndex(ctx, specs)
	}
	if err == nil {
		s.expiry = ExpiryTTL
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: the server's TTL index deletes expired sessions",
			coll, slog.String("index", expiresAtIndexName))
	}
	return err
}

// ensureTTLIndex makes sure the TTL index exists: it creates it, or fixes
// an existing index on expiresAt with collMod, or replaces the store's own
// plain index where collMod cannot (MongoDB before 5.1, DocumentDB).
func (s *Store) ensureTTLIndex(ctx context.Context, specs []bson.Raw) error {
	idx := findExpiresAtIndex(specs)
	if idx == nil {
		return s.createTTLIndex(ctx)
	}
	if idx.ttl != nil && *idx.ttl == ttlExpireAfterSeconds {
		return nil
	}
	err := s.coll.setTTL(ctx, idx.name)
	switch {
	case err == nil:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: changed the index on expiresAt to expire each session at its expiresAt",
			slog.String("collection", s.coll.c.Name()), slog.String("index", idx.name))
		return nil
	case unsupported(err): // not ttlRefused: a refusal to change an index (MongoDB < 5.1) is handled below
		return fmt.Errorf("%w: collMod of index %q: %w", errNoTTL, idx.name, err)
	case !idx.plain:
		was := "no expireAfterSeconds"
		if idx.ttl != nil {
			was = fmt.Sprintf("expireAfterSeconds %d", *idx.ttl)
		}
		return fmt.Errorf("%w: index %q on %s has %s, and collMod could not set expireAfterSeconds 0 (%w); "+
			"it is not the store's own, so it was left alone: drop it with db.getCollection(%q).dropIndex(%q) "+
			"(or make it a TTL index with expireAfterSeconds 0) and start the application again",
			ErrInvalidConfig, idx.name, fieldExpiresAt, was, err, s.coll.c.Name(), idx.name)
	}
	// The store's own plain index, from a start in GC mode: replace it.
	if err := s.coll.dropIndex(ctx, idx.name); err != nil {
		return err
	}
	if err := s.createTTLIndex(ctx); err != nil {
		if errors.Is(err, errNoTTL) { // the GC goroutine takes over: give it its index back
			if perr := s.coll.createExpiresAtIndex(ctx, false); perr != nil {
				return perr
			}
		}
		return err
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: replaced the plain index on expiresAt (from GC mode) with a TTL index",
		slog.String("collection", s.coll.c.Name()), slog.String("index", idx.name))
	return nil
}

// createTTLIndex creates the TTL index {expiresAt: 1}.
func (s *Store) createTTLIndex(ctx context.Context) error {
	err := s.coll.createExpiresAtIndex(ctx, true)
	if ttlRefused(err) {
		return fmt.Errorf("%w: createIndexes with expireAfterSeconds: %w", errNoTTL, err)
	}
	return err
}

// ensurePlainIndex makes sure some index on expiresAt serves GC sweeps.
func (s *Store) ensurePlainIndex(ctx context.Context, specs []bson.Raw) error {
	if findExpiresAtIndex(specs) != nil {
		return nil
	}
	return s.coll.createExpiresAtIndex(ctx, false)
}

// ensureOwnerIndex makes sure the partial owner and lineage indexes
// exist (without them, listing and ending a moved session scan), and drops
// the sparse owner index of earlier versions, which every save paid for.
func (s *Store) ensureOwnerIndex(ctx context.Context, specs []bson.Raw) error {
	names := map[string]bool{}
	for _, spec := range specs {
		name, _ := spec.Lookup("name").StringValueOK()
		names[name] = true
	}
	for _, idx := range [...]struct{ name, field string }{{ownerIndexName, fieldOwner}, {lineageIndexName, fieldLineage}} {
		if names[idx.name] {
			continue
		}
		err := s.coll.createPartialIndex(ctx, idx.name, idx.field)
		if unsupported(err) {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: the server refuses partial indexes; listing a user's sessions scans the collection",
				slog.String("collection", s.coll.c.Name()), slog.String("error", err.Error()))
			return nil
		}
		if err != nil {
			return err
		}
	}
	if names[sparseOwnerIndexName] {
		return s.coll.dropIndex(ctx, sparseOwnerIndexName)
	}
	return nil
}

// ttlRefused reports whether err, a server's answer to a TTL index on
// expiresAt, means it does not support one: a code saying so, or a message
// about TTL or expireAfterSeconds (Azure Cosmos DB for MongoDB, RU,
// accepts a TTL index on _ts only). A network failure or timeout is not an
// answer.
func ttlRefused(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	msg := strings.ToLower(se.Error())
	return unsupported(err) || strings.Contains(msg, "expireafterseconds") || strings.Contains(msg, "ttl") ||
		strings.Contains(msg, "not supported")
}

// expiresAtIndex is a single-field index on expiresAt.
type expiresAtIndex struct {
	name  string
	ttl   *int64 // expireAfterSeconds; nil for a plain index
	plain bool   // exactly as the store creates it in GC mode
}

// findExpiresAtIndex returns the single-field index on expiresAt among
// specs, a TTL one first, or nil.
func findExpiresAtIndex(specs []bson.Raw) *expiresAtIndex {
	var found *expiresAtIndex
	for _, spec := range specs {
		key, _ := spec.Lookup("key").DocumentOK()
		elems, err := key.Elements()
		name, ok := spec.Lookup("name").StringValueOK()
		if err != nil || !ok || len(elems) != 1 || elems[0].Key() != fieldExpiresAt {
			continue
		}
		dir, _ := elems[0].Value().AsFloat64OK()
		idx := &expiresAtIndex{name: name, plain: name == expiresAtIndexName && dir == 1 && onlyFields(spec, "v", "key", "name", "ns")}
		if v, err := spec.LookupErr("expireAfterSeconds"); err == nil {
			if n, ok := v.AsFloat64OK(); ok {
				ttl := int64(n)
				idx.ttl = &ttl
			}
		}
		if found == nil || (idx.ttl != nil && *idx.ttl == ttlExpireAfterSeconds) {
			found = idx
		}
	}
	return found
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
