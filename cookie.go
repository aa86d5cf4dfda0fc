package mongostore

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
)

// cookieMaxLength bounds the length of a cookie value the store decodes.
const cookieMaxLength = 4096

// cookieCodec signs (and, with a block key, encrypts) the session's token
// (see keys.go) into the cookie value, with securecookie: the first key
// pair writes, every pair reads. The cookie values it has verified are
// remembered: the session's next request skips the check.
type cookieCodec struct {
	keys     []cookieKey
	verified *memo[verifiedCookie] // by cookie value
}

// verifiedCookie is a cookie value verified for name, and its token.
type verifiedCookie struct {
	name  string
	token cookieToken
}

// cookieKey is a key pair's securecookie codec and, for a pair without a
// block key, a pool of HMAC states with its hash key, for verifySigned.
type cookieKey struct {
	codec securecookie.Codec
	macs  *sync.Pool // nil with a block key
	block []byte     // the block key, to tell a cookie signed with it (errBlockAsHash)
}

// errBlockAsHash is why a cookie that a pair's block key signs as a hash
// key fails: NewStore(…, newHash, oldHash) for a rotation of hash keys.
var errBlockAsHash = errors.New("signed with the block key of a key pair, as a hash key: NewStore takes key pairs " +
	"(hash key, block key), so rotating hash keys alone is NewStore(ctx, coll, cfg, newHashKey, nil, oldHashKey, nil)")

func newCookieCodec(pairs []keyPair) cookieCodec {
	c := cookieCodec{verified: newMemo[verifiedCookie](cookieMemoLimit)}
	for _, p := range pairs {
		sc := securecookie.New(p.hash, p.block)
		sc.SetSerializer(securecookie.NopEncoder{})
		sc.MaxLength(cookieMaxLength)
		// The document's expiresAt decides when a session ends, not the
		// cookie's signed timestamp: a session's own MaxAge may be longer
		// than any store-wide bound.
		sc.MaxAge(0)
		k := cookieKey{codec: sc, block: p.block}
		if p.block == nil {
			k.macs = &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, p.hash)} }}
		}
		c.keys = append(c.keys, k)
	}
	return c
}

// maxCookies bounds how many cookies of one name the store takes, and
// maxCookieValues how many it examines: a flood of bad ones costs no more.
const (
	maxCookies      = 8
	maxCookieValues = 4 * maxCookies
)

// cookieToken is the token of a request's cookie, split once (see
// splitToken), and, if the current key pair signed it, the cookie's value:
// a save sends it back rather than sign anew.
type cookieToken struct{ token, chain, secret, value string }

// newCookieToken returns token, a valid token, split, beside value.
func newCookieToken(token, value string) cookieToken {
	chain, secret, _ := splitToken(token)
	return cookieToken{token, chain, secret, value}
}

// tokens appends to tokens those in the request's first maxCookieValues
// cookies called name that verify, in order, each once, at most
// maxCookies. Without any that verifies, err is the first cookie's error.
func (c cookieCodec) tokens(r *http.Request, name string, tokens []cookieToken) (_ []cookieToken, err error) {
	examined := 0
	for value := range cookieValues(r, name) {
		if examined++; examined > maxCookieValues || len(tokens) == maxCookies {
			break
		}
		t, cerr := c.token(name, value)
		switch {
		case cerr != nil:
			err = cmp.Or(err, cerr)
		case !slices.ContainsFunc(tokens, func(o cookieToken) bool { return o.token == t.token }):
			tokens = append(tokens, t)
		}
	}
	if len(tokens) > 0 {
		err = nil
	}
	return tokens, err
}

// cookieValues yields the values of the request's cookies called name, in
// order, as r.CookiesNamed reads them (FuzzCookieValues), but for its
// limit on the number of cookies, and without allocating.
func cookieValues(r *http.Request, name string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, line := range r.Header["Cookie"] {
			for part := range strings.SplitSeq(line, ";") {
				if v, ok := cookieValue(part, name); ok && !yield(v) {
					return
				}
			}
		}
	}
}

// cookieValue returns the value of part, a pair of a Cookie header, if it
// is called name and its value is one a cookie can hold, unquoted.
func cookieValue(part, name string) (string, bool) {
	k, v, _ := strings.Cut(textproto.TrimString(part), "=")
	if textproto.TrimString(k) != name {
		return "", false
	}
	if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	return v, allBytes(v, func(c byte) bool { return ' ' <= c && c <= '~' && c != '"' && c != ';' && c != '\\' })
}

// token returns the token in value, a cookie called name, as decode
// verifies it, or as it did for an earlier request.
func (c cookieCodec) token(name, value string) (cookieToken, error) {
	if v, ok := c.verified.get(value); ok && v.name == name {
		return v.token, nil
	}
	token, current, err := c.decode(name, value)
	if err != nil {
		return cookieToken{}, err
	}
	value = strings.Clone(value) // not the request's whole header line, for the memo
	t := newCookieToken(token, value)
	if !current {
		t.value = "" // to be signed anew with the current pair
	}
	c.verified.put(value, verifiedCookie{name, t}, len(name)+len(value)+len(token)+128)
	return t, nil
}

