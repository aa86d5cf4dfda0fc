package mongostore

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
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
			r = r.WithContext(context.WithValue(r.Context(), sessionContextKey{name}, session))
			sw := &sessionWriter{ResponseWriter: w, store: s, req: r, session: session, opts: &opts,
				baseHeader: w.Header().Clone()}
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

// saveReason says why the middleware writes a session.
type saveReason int

const (
	noSave     saveReason = iota
	saveChange            // values or options changed, or the session is deleted
	saveTouch             // unchanged, but its expiry is due to slide forward
)

// needsSave says whether the middleware must write session: it changed, it
// is to be deleted (or its stale cookie expired, unless the response already
// does), or its last write is older than the touch interval (see
// MiddlewareOptions.TouchInterval).
//
// stored caches the session's stored values, decoded: needsSave fills it
// when it is nil, so that a second call for the same stored data need not
// decode again.
func (s *Store) needsSave(r *http.Request, h http.Header, session *sessions.Session, touch time.Duration, stored *map[any]any) saveReason {
	st, isStored := s.states.get(session)
	if session.Options != nil && session.Options.MaxAge < 0 {
		if isStored || session.ID != "" {
			return saveChange
		}
		// An unusable cookie is still worth expiring, once.
		if _, err := r.Cookie(session.Name()); err == nil && !setsCookie(h, session.Name()) {
			return saveChange
		}
		return noSave
	}
	if !isStored {
		if len(session.Values) > 0 { // a new, empty session is not worth a cookie
			return saveChange
		}
		return noSave
	}
	if (session.Options != nil && *session.Options != st.options) || s.changed(session, st, stored) {
		return saveChange
	}
	if touch == 0 {
		touch = min(s.idleTimeout(session.Options)/10, MaxTouchInterval)
	}
	if touch > 0 && !s.cfg.Now().Before(st.savedAt.Add(touch)) {
		return saveTouch
	}
	return noSave
}

// changed reports whether session's values differ from what was last read
// or written. It compares them with the stored bytes decoded (comparing
// encodings would not do: gob writes maps in random order), taken from
// *stored or decoded into it. A value that merely looks changed (a NaN, an
// empty slice gob reads as nil) costs one needless write, never a lost
// change.
func (s *Store) changed(session *sessions.Session, st sessionState, stored *map[any]any) bool {
	if *stored == nil {
		old, err := s.cfg.Codec.Decode(st.data)
		if err != nil {
			return true
		}
		*stored = old
	}
	return !reflect.DeepEqual(*stored, session.Values)
}

// sessionWriter saves the session before the first byte of the response
// goes out.
type sessionWriter struct {
	http.ResponseWriter
	store   *Store
	req     *http.Request
	session *sessions.Session
	opts    *MiddlewareOptions
	// baseHeader is the response header as it was before the handler ran
	// (outer middleware's headers and Vary), restored on a failed save.
	baseHeader http.Header

	once      sync.Once
	committed bool        // commit has run: the response may have started
	failed    bool        // the save failed and the error handler answered
	stored    map[any]any // the stored values, decoded once for needsSave
}

// finish runs when the handler returns. If the response started before the
// handler's last change to the session, the change is still stored: a
// loaded session keeps its ID, so its cookie needs no update. A new session
// cannot be given a cookie any more; that is logged.
func (w *sessionWriter) finish() {
	if !w.committed {
		w.commit()
		return
	}
	if w.failed || w.store.needsSave(w.req, w.Header(), w.session, -1, &w.stored) != saveChange {
		return
	}
	log := w.store.cfg.Logger
	_, stored := w.store.states.get(w.session)
	if !stored || (w.session.Options != nil && w.session.Options.MaxAge < 0) {
		log.LogAttrs(w.req.Context(), slog.LevelWarn, "mongostore: session changed after the response started; not saved (save it before writing the response)",
			slog.String("session", w.session.Name()), slog.String("path", w.req.URL.Path))
		return
	}
	if err := w.save(discardHeaders{}); err != nil {
		log.LogAttrs(w.req.Context(), slog.LevelError, "mongostore: saving session after the response",
			slog.String("session", w.session.Name()), slog.String("path", w.req.URL.Path), slog.String("error", err.Error()))
	}
}

