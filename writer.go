package mongostore

import (
	"iter"
	"net/http"
)

// The response writers a session's cookie goes through: the middleware's
// wraps the server's, and other middleware may wrap either.

// writers yields w and the writers it wraps (Unwrap), at most 32 deep.
func writers(w http.ResponseWriter) iter.Seq[http.ResponseWriter] {
	return func(yield func(http.ResponseWriter) bool) {
		for range 32 {
			if w == nil || !yield(w) {
				return
			}
			u, ok := w.(interface{ Unwrap() http.ResponseWriter })
			if !ok {
				return
			}
			w = u.Unwrap()
		}
	}
}

// startedWriter is a ResponseWriter that knows whether its response has
// started (the middleware's).
type startedWriter interface{ responseStarted() bool }

// responseStarted reports whether w, or a writer it wraps, says its
// response has started: a cookie set now would be lost. Gin's and
// negroni's writers say it with Written.
func responseStarted(w http.ResponseWriter) bool {
	for w := range writers(w) {
		if sw, ok := w.(startedWriter); ok {
			return sw.responseStarted()
		}
		if ww, ok := w.(interface{ Written() bool }); ok && ww.Written() {
			return true
		}
	}
	return false
}

// cookieKeeper is a ResponseWriter that keeps the session cookies set
// through it (each names a session as the database now holds it) should
// it replace its response (the middleware's, after a failed save).
type cookieKeeper interface{ keepCookie(field string) }

// keepCookie tells w, and the writers it wraps, to keep field, a
// Set-Cookie field's value.
func keepCookie(w http.ResponseWriter, field string) {
	for w := range writers(w) {
		if k, ok := w.(cookieKeeper); ok {
			k.keepCookie(field)
		}
	}
}