// decode verifies a cookie value and returns the token it holds, and
// whether the current key pair signed it. Pairs that share a hash key all
// verify the signature, so each is tried until one yields a token.
func (c cookieCodec) decode(name, value string) (id string, current bool, err error) {
	for i, k := range c.keys {
		if id, ok := k.verifySigned(name, value); ok && validToken(id) {
			return id, i == 0, nil
		}
	}
	errs := make([]error, 0, len(c.keys))
	for i, k := range c.keys {
		var raw []byte
		if err := k.codec.Decode(name, value, &raw); err != nil {
			errs = append(errs, err)
		} else if id = string(raw); validToken(id) {
			return id, i == 0, nil
		} else {
			errs = append(errs, errors.New("malformed session token"))
		}
	}
	if c.signedWithABlockKey(name, value) {
		errs = append(errs, errBlockAsHash)
	}
	return "", false, fmt.Errorf("%w: %w", ErrInvalidCookie, oneLine(errs))
}

// signedWithABlockKey reports whether a pair's block key, as a hash key,
// signed value for name (a cookie no pair verifies).
func (c cookieCodec) signedWithABlockKey(name, value string) bool {
	return slices.ContainsFunc(c.keys, func(k cookieKey) bool {
		if k.block == nil || len(value) > cookieMaxLength {
			return false
		}
		_, ok := (&macState{h: hmac.New(sha256.New, k.block)}).verifySigned(name, value)
		return ok
	})
}

// verifySigned returns the token in value if k, a pair without a block
// key, signed it for name. It checks what k.codec's Decode checks (the
// length; the base64; the MAC of name|date|payload; a date, of any age),
// without its allocations; FuzzVerifySigned holds the two to the same
// answers.
func (k cookieKey) verifySigned(name, value string) (string, bool) {
	if k.macs == nil || len(value) > cookieMaxLength {
		return "", false
	}
	m := k.macs.Get().(*macState)
	defer k.macs.Put(m)
	return m.verifySigned(name, value)
}

// verifySigned is cookieKey.verifySigned with m, an HMAC state of its
// hash key, and its buffer.
func (m *macState) verifySigned(name, value string) (string, bool) {
	b := append(m.buf[:0], value...)
	msg := len(b) // name|date|payload starts here
	b = append(append(b, name...), '|')
	b, err := base64.URLEncoding.AppendDecode(b, b[:msg])
	m.buf = b[:0] // keep the grown buffer
	dated := b[msg+len(name)+1:]
	i := bytes.IndexByte(dated, '|')
	j := bytes.IndexByte(dated[i+1:], '|') + i + 1
	if err != nil || i < 0 || j <= i {
		return "", false
	}
	m.h.Reset()
	m.h.Write(b[msg : msg+len(name)+1+j])
	b = m.h.Sum(b)
	if !hmac.Equal(dated[j+1:], b[len(b)-sha256.Size:]) {
		return "", false
	}
	if _, err := strconv.ParseInt(string(dated[:i]), 10, 64); err != nil {
		return "", false
	}
	token, err := base64.URLEncoding.AppendDecode(b, dated[i+1:j])
	m.buf = token[:0]
	return string(token[len(b):]), err == nil
}

// encode returns the cookie value for token id, signed with the first pair.
func (c cookieCodec) encode(name, id string) (string, error) {
	v, err := c.keys[0].codec.Encode(name, []byte(id))
	if err != nil {
		return "", fmt.Errorf("%w: cookie: %w", ErrEncode, err)
	}
	return v, nil
}

// setCookie sets the cookie called name to value, or with opts.MaxAge < 0
// expires it, in place of one of that path and domain the response already
// sets (a save after RegenerateID). A cookie with a Max-Age never outlives
// the session's document, which expires at expiresAt. The middleware keeps
// it even if a later save fails.
func setCookie(w http.ResponseWriter, name, value string, opts *sessions.Options, expiresAt, now time.Time) {
	o := *opts
	if o.MaxAge > 0 {
		// Round up: expiresAt was truncated to whole milliseconds.
		if left := int((expiresAt.Sub(now) + time.Second - 1) / time.Second); left < o.MaxAge {
			o.MaxAge = max(left, 1)
		}
	}
	h, c := w.Header(), sessions.NewCookie(name, value, &o)
	same := func(v string) bool { // a cookie of name, path and domain: browsers would keep the last
		if len(v) <= len(name) || v[len(name)] != '=' || v[:len(name)] != name {
			return false
		}
		set, err := http.ParseSetCookie(v)
		return err == nil && set.Path == c.Path && strings.EqualFold(set.Domain, strings.TrimPrefix(c.Domain, "."))
	}
	if set := h["Set-Cookie"]; slices.ContainsFunc(set, same) {
		h["Set-Cookie"] = slices.DeleteFunc(slices.Clone(set), same) // a copy: the middleware's snapshot shares set
	}
	if v := c.String(); v != "" {
		h.Add("Set-Cookie", v)
		keepCookie(w, v)
	}
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
