package mongostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

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
	start := time.Now()
	n, err := s.DeleteExpired(ctx)
	attrs := []slog.Attr{
		slog.String("collection", s.coll.Name()),
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

// DeleteExpired deletes every session that has expired and returns how many
// it deleted. It works in batches of Config.GCBatchSize documents (one find
// and one delete each), checking ctx between batches, so that no single
// command holds the server for long. Errors wrap ErrDatabase, except ctx's
// own error and ErrClosed.
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) {
	if s.life.Err() != nil {
		return 0, ErrClosed
	}
	now := bsonDate(s.cfg.Now())
	expired := bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$lte", Value: now}}}}
	findOpts := options.Find().
		SetProjection(bson.D{{Key: fieldID, Value: 1}}).
		SetLimit(int64(s.cfg.GCBatchSize))

	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		cur, err := s.coll.Find(ctx, expired, findOpts)
		if err != nil {
			return total, fmt.Errorf("%w: find expired sessions: %w", ErrDatabase, err)
		}
		ids := make(bson.A, 0, s.cfg.GCBatchSize)
		for cur.Next(ctx) {
			id := cur.Current.Lookup(fieldID) // valid until the next Next: copy it
			ids = append(ids, bson.RawValue{Type: id.Type, Value: bytes.Clone(id.Value)})
		}
		err = errors.Join(cur.Err(), cur.Close(ctx))
		if err != nil {
			return total, fmt.Errorf("%w: find expired sessions: %w", ErrDatabase, err)
		}
		if len(ids) == 0 {
			return total, nil
		}
		// Filter on expiresAt again: a session saved since the find is live.
		res, err := s.coll.DeleteMany(ctx, bson.D{
			{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}},
			expired[0],
		})
		if err != nil {
			return total, fmt.Errorf("%w: delete expired sessions: %w", ErrDatabase, err)
		}
		total += res.DeletedCount
		if len(ids) < s.cfg.GCBatchSize {
			return total, nil
		}
	}
}
