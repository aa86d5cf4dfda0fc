package mongostore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The store reports each transition of a session to Config.OnEvent, once,
// inside the operation that made it, after its database command.

// emit gives the subscriber, if any, the event kind (for a reason) of the
// session st describes, inside the caller's operation. A subscriber that
// panics is logged and the operation goes on.
func (s *Store) emit(ctx context.Context, kind EventKind, reason EndReason, st sessionState) {
	if s.cfg.OnEvent == nil {
		return
	}
	s.emitEvent(ctx, Event{Kind: kind, Reason: reason, Handle: handle(st.id), Owner: st.owner, Device: st.device, SessionTimes: st.times()})
}

// emitEvent gives the subscriber e; a panic in it is logged.
func (s *Store) emitEvent(ctx context.Context, e Event) {
	defer func() {
		if v := recover(); v != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "mongostore: the OnEvent subscriber panicked",
				slog.String("event", string(e.Kind)), slog.String("panic", fmt.Sprintf("%T", v))) // its type: its text may hold the event's owner
		}
	}()
	s.cfg.OnEvent(ctx, e)
}

// emitWait reports that a request took the lock of the session st
// describes, after waiting for it that long.
func (s *Store) emitWait(ctx context.Context, st sessionState, waited time.Duration) {
	if s.cfg.OnEvent == nil {
		return
	}
	s.emitEvent(ctx, Event{Kind: EventLocked, Handle: handle(st.id), Owner: st.owner, Device: st.device, Waited: waited,
		SessionTimes: st.times()})
}

// emitEnd reports the end of the session st describes, which an ending
// for reason deleted: as an expiry if it had expired by then.
func (s *Store) emitEnd(ctx context.Context, reason EndReason, st sessionState) {
	if !s.alive(st.expiresAt, st.createdAt, st.options.MaxAge, s.cfg.Now()) {
		s.emit(ctx, EventExpired, "", st)
		return
	}
	s.emit(ctx, EventEnded, reason, st)
}

// expired deletes d, met expired by a load, unless saved since, and
// reports it if it did: once, whichever request meets it first. Without a
// subscriber, the TTL index or the GC deletes it.
func (s *Store) expired(ctx context.Context, raw bson.Raw, d *document, values map[any]any) {
	if s.cfg.OnEvent == nil {
		return
	}
	deleted, err := s.coll.deleteExpiredOne(ctx, raw.Lookup(fieldID), d.rev, s.cfg.Now())
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "mongostore: deleting an expired session", slog.String("error", err.Error()))
	}
	if deleted {
		s.emit(ctx, EventExpired, "", storedState(d, values))
	}
}
