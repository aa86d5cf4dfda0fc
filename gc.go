package mongostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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

// DeleteExpired deletes every session that had expired when it was called
// and returns how many it deleted. It reads the expired documents' IDs
// through one cursor, Config.GCBatchSize at a time, and deletes each batch
// with one delete command whose statements each name a single _id, the
// shape every server answers from its _id index (FerretDB v1 would scan the
// collection once per statement for any other). It checks ctx between
// batches, so that no single command holds the server for long. Errors wrap
// ErrDatabase, except ctx's own error and ErrClosed.
//
// Deleting by _id alone is safe because an expired session never becomes
// live again: loads ignore it and saves refuse it (see Store.Save).
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) {
	if s.life.Err() != nil {
		return 0, ErrClosed
	}
	batch := int32(s.cfg.GCBatchSize)
	findCtx, cancel := s.opContext(ctx, false)
	cur, err := s.coll.Find(findCtx, expiredFilter(s.cfg.Now()), options.Find().
		SetProjection(bson.D{{Key: fieldID, Value: 1}}).
		SetBatchSize(batch).
		SetComment(GCComment))
	cancel()
	if err != nil {
		return 0, fmt.Errorf("%w: find expired sessions: %w", ErrDatabase, err)
	}
	defer func() {
		closeCtx, cancel := s.opContext(ctx, true)
		defer cancel()
		_ = cur.Close(closeCtx)
	}()

	var total int64
	deletes := make([]mongo.WriteModel, 0, batch)
	flush := func() error {
		if len(deletes) == 0 {
			return nil
		}
		opCtx, cancel := s.opContext(ctx, false)
		defer cancel()
		res, err := s.coll.BulkWrite(opCtx, deletes, options.BulkWrite().SetOrdered(false).SetComment(GCComment))
		if res != nil {
			total += res.DeletedCount
		}
		deletes = deletes[:0]
		if err != nil {
			return fmt.Errorf("%w: delete expired sessions: %w", ErrDatabase, err)
		}
		return ctx.Err()
	}
	// next bounds each cursor batch (a getMore) by Config.Timeout.
	next := func() bool {
		opCtx, cancel := s.opContext(ctx, false)
		defer cancel()
		return cur.Next(opCtx)
	}
	for next() {
		id := cur.Current.Lookup(fieldID) // valid until the next Next: copy it
		deletes = append(deletes, mongo.NewDeleteOneModel().SetFilter(bson.D{
			{Key: fieldID, Value: bson.RawValue{Type: id.Type, Value: bytes.Clone(id.Value)}},
		}))
		if len(deletes) == cap(deletes) {
			if err := flush(); err != nil {
				return total, err
			}
		}
	}
	if err := cur.Err(); err != nil {
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
		return total, fmt.Errorf("%w: find expired sessions: %w", ErrDatabase, err)
	}
	return total, flush()
}
