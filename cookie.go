package mongostore

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
)

// cookieSessionID returns the session ID in the request's cookie called
// name, or "" if it has none that verifies (with the error of the first
// cookie of that name, if any). When there are several (a sibling domain
// may have tossed one in ahead of ours), the first that verifies is used.
// reusable is that cookie's value if the current key signed it: saves send
// it back as it is rather than sign the same ID again.
func (s *Store) cookieSessionID(r *http.Request, name string) (id, reusable string, err error) {
	var firstErr error
	for _, c := range r.CookiesNamed(name) {
		id, current, err := s.decodeCookie(name, c.Value)
		if err == nil {
			if current {
				reusable = c.Value
			}
			return id, reusable, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", "", firstErr
}

// decodeCookie verifies a cookie value and returns the session ID it holds,
// and whether the current (first) key pair verified it.
func (s *Store) decodeCookie(name, value string) (id string, current bool, err error) {
	var raw []byte
	if err := s.codecs[0].Decode(name, value, &raw); err == nil {
		current = true
	} else if err := securecookie.DecodeMulti(name, value, &raw, s.codecs...); err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrInvalidCookie, unwrapMulti(err))
	}
	id = string(raw)
	if !validSessionID(id) {
		return "", false, fmt.Errorf("%w: malformed session ID", ErrInvalidCookie)
	}
	return id, current, nil
}

// unwrapMulti turns securecookie's MultiError, which errors.Is cannot see
// into, into a joined error that it can.
func unwrapMulti(err error) error {
	var multi securecookie.MultiError
	if errors.As(err, &multi) {
		return errors.Join(multi...)
	}
	return err
}

// checkCookiePrefix checks options against what browsers require of a
// cookie whose name has a __Host- or __Secure- prefix; they silently drop
// one that does not comply, which would lose the session at every request.
func checkCookiePrefix(name string, o *sessions.Options) error {
	hasPrefix := func(p string) bool { return len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) }
	switch {
	case hasPrefix("__Host-") && (!o.Secure || o.Path != "/" || o.Domain != ""):
		return fmt.Errorf("%w: cookie %q needs Options with Secure, Path \"/\" and no Domain (the __Host- prefix)", ErrInvalidConfig, name)
	case hasPrefix("__Secure-") && !o.Secure:
		return fmt.Errorf("%w: cookie %q needs Options with Secure (the __Secure- prefix)", ErrInvalidConfig, name)
	}
	return nil
}

// encodeCookie returns the signed (and maybe encrypted) cookie value for
// session ID id, with the current key pair.
func (s *Store) encodeCookie(name, id string) (string, error) {
	encoded, err := securecookie.EncodeMulti(name, []byte(id), s.codecs...)
	if err != nil {
		return "", fmt.Errorf("%w: cookie: %w", ErrEncode, unwrapMulti(err))
	}
	return encoded, nil
}

// setCookie sets the session cookie, its value encoded. A cookie with a
// Max-Age never outlives the session's document.
func (s *Store) setCookie(w http.ResponseWriter, session *sessions.Session, encoded string, expiresAt, now time.Time) {
	opts := *session.Options
	if opts.MaxAge > 0 {
		// Round up: expiresAt was truncated to whole milliseconds.
		if left := int((expiresAt.Sub(now) + time.Second - 1) / time.Second); left < opts.MaxAge {
			opts.MaxAge = max(left, 1)
		}
	}
	http.SetCookie(w, sessions.NewCookie(session.Name(), encoded, &opts))
}

// newOptions returns a copy of the store's default options for a session.
func (s *Store) newOptions() *sessions.Options {
	if s.Options == nil { // a caller cleared them: fall back to the defaults
		return defaultOptions()
	}
	opts := *s.Options
	return &opts
}

// defaultOptions are the cookie options NewStore starts with.
func defaultOptions() *sessions.Options {
	return &sessions.Options{
		Path:     "/",
		MaxAge:   DefaultMaxAge,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
}

// MaxAge sets the maximum age, in seconds, of new sessions' cookies
// (Options.MaxAge), as sessions.CookieStore.MaxAge does; setting
// store.Options.MaxAge, or a session's own Options.MaxAge, is the same. It
// is also the sessions' idle timeout on the server. Zero means a cookie that
// lasts until the browser closes, with Config.DefaultIdleTimeout on the
// server. Unlike gorilla's stores, the cookie's signed timestamp is not
// checked against it: the document's expiresAt alone decides when a session
// ends, so a longer per-session MaxAge is never cut short.
func (s *Store) MaxAge(age int) {
	if s.Options == nil {
		s.Options = defaultOptions()
	}
	s.Options.MaxAge = age
}

// prepare gives session the store's options if it has none, checks them
// against the cookie's name prefix, and reports whether the session is to
// be deleted (Options.MaxAge < 0).
func (s *Store) prepare(session *sessions.Session) (deleting bool, err error) {
	if session.Options == nil {
		session.Options = s.newOptions()
	}
	if err := checkCookiePrefix(session.Name(), session.Options); err != nil {
		return false, err
	}
	return session.Options.MaxAge < 0, nil
}
