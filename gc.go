package mongostore

import (
	"context"
	"log/slog"
	"time"
)

// startGC starts the goroutine that deletes expired sessions every
// GCInterval until Close.
func (s *Store) startGC(ctx context.Context) {
	ctx, s.stop = context.WithCancel(context.WithoutCancel(ctx))
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

// sweep deletes the expired sessions and logs what it did.
func (s *Store) sweep(ctx context.Context) {
	if s.cfg.afterSweep != nil {
		defer s.cfg.afterSweep()
	}
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

// DeleteExpired deletes every expired session in one command (the server
// checks the expiry, so a session saved meanwhile stays) and returns how
// many: for ExpiryNone, from a cron job say. It is bounded by Timeout or
// GCInterval, whichever is longer, and carries the comment "mongostore gc
// sweep". Errors wrap ErrDatabase.
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) {
	ctx, cancel := s.sweepContext(ctx)
	defer cancel()
	ctx, sp := s.tel.start(ctx, opGCSweep)
	n, err := s.coll.deleteExpired(ctx, s.cfg.Now())
	sp.count = n
	sp.end(err)
	return n, err
}
