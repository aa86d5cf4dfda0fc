package mongostore

import "time"

// A session lives unused for its idle timeout (its Options.MaxAge, or
// Config.IdleTimeout), and at most until its absolute limit, counted from
// its creation.

// live reports whether d is live at now: not expired, nor past the
// absolute timeout in force (maybe shorter than when it was saved).
func (s *Store) live(d *document, now time.Time) bool {
	return s.alive(d.expiresAt, d.createdAt, d.maxAge, now)
}

// alive reports whether a session with this MaxAge, created at createdAt
// and stored until expiresAt, is live at now.
func (s *Store) alive(expiresAt, createdAt time.Time, maxAge int, now time.Time) bool {
	limit, ok := s.absoluteLimit(maxAge, createdAt)
	return expiresAt.After(now) && (!ok || limit.After(now))
}

// expiresAt is when a session with this MaxAge, created at createdAt and
// saved at now, expires.
func (s *Store) expiresAt(maxAge int, createdAt, now time.Time) time.Time {
	t := now.Add(s.idleTimeout(maxAge))
	if limit, ok := s.absoluteLimit(maxAge, createdAt); ok && limit.Before(t) {
		t = limit
	}
	return t.Truncate(time.Millisecond) // BSON dates have millisecond precision
}

// idleTimeout is how long a session with this MaxAge lives unused.
func (s *Store) idleTimeout(maxAge int) time.Duration {
	if maxAge > 0 {
		return time.Duration(min(int64(maxAge), 1<<33)) * time.Second // 272 years; more would overflow
	}
	return s.cfg.IdleTimeout
}

// absoluteLimit is when a session with this MaxAge, created at createdAt,
// ends however active, and false if it has no such limit.
func (s *Store) absoluteLimit(maxAge int, createdAt time.Time) (time.Time, bool) {
	switch d := s.cfg.AbsoluteTimeout; {
	case d < 0:
		return time.Time{}, false
	case d > 0:
		return createdAt.Add(d), true
	}
	return createdAt.Add(max(defaultAbsoluteTimeout, s.idleTimeout(maxAge))), true
}
