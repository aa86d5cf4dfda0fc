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

// RunGC deletes expired sessions every interval (and once at the start)
// until ctx is cancelled or the store is closed. It returns ctx's error
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
	for {
		s.sweep(ctx)
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

// sweep runs DeleteExpired once and logs the outcome.
func (s *Store) sweep(ctx context.Context) {
	if s.cfg.afterSweep != nil {
		defer s.cfg.afterSweep()
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
	opCtx, cancel := context.WithTimeout(ctx, max(s.cfg.Timeout, s.cfg.GCInterval))
	defer cancel()
	n, err := s.coll.deleteExpired(opCtx, s.cfg.Now())
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return n, err
}
