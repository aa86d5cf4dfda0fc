package mongostore

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/sessions"
)

// MaxTouchInterval caps the default MiddlewareOptions.TouchInterval.
const MaxTouchInterval = time.Minute

// MiddlewareOptions configures Store.Middleware. The zero value gives the
// defaults documented on each field.
type MiddlewareOptions struct {
	// ErrorHandler answers requests whose session could not be loaded or
	// saved; err wraps ErrDatabase, ErrSessionGone, ErrTooLarge or ErrEncode
	// (test with errors.Is). It is called before anything of the handler's
	// response has been sent. The default logs with the store's logger and
	// answers 500, or 409 Conflict for ErrSessionGone (the session was ended
	// elsewhere, for example by a logout in another tab, while the request
	// ran).
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

	// TouchInterval is how old the session's last write must be before a
	// request that does not change the session writes it anyway, to slide
	// its idle timeout forward (and re-send its cookie). Requests that only
	// read the session within the interval cost a single database round
	// trip. The default is a tenth of the session's idle timeout, at most
	// MaxTouchInterval (one minute); negative never writes an unchanged
	// session, so the idle timeout counts from the last change.
	TouchInterval time.Duration
}

type sessionContextKey struct{ name string }

// Session returns the session called name that Store.Middleware loaded for
// this request, or nil if no such middleware wraps the handler. The session
// is also what store.Get(r, name) returns.
func Session(r *http.Request, name string) *sessions.Session {
	s, _ := r.Context().Value(sessionContextKey{name}).(*sessions.Session)
	return s
}

// Middleware returns net/http middleware that loads the session called name
// once per request, makes it available to the handler through Session (and
// store.Get), and saves it when the handler changed it, just before the
// response headers are sent, so the Set-Cookie header is never lost.
//
// Requests that leave the session unchanged are not written, except to
// slide the expiry forward once per MiddlewareOptions.TouchInterval. A
// tampered, expired or unknown cookie gives the handler a fresh session. A
// database failure never reaches the handler half-done: the error handler
// answers instead. Every response gets "Vary: Cookie", and a response that
// sets the session cookie is made uncacheable by shared caches.
func (s *Store) Middleware(name string, opts MiddlewareOptions) func(http.Handler) http.Handler {
	if opts.ErrorHandler == nil {
		opts.ErrorHandler = s.defaultErrorHandler
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("Vary", "Cookie")
			session, err := s.Get(r, name)
			if err != nil && !errors.Is(err, ErrInvalidCookie) {
				if !errors.Is(err, ErrDecode) {
					opts.ErrorHandler(w, r, err)
					return
				}
				// A stored session we cannot read is a lost session, not an outage.
				s.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "mongostore: discarding unreadable session",
					slog.String("session", name), slog.String("error", err.Error()))
			}
			// One instant for the request: what Store.Times predicts in the
			// handler is what the save writes.
			at := s.cfg.Now().Truncate(time.Millisecond)
			ctx := context.WithValue(r.Context(), sessionContextKey{name}, session)
			r = r.WithContext(context.WithValue(ctx, requestInstantKey{}, at))
			sw := &sessionWriter{ResponseWriter: w, store: s, req: r, session: session, opts: &opts,
				baseHeader: w.Header().Clone(), at: at}
			s.pending.set(session, sw)
			next.ServeHTTP(sw, r)
			sw.finish()
			s.pending.forget(session)
		})
	}
}

func (s *Store) defaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrSessionGone) {
		s.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "mongostore: session ended during request",
			slog.String("path", r.URL.Path))
		http.Error(w, "Your session ended while this request ran. Please reload the page.", http.StatusConflict)
		return
	}
	s.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "mongostore: session middleware",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
}
