package mongostore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// startGC starts the goroutine that deletes expired sessions every
// GCInterval until Close.
func (s *Store) startGC(ctx context.Context) {
	ctx, s.stop = context.WithCancel(untraced(context.WithoutCancel(ctx))) // sweeps start traces of their own
	s.background.Go(func() {
		t := time.NewTicker(s.cfg.GCInterval)
		defer t.Stop()
		for {
			s.sweep(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// sweep deletes the expired sessions and logs what it did. A panic (a
// custom codec's) is logged: in the GC goroutine it would end the process.
func (s *Store) sweep(ctx context.Context) {
	if s.cfg.afterSweep != nil {
		defer s.cfg.afterSweep()
	}
	defer func() {
		if v := recover(); v != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "mongostore: gc sweep panicked", slog.String("collection", s.coll.c.Name()),
				slog.String("panic", fmt.Sprintf("%T", v))) // its type: its text may hold a value
		}
	}()
	start := time.Now()
	n, err := s.DeleteExpired(ctx)
	attrs := []slog.Attr{slog.String("collection", s.coll.c.Name()), slog.Int64("deleted", n), slog.Duration("duration", time.Since(start))}
	switch {
	case err != nil && ctx.Err() != nil:
		// stopping: not a failure
	case err != nil:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "mongostore: gc sweep failed", append(attrs, slog.String("error", err.Error()))...)
	case n > 0:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: gc sweep", attrs...)
	default:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "mongostore: gc sweep", attrs...)
	}
}

// sweepContext bounds one command of a sweep by Config.Timeout or
// Config.GCInterval, whichever is longer.
func (s *Store) sweepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(s.cfg.Timeout, s.cfg.GCInterval))
}

// DeleteExpired deletes every expired session and returns how many (a nil
// ctx gives ErrInvalidConfig): for
// ExpiryNone, from a cron job say. Without Config.OnEvent it is one
// command (the server checks the expiry, so a session saved meanwhile
// stays), or on FerretDB v1, whose deletes are not atomic, a find and a
// delete of each 500 under their chain locks; with it, the expired
// sessions are read and deleted one by one, each an EventExpired.
// It is bounded by Timeout or GCInterval, whichever is longer, and carries
// the comment "mongostore gc sweep". Errors wrap ErrDatabase.
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) {
	if ctx == nil {
		return 0, errNil("context")
	}
	ctx, cancel := s.sweepContext(ctx)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opGCSweep)
	defer sp.endPanicked()
	atomic, err := s.coll.atomicWrites(ctx)
	var n int64
	now := s.cfg.Now()
	switch {
	case err != nil:
	case s.cfg.OnEvent != nil:
		n, err = s.sweepBatches(ctx, now, true, func(docs []bson.Raw) (int64, error) { return s.expireEach(ctx, docs, now) })
	case atomic:
		n, err = s.coll.deleteExpired(ctx, now)
	default:
		n, err = s.sweepBatches(ctx, now, false, func(docs []bson.Raw) (int64, error) { return s.coll.deleteExpiredIn(ctx, docs, now) })
	}
	sp.count = n
	sp.end(err)
	return n, err
}

// How many expired sessions a sweep reads at a time: their _ids, or whole
// documents (for EventExpired), each up to Config.MaxSize.
const (
	sweepBatch      = 500
	sweepBatchWhole = 50
)

// sweepBatches reads the documents expired at now, in batches, whole or
// their _id only, and hands each batch to del, which deletes and counts; it
// stops after a short batch, or one of which del deleted none (rather than
// spin).
func (s *Store) sweepBatches(ctx context.Context, now time.Time, whole bool, del func([]bson.Raw) (int64, error)) (int64, error) {
	var n int64
	batch := sweepBatch
	if whole {
		batch = sweepBatchWhole
	}
	for {
		docs, err := s.coll.findExpired(ctx, now, batch, whole)
		if err != nil || len(docs) == 0 {
			return n, err
		}
		deleted, err := del(docs)
		if n += deleted; err != nil || len(docs) < batch || deleted == 0 {
			return n, err
		}
	}
}

// expireEach deletes docs, read expired at now, one at a time, and reports
// each it deleted that verifies as a session.
func (s *Store) expireEach(ctx context.Context, docs []bson.Raw, now time.Time) (int64, error) {
	var n int64
	for _, raw := range docs {
		rev, _ := raw.Lookup(fieldRev).AsInt64OK()
		deleted, err := s.coll.deleteExpiredOne(ctx, raw.Lookup(fieldID), rev, now)
		if err != nil {
			return n, err
		}
		if !deleted {
			continue
		}
		n++
		if d, _, values, err := s.open(raw); err == nil { // only sessions are reported
			s.emit(ctx, EventExpired, "", storedState(&d, values))
		}
	}
	return n, nil
}