// willSave reports whether the session is still to be written when the
// response starts (and not deleted), for Store.Times.
func (w *sessionWriter) willSave() bool {
	if w.committed || (w.session.Options != nil && w.session.Options.MaxAge < 0) {
		return false
	}
	return w.store.needsSave(w.req, w.Header(), w.session, w.opts.TouchInterval, &w.stored) != noSave
}

// discardHeaders is a ResponseWriter for saves after the response has gone.
type discardHeaders struct{}

func (discardHeaders) Header() http.Header         { return http.Header{} }
func (discardHeaders) Write(b []byte) (int, error) { return len(b), nil }
func (discardHeaders) WriteHeader(int)             {}

// commit saves the session if needed, once. On failure the error handler
// answers, and the handler's own response is discarded.
func (w *sessionWriter) commit() {
	w.once.Do(func() {
		w.committed = true
		reason := w.store.needsSave(w.req, w.Header(), w.session, w.opts.TouchInterval, &w.stored)
		if reason == saveChange {
			w.stored = nil // what is stored is about to change
		}
		if reason != noSave {
			err := w.save(w.ResponseWriter)
			if err != nil && reason == saveTouch && errors.Is(err, ErrSessionGone) {
				err = nil // ended elsewhere; this request changed nothing, so let it through
			}
			if err != nil {
				w.failed = true
				h := w.ResponseWriter.Header()
				for k := range h {
					delete(h, k) // drop what the handler set for its own response
				}
				for k, v := range w.baseHeader {
					h[k] = v
				}
				w.opts.ErrorHandler(w.ResponseWriter, w.req, err)
				return
			}
		}
		// The handler may have saved the session itself (Save, RegenerateID).
		if setsCookie(w.Header(), w.session.Name()) {
			preventSharedCaching(w.Header())
		}
	})
}

// save saves the session into rw. Store.Save outlives a client that goes
// away, bounded by Config.Timeout.
func (w *sessionWriter) save(rw http.ResponseWriter) error {
	return w.store.Save(w.req, rw, w.session)
}

// setsCookie reports whether h sets the cookie called name.
func setsCookie(h http.Header, name string) bool {
	for _, line := range h.Values("Set-Cookie") {
		if c, err := http.ParseSetCookie(line); err == nil && c.Name == name {
			return true
		}
	}
	return false
}

// preventSharedCaching makes a response that sets a cookie uncacheable by
// shared caches, keeping a handler's stricter setting.
func preventSharedCaching(h http.Header) {
	cc := strings.ToLower(h.Get("Cache-Control"))
	if strings.Contains(cc, "no-store") || strings.Contains(cc, "private") {
		return
	}
	h.Set("Cache-Control", "no-store")
}

// errResponseDiscarded is returned by Write after a failed save, so that
// handlers stop writing.
var errResponseDiscarded = errors.New("mongostore: response discarded: the session could not be saved")

// WriteHeader saves the session, if needed, before the status line and
// headers go out. Informational (1xx) statuses pass straight through.
func (w *sessionWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code) // informational: headers are not final yet
		return
	}
	w.commit()
	if w.failed {
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write saves the session, if needed, before the first byte goes out.
func (w *sessionWriter) Write(b []byte) (int, error) {
	w.commit()
	if w.failed {
		return 0, errResponseDiscarded
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom keeps the underlying writer's fast path (sendfile) available.
func (w *sessionWriter) ReadFrom(src io.Reader) (int64, error) {
	w.commit()
	if w.failed {
		return 0, errResponseDiscarded
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(w.ResponseWriter, src)
}

// FlushError saves the session if needed and flushes the response, for
// http.ResponseController.
func (w *sessionWriter) FlushError() error {
	w.commit()
	if w.failed {
		return errResponseDiscarded
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (w *sessionWriter) Flush() { _ = w.FlushError() }

// Hijack lets a handler take over the connection (WebSockets), for code
// that asserts http.Hijacker. Changes to the session are still stored when
// the handler returns, but no cookie can be sent any more: a new session is
// not stored.
func (w *sessionWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.once.Do(func() { w.committed = true }) // no response (and no cookie) will be written
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *sessionWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
