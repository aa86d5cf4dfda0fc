package mongostore

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
)

// cookieMaxLength bounds the length of a cookie value the store decodes.
const cookieMaxLength = 4096

// cookieCodec signs (and, with a block key, encrypts) the session's token
// (see keys.go) into the cookie value, with securecookie: the first key pair writes, every
// pair reads.
type cookieCodec []securecookie.Codec

func newCookieCodec(pairs []keyPair) cookieCodec {
	var c cookieCodec
	for _, p := range pairs {
		sc := securecookie.New(p.hash, p.block)
		sc.SetSerializer(securecookie.NopEncoder{})
		sc.MaxLength(cookieMaxLength)
		// The document's expiresAt decides when a session ends, not the
		// cookie's signed timestamp: a session's own MaxAge may be longer
		// than any store-wide bound.
		sc.MaxAge(0)
		c = append(c, sc)
	}
	return c
}

// maxCookies bounds how many cookies of one name the store reads.
const maxCookies = 8

// tokens returns the tokens in the request's cookies called name that
// verify, in order, at most maxCookies, and beside each its cookie's value
// if the current key signed it (saves send it back rather than sign anew).
// Without any that verifies, err is the first cookie's error.
func (c cookieCodec) tokens(r *http.Request, name string) (ids, reusable []string, err error) {
	for _, cookie := range r.CookiesNamed(name) {
		id, current, cerr := c.decode(name, cookie.Value)
		switch {
		case cerr != nil:
			if err == nil {
				err = cerr
			}
		case len(ids) < maxCookies && !slices.Contains(ids, id):
			ids = append(ids, id)
			if !current {
				cookie.Value = ""
			}
			reusable = append(reusable, cookie.Value)
		}
	}
	if len(ids) > 0 {
		err = nil
	}
	return ids, reusable, err
}

// decode verifies a cookie value and returns the token it holds, and
// whether the current key pair signed it.
func (c cookieCodec) decode(name, value string) (id string, current bool, err error) {
	var raw []byte
	if err := c[0].Decode(name, value, &raw); err == nil {
		current = true
	} else if err := securecookie.DecodeMulti(name, value, &raw, c...); err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrInvalidCookie, unwrapMulti(err))
	}
	if id = string(raw); !validToken(id) {
		return "", false, fmt.Errorf("%w: malformed session token", ErrInvalidCookie)
	}
	return id, current, nil
}

// encode returns the cookie value for token id.
func (c cookieCodec) encode(name, id string) (string, error) {
	v, err := securecookie.EncodeMulti(name, []byte(id), c...)
	if err != nil {
		return "", fmt.Errorf("%w: cookie: %w", ErrEncode, unwrapMulti(err))
	}
	return v, nil
}

// unwrapMulti turns securecookie's MultiError, which errors.Is cannot see
// into, into a joined error.
func unwrapMulti(err error) error {
	var multi securecookie.MultiError
	if errors.As(err, &multi) {
		return errors.Join(multi...)
	}
	return err
}

// setCookie sets the cookie called name to value, or with opts.MaxAge < 0
// expires it. A cookie with a Max-Age never outlives the session's
// document, which expires at expiresAt.
func setCookie(w http.ResponseWriter, name, value string, opts *sessions.Options, expiresAt, now time.Time) {
	o := *opts
	if o.MaxAge > 0 {
		// Round up: expiresAt was truncated to whole milliseconds.
		if left := int((expiresAt.Sub(now) + time.Second - 1) / time.Second); left < o.MaxAge {
			o.MaxAge = max(left, 1)
		}
	}
	http.SetCookie(w, sessions.NewCookie(name, value, &o))
}

// checkCookieName checks that browsers would send a cookie called name
// back: a token of RFC 6265 (no space, no separator, no control).
func checkCookieName(name string) error {
	if name == "" || strings.IndexFunc(name, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", r)
	}) >= 0 {
		return fmt.Errorf("%w: cookie name %q: browsers would not send it back (use letters, digits and !#$%%&'*+-.^_`|~)", ErrInvalidConfig, name)
	}
	return nil
}

// checkCookiePrefix checks opts against what browsers require of a cookie
// whose name has a __Host- or __Secure- prefix (they drop one that does not
// comply, losing the session).
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

// defaultOptions are the cookie options NewStore starts with: a day's
// Max-Age, HttpOnly, SameSite Lax.
func defaultOptions() *sessions.Options {
	return &sessions.Options{Path: "/", MaxAge: 24 * 60 * 60, HttpOnly: true, SameSite: http.SameSiteLaxMode}
}
