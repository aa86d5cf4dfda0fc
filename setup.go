package mongostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// NewStore returns a store that keeps sessions in coll. keyPairs are as for
// sessions.NewCookieStore: a hash key of at least 32 bytes (it signs the
// cookie, authenticates the document) and an optional block key of 16, 24
// or 32 (it encrypts both); more pairs rotate keys. NewStore prepares coll
// for cfg.Expiry (TTL index, or a GC goroutine until Close) and the owner
// index, within ctx's deadline, or Config.Timeout if ctx has none (one
// Timeout more to put back an index it dropped, if the set-up then fails).
// Errors wrap ErrInvalidConfig (saying what to do; it refuses a collection
// whose write concern is w=0, but with ExpiryNone, which sends no command)
// or ErrDatabase.
func NewStore(ctx context.Context, coll *mongo.Collection, cfg Config, keyPairs ...[]byte) (*Store, error) {
	if ctx == nil {
		return nil, errNil("context")
	}
	if coll == nil {
		return nil, errNil("collection")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pairs, err := parseKeyPairs(keyPairs)
	if err != nil {
		return nil, err
	}
	s := &Store{Options: defaultOptions(), coll: newCollection(coll), cookies: newCookieCodec(pairs), sealer: newSealer(pairs),
		cfg: cfg, states: newSessionTable(), opened: newMemo[openedDocument](documentMemoLimit), expiry: cfg.Expiry,
		tel: newTelemetry(cfg.TracerProvider, cfg.MeterProvider), stop: func() {}}
	setupCtx, cancel := setupContext(ctx, cfg.Timeout)
	defer cancel()
	if err := s.setupIndexes(setupCtx); err != nil {
		return nil, err
	}
	if s.expiry == ExpiryGC {
		s.startGC(ctx)
	}
	return s, nil
}

// setupContext bounds NewStore's set-up by ctx's deadline if it has one
// (building an index on a large collection can take longer than a
// request's commands may), else by timeout.
func setupContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// setupPasses bounds setupIndexes' passes, and setupPause the pause
// after the first: instances starting together race on the same indexes.
const (
	setupPasses = 4
	setupPause  = 50 * time.Millisecond
)

// setupIndexes makes sure the indexes the expiry mode needs exist, and the
// owner index. ExpiryNone sends nothing. A race with another instance
// setting up meanwhile (setup.Raced) has it read the indexes again and go
// on, setupPasses times at most, pausing a little longer each time.
func (s *Store) setupIndexes(ctx context.Context) error {
	if s.expiry == ExpiryNone {
		return nil
	}
	if _, err := s.coll.atomicWrites(ctx); err != nil {
		return err
	}
	if ack, err := s.coll.writesAcknowledged(ctx); err != nil || !ack {
		return cmp.Or(err, errUnacknowledged)
	}
	for pass := 1; ; pass++ {
		err := s.setupPass(ctx)
		if err == nil || pass == setupPasses || !setup.Raced(err) {
			return err
		}
		pause := time.NewTimer(time.Duration(pass)*setupPause + rand.N(setupPause)) // apart from the other instances
		select {
		case <-ctx.Done():
			pause.Stop()
			return err
		case <-pause.C:
		}
	}
}

// setupPass is one pass of setupIndexes, from a reading of the indexes
// and the configured expiry mode.
func (s *Store) setupPass(ctx context.Context) error {
	s.expiry = s.cfg.Expiry
	specs, err := s.coll.indexSpecs(ctx)
	if err != nil {
		return err
	}
	indexes := setup.ParseIndexes(specs)
	if err := s.setupExpiry(ctx, indexes); err != nil {
		return err
	}
	return s.ensureOwnerIndex(ctx, indexes)
}

// errNoTTL says the server refuses TTL indexes.
var errNoTTL = errors.New("the server refuses TTL indexes")

// setupExpiry prepares the collection, whose indexes are indexes, for the
// expiry mode, and resolves ExpiryAuto.
func (s *Store) setupExpiry(ctx context.Context, indexes []setup.Index) error {
	coll := slog.String("collection", s.coll.c.Name())
	switch s.expiry {
	case ExpiryGC:
		if idx := setup.FindExpiresAt(indexes); idx != nil && idx.TTL != nil { // the store never drops another index
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: Config.Expiry is ExpiryGC, but a TTL index deletes expired sessions too: "+
				"those it deletes first are never reported (EventExpired); drop it to have the GC goroutine delete them all", coll, slog.String("index", idx.Name))
		}
		return s.ensurePlainIndex(ctx, indexes)
	case ExpiryTTL:
		err := s.ensureTTLIndex(ctx, indexes)
		if errors.Is(err, errNoTTL) {
			return fmt.Errorf("%w: %w; Config.Expiry is ExpiryTTL, which insists on a TTL index: "+
				"leave it unset (ExpiryAuto) to fall back to the GC goroutine, or set ExpiryGC", ErrInvalidConfig, err)
		}
		return err
	}
	err := s.ensureTTLIndex(ctx, indexes)
	if errors.Is(err, errNoTTL) {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: the GC goroutine deletes expired sessions (this server has no TTL indexes)",
			coll, slog.Duration("interval", s.cfg.GCInterval))
		s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "mongostore: the server's answer to a TTL index", coll, slog.String("error", err.Error()))
		s.expiry = ExpiryGC
		return s.ensurePlainIndex(ctx, indexes)
	}
	if err == nil {
		s.expiry = ExpiryTTL
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: the server's TTL index deletes expired sessions",
			coll, slog.String("index", expiresAtIndexName))
	}
	return err
}

