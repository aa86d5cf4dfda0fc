package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// GCComment is the comment attached to the commands of a GC sweep (see
// DeleteExpired), so that they can be told apart in the server's logs,
// profiler and currentOp.
const GCComment = "mongostore gc sweep"

// malformedSweepEvery is how many sweeps of RunGC pass between two
// deletions of documents whose expiresAt is not a date (the first sweep
// makes one too): about hourly with the default GCInterval. Such documents
// are not the store's and are rare, and finding them takes a scan of the
// collection, which the sweeps of expired documents (an index range) do
// not.
const malformedSweepEvery = 60

// startGC runs RunGC in a goroutine of its own until Close (ExpiryGC, and
// ExpiryAuto on a server without TTL indexes).
func (s *Store) startGC() {
	s.gcDone = make(chan struct{})
	go func() {
		defer close(s.gcDone)
		_ = s.RunGC(s.life, s.cfg.GCInterval)
	}()
}

// RunGC deletes expired sessions every interval (and once at the start)
// until ctx is cancelled or the store is closed. Its first sweep, and one
// in every 60 after it, also deletes the documents whose expiresAt is not a
// date, which a TTL index never deletes: the store never writes them (nor
// serves them), so they come from something else writing to its
// collection; the sweep logs how many it found, as a warning. It returns ctx's error
// (unwrapped), or ErrClosed after Close. A failing sweep is logged and tried again at the
// next tick. Each sweep is logged with the number of sessions deleted and
// its duration (at Debug level when it deleted nothing).
//
// NewStore starts RunGC itself in the GC expiry modes; call it directly for
// ExpiryNone, for example on a single instance of a fleet.
func (s *Store) RunGC(ctx context.Context, interval time.Duration) error {
	if interval < minGCInterval {
		return fmt.Errorf("%w: GC interval %v is shorter than %v", ErrInvalidConfig, interval, minGCInterval)
	}
	if s.life.Err() != nil {
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.life, cancel)
	defer stop()

	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 0; ; n++ {
		s.sweep(ctx, n%malformedSweepEvery == 0)
		select {
		case <-ctx.Done():
			if s.life.Err() != nil {
				return ErrClosed
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sweep runs DeleteExpired once, and with malformed deleteMalformed too,
// and logs the outcome.
func (s *Store) sweep(ctx context.Context, malformed bool) {
	if s.cfg.afterSweep != nil {
		defer s.cfg.afterSweep()
	}
	if malformed {
		s.sweepMalformed(ctx)
	}
	start := time.Now()
	n, err := s.DeleteExpired(ctx)
	attrs := []slog.Attr{
		slog.String("collection", s.coll.c.Name()),
		slog.Int64("deleted", n),
		slog.Duration("duration", time.Since(start)),
	}
	switch {
	case err != nil && (ctx.Err() != nil || errors.Is(err, ErrClosed)):
		return // stopping: not a failure
	case err != nil:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "mongostore: gc sweep failed", append(attrs, slog.String("error", err.Error()))...)
	case n > 0:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "mongostore: gc sweep", attrs...)
	default:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "mongostore: gc sweep", attrs...)
	}
}

// sweepContext bounds one command of a GC sweep by Config.Timeout or
// Config.GCInterval, whichever is longer.
func (s *Store) sweepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(s.cfg.Timeout, s.cfg.GCInterval))
}

// sweepMalformed deletes the documents whose expiresAt is not a date, and
// logs how many there were (a warning: something else writes to the
// collection) or why it failed.
func (s *Store) sweepMalformed(ctx context.Context) {
	opCtx, cancel := s.sweepContext(ctx)
	defer cancel()
	n, err := s.coll.deleteMalformed(opCtx)
	switch {
	case err != nil && ctx.Err() != nil:
		// stopping: not a failure
	case err != nil:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "mongostore: gc sweep of documents without a date in expiresAt failed",
			slog.String("collection", s.coll.c.Name()), slog.String("error", err.Error()))
	case n > 0:
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: gc deleted documents whose expiresAt is not a date (not written by this store)",
			slog.String("collection", s.coll.c.Name()), slog.Int64("deleted", n))
	}
}

// DeleteExpired deletes every session that has expired and returns how
// many it deleted, with one delete command {expiresAt: {$lte: now}}: an
// index range on servers that plan queries, and a single scan of the
// collection on those that do not (FerretDB v1 uses no index for any other
// shape either, not even a list of _ids, so one command is the cheapest
// there by far). The server checks the expiry itself, so a session saved
// meanwhile is never deleted. The command is bounded by Config.Timeout or
// Config.GCInterval, whichever is longer, and carries GCComment. Errors wrap
// ErrDatabase, except ctx's own error and ErrClosed.
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) {
	if s.life.Err() != nil {
		return 0, ErrClosed
	}
	opCtx, cancel := s.sweepContext(ctx)
	defer cancel()
	n, err := s.coll.deleteExpired(opCtx, s.cfg.Now())
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return n, err
}
