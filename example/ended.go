package main

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
)

// A session cookie that comes back without a live session (the session
// ended elsewhere or expired; the cookie is tampered, or signed with
// another key) is expired in the response that finds it, with a notice
// that says what happened. The store cannot tell an expired session from
// one ended elsewhere once the document is gone, so the app keeps a hint:
// a cookie of its own that holds when the logged-in session expires if
// unused, set on each logged-in page and kept longer than the session
// cookie, so that it also comes back alone once the browser has dropped
// an expired session cookie.

// hintLinger is how long the hint cookie outlives the time it holds: a
// user who comes back within it learns that their session expired.
const hintLinger = 7 * 24 * time.Hour

// Notices of a session that ended, as the login form shows them; %s is
// the idle timeout (noticeIdle) or the absolute timeout (noticeLimit).
const (
	noticeElsewhere  = "Your session was ended from another device. Please log in again."
	noticeUnreadable = "We could not read your session cookie, so you have a new session. Please log in again."
	noticeIdle       = "Your session expired after %s without activity. Please log in again."
	noticeLimit      = "Your session expired: a session lasts at most %s, however active. Please log in again."
)

// sessionHint is what the hint cookie holds: when the logged-in session
// expires at the earliest if unused, and why then.
type sessionHint struct {
	At time.Time // zero: no hint
	// Idle is the session's idle timeout, unless At is its absolute limit
	// (Limit).
	Idle  time.Duration
	Limit bool
}

// String returns the cookie value of h: "AT.IDLE", At in Unix milliseconds
// and Idle in seconds, or "AT.limit".
func (h sessionHint) String() string {
	if h.Limit {
		return fmt.Sprintf("%d.limit", h.At.UnixMilli())
	}
	return fmt.Sprintf("%d.%d", h.At.UnixMilli(), int64(h.Idle/time.Second))
}

// parseHint reads a hint cookie's value; one it cannot read gives the zero
// hint.
func parseHint(v string) sessionHint {
	at, rest, _ := strings.Cut(v, ".")
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil || ms <= 0 {
		return sessionHint{}
	}
	h := sessionHint{At: time.UnixMilli(ms), Limit: rest == "limit"}
	if h.Limit {
		return h
	}
	idle, err := strconv.ParseInt(rest, 10, 32) // 68 years at most: no overflow
	if err != nil || idle <= 0 {
		return sessionHint{}
	}
	h.Idle = time.Duration(idle) * time.Second
	return h
}

// touchInterval is the store's Config.TouchInterval for a session with
// the idle timeout idle, which the app leaves at its default: a page that
// only reads the session saves it, sliding its expiry, at most this long
// after its last save.
func touchInterval(idle time.Duration) time.Duration {
	return min(idle/10, time.Minute)
}

// setHint sets the hint cookie of sess, a logged-in session, before the
// response goes out. The document's expiry slides only when the session
// is saved, which a page that only reads it does once per touch interval:
// if unused, the session expires no earlier than a touch interval before
// now plus its idle timeout, the time the hint holds (unless its absolute
// limit comes first). So a session that expired always says so; one ended
// from another device within that interval of its expiry says it expired.
func (a *app) setHint(w http.ResponseWriter, sess *sessions.Session) {
	idle := time.Duration(sess.Options.MaxAge) * time.Second
	if idle <= 0 {
		return // never here: SESSION_MAX_AGE is at least a second
	}
	now := time.Now()
	h := sessionHint{At: now.Add(idle - touchInterval(idle)), Idle: idle}
	if times, ok := a.store.Times(sess); ok && a.absolute > 0 {
		if limit := times.CreatedAt.Add(a.absolute); limit.Before(h.At) {
			h = sessionHint{At: limit, Limit: true}
		}
	}
	http.SetCookie(w, a.hintCookie(h.String(), int((h.At.Sub(now)+hintLinger)/time.Second)))
}

// clearHint expires the hint cookie.
func (a *app) clearHint(w http.ResponseWriter) {
	http.SetCookie(w, a.hintCookie("", -1))
}

// hintCookie returns the hint cookie holding value, for maxAge seconds
// (negative: expired). It is not signed: a forged one changes only which
// notice its own browser shows.
func (a *app) hintCookie(value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: a.hintName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: a.secure, SameSite: http.SameSiteLaxMode}
}

// deadSession handles a request that came back without a live session
// but with a session cookie, or with a hint alone (the browser dropped the
// expired session cookie): it has the middleware expire the session cookie
// (once, even one that loaded nothing), expires the hint, and returns the
// notice that says what happened. ok is false for any other request, and
// for an unreadable hint alone (expired too, with nothing to say).
func (a *app) deadSession(w http.ResponseWriter, r *http.Request) (notice flash, ok bool) {
	sess, err := a.store.Get(r, a.sessionName)
	_, noCookie := r.Cookie(a.sessionName)
	hint, noHint := r.Cookie(a.hintName)
	if !sess.IsNew || (noCookie != nil && noHint != nil) {
		return flash{}, false
	}
	sess.Options.MaxAge = -1
	var h sessionHint
	if noHint == nil {
		a.clearHint(w)
		h = parseHint(hint.Value)
	}
	if noCookie != nil && h.At.IsZero() {
		return flash{}, false
	}
	return flash{kindWarning, a.endNotice(err, h, time.Now())}, true
}

// endNotice says why a request's session cookie, or hint h alone (zero:
// none), led to no live session at now, Get having returned loadErr: the
// cookie was unreadable; the session expired (the hint's time has passed);
// or it ended elsewhere: a logout on another device, or the limit of
// sessions per user.
func (a *app) endNotice(loadErr error, h sessionHint, now time.Time) string {
	switch {
	case errors.Is(loadErr, mongostore.ErrInvalidCookie), errors.Is(loadErr, mongostore.ErrDecode):
		return noticeUnreadable
	case h.At.IsZero() || now.Before(h.At):
		return noticeElsewhere
	case h.Limit:
		return fmt.Sprintf(noticeLimit, spellDuration(a.absolute))
	}
	return fmt.Sprintf(noticeIdle, spellDuration(h.Idle))
}

// spellDuration spells d, truncated to the second, for a sentence: "30
// minutes", "1 day", "1 hour and 30 minutes", "2 days, 3 hours and 1
// second".
func spellDuration(d time.Duration) string {
	var parts []string
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}} {
		if n := d / u.unit; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, u.name))
			if n > 1 {
				parts[len(parts)-1] += "s"
			}
			d -= n * u.unit
		}
	}
	switch n := len(parts); n {
	case 0:
		return "less than a second"
	case 1:
		return parts[0]
	default:
		return strings.Join(parts[:n-1], ", ") + " and " + parts[n-1]
	}
}