// ensureTTLIndex makes sure the TTL index exists, as setup.Decide says: it
// creates it, or fixes an existing index on expiresAt with collMod, or
// replaces the store's own plain index where collMod cannot (MongoDB before
// 5.1, DocumentDB). It returns errNoTTL, wrapping the server's refusal,
// where the server refuses TTL indexes.
func (s *Store) ensureTTLIndex(ctx context.Context, indexes []setup.Index) error {
	idx := setup.FindExpiresAt(indexes)
	var a setup.Answers
	var answer error // the server's last answer that was no success
	for {
		d := setup.Decide(idx, a)
		if d.Next == setup.None {
			return s.restorePlain(ctx, a, s.ttlOutcome(ctx, idx, a, d.Outcome, answer))
		}
		if err := s.send(ctx, idx, d.Next, &a, &answer); err != nil {
			return s.restorePlain(ctx, a, err)
		}
	}
}

// restorePlain creates the plain index on expiresAt again if ensureTTLIndex,
// given answers a, dropped it and then failed with err: GC sweeps of
// instances still running need it. It has a Timeout of its own, as ctx may
// be why err came.
func (s *Store) restorePlain(ctx context.Context, a setup.Answers, err error) error {
	if err == nil || !a.Dropped || a.Restored {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer cancel()
	if rerr := s.coll.createExpiresAtIndex(ctx, false); rerr != nil {
		return errors.Join(err, fmt.Errorf("put the plain index on %s back: %w", fieldExpiresAt, rerr))
	}
	return err
}

// send sends step about idx, and records the server's answer in a and,
// unless it is a success, in answer.
func (s *Store) send(ctx context.Context, idx *setup.Index, step setup.Step, a *setup.Answers, answer *error) error {
	switch step {
	case setup.CollMod:
		op := fmt.Sprintf("collMod of index %q", idx.Name)
		return record(s.coll.setTTL(ctx, idx.Name), setup.Unsupported, &a.CollMod, answer, op)
	case setup.CreateTTL:
		return record(s.coll.createExpiresAtIndex(ctx, true), setup.TTLRefused, &a.CreateTTL, answer, "createIndexes with expireAfterSeconds")
	case setup.DropPlain:
		a.Dropped = true
		return s.coll.dropIndex(ctx, idx.Name)
	}
	a.Restored = true // setup.CreatePlain: the GC goroutine takes over; give it its index back
	return s.coll.createExpiresAtIndex(ctx, false)
}

// record records in a the answer to the index command op, whose outcome is
// err, and in answer the error that reports it unless it is a success. It
// returns err if err is no answer (a network failure, a timeout).
func record(err error, refused func(error) bool, a *setup.Answer, answer *error, op string) error {
	var ok bool
	if *a, ok = setup.Read(err, refused); !ok {
		return err
	}
	if err != nil {
		*answer = fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// ttlOutcome logs what ensureTTLIndex did to idx given the answers a, and
// returns the error of outcome, with answer, the server's.
func (s *Store) ttlOutcome(ctx context.Context, idx *setup.Index, a setup.Answers, outcome setup.Outcome, answer error) error {
	switch outcome {
	case setup.NoTTL:
		return fmt.Errorf("%w: %w", errNoTTL, answer)
	case setup.Conflict:
		err := fmt.Errorf("%w: %s", ErrInvalidConfig, setup.ConflictReason(s.coll.c.Name(), idx))
		if answer != nil { // none for a partial index: nothing was asked
			err = fmt.Errorf("%w (%w)", err, answer)
		}
		return err
	case setup.Failed:
		return answer
	}
	msg := ""
	switch {
	case a.Dropped:
		msg = "mongostore: replaced the plain index on expiresAt (from GC mode) with a TTL index"
	case a.CollMod == setup.Accepted:
		msg = "mongostore: changed the index on expiresAt to expire each session at its expiresAt"
	default:
		return nil
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, msg, slog.String("collection", s.coll.c.Name()), slog.String("index", idx.Name))
	return nil
}

// ensurePlainIndex makes sure an index on expiresAt serves GC sweeps: an
// ordered one that is not partial. Where another's index (hashed, partial)
// takes the plain one's name, or the server refuses a second index on the
// key, sweeps scan the collection, with a warning.
func (s *Store) ensurePlainIndex(ctx context.Context, indexes []setup.Index) error {
	if idx := setup.FindExpiresAt(indexes); idx != nil && !idx.Partial {
		return nil
	}
	err := fmt.Errorf("an index named %s is there", expiresAtIndexName)
	if !slices.ContainsFunc(indexes, func(i setup.Index) bool { return i.Name == expiresAtIndexName }) {
		err = s.coll.createExpiresAtIndex(ctx, false)
		if err == nil || !setup.IndexConflict(err) || !slices.ContainsFunc(indexes, func(i setup.Index) bool { return i.On(fieldExpiresAt) }) {
			return err // a conflict with an index created since: setupIndexes reads them again
		}
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: GC sweeps scan the collection: its index on "+fieldExpiresAt+" is not one they can use",
		slog.String("collection", s.coll.c.Name()), slog.String("error", err.Error()))
	return nil
}

// ensureOwnerIndex makes sure the partial owner index exists (without it,
// listing a user's sessions scans the collection), unless the application
// has an index on owner that serves as well, and drops the indexes of
// earlier formats: format 1's owner indexes, which every save paid for,
// and format 2's lineage index.
func (s *Store) ensureOwnerIndex(ctx context.Context, indexes []setup.Index) error {
	atomic, err := s.coll.atomicWrites(ctx) // read by setupIndexes already
	if err != nil {
		return err
	}
	for _, i := range indexes { // first: a server may refuse a second index on {owner: 1}
		if i.IsFormat1Owner(!atomic) {
			if err := s.coll.dropIndex(ctx, i.Name); err != nil {
				return err
			}
		}
	}
	if slices.ContainsFunc(indexes, func(i setup.Index) bool { return i.Name == lineageIndexName }) {
		if err := s.coll.dropIndex(ctx, lineageIndexName); err != nil {
			return err
		}
	}
	if setup.ServesOwners(indexes, !atomic) {
		return nil
	}
	err = s.coll.createPartialIndex(ctx, ownerIndexName, fieldOwner)
	if setup.Unsupported(err) {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: the server refuses the owner index; listing a user's sessions scans the collection",
			slog.String("collection", s.coll.c.Name()), slog.String("error", err.Error()))
		return nil
	}
	return err
}
