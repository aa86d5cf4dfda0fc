package mongostore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gorilla/sessions"
)

// Middleware returns net/http middleware that loads the session called name
// for each request (handlers get it with store.Get) and saves it if changed
// just before the response headers go out; a later change is still saved,
// but not a new session's nor a changed ID's, which would need a cookie
// (logged). An unchanged session is rewritten once per Config.TouchInterval,
// to slide its expiry. If a load or save fails, onError answers instead of
// the handler (the response keeps the cookies of the sessions saved before),
// err wrapping ErrDatabase, ErrSessionGone, ErrConflict, ErrLocked,
// ErrEncode or ErrInvalidConfig; nil logs and answers 409 for ErrSessionGone
// and ErrConflict, 503 for ErrLocked, else 500. Responses vary by Cookie;
// one that sets it is kept out of shared caches. A save that could not apply
// Config.MaxSessionsPerOwner (ErrLimit) is logged: the session is saved.
// With Exclusive, the requests of one session run one at a time
// (exclusive.go); onError gets ErrLocked for one that waited too long (nil
// answers 503). Inside another middleware of the session (a site-wide one
// around a route's), it leaves the session to that one, taking its lock
// first with Exclusive. A name browsers would not send back, or a nil
// handler, panics. Put http.TimeoutHandler outside it, not inside: a handler
// outrunning its timeout would change the session as it is saved.
func (s *Store) Middleware(name string, onError func(w http.ResponseWriter, r *http.Request, err error), opts ...MiddlewareOption) func(http.Handler) http.Handler {
	if err := checkCookieName(name); err != nil {
		panic(err.Error()) // as http.ServeMux does for a bad pattern: a mistake in the program
	}
	if onError == nil {
		onError = s.answerError
	}
	var o middlewareOptions
	for _, opt := range opts {
		opt(&o)
	}
	var loader sessions.Store = middlewareLoader{Store: s, exclusive: o.exclusive} // made an interface once, not per request
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("mongostore: Middleware: nil handler")
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			session, err := sessions.GetRegistry(r).Get(loader, name)
			if enclosed(w, session) { // another middleware of the session loaded it, and saves it
				s.nested(w, r, session, o.exclusive, onError, next)
				return
			}
			w.Header().Add("Vary", "Cookie")
			if err := s.serves(r, name, session, err, o.exclusive); err != nil {
				onError(w, r, err)
				return
			}
			defer s.finished(r.Context(), session) // even if the handler panics
			sw := &sessionWriter{ResponseWriter: w, store: s, req: r, session: session, onError: onError}
			sw.baseHeader = snapshot(sw.baseFields[:0], w.Header())
			next.ServeHTTP(sw, r)
			sw.finish()
		})
	}
}

// enclosed reports whether w is, or wraps, the writer of a middleware that
// loaded session: one wrapping the whole site, say, around a route's.
func enclosed(w http.ResponseWriter, session *sessions.Session) bool {
	for w := range writers(w) {
		if sw, ok := w.(*sessionWriter); ok && sw.session == session {
			return true
		}
	}
	return false
}

// serves returns what stops the middleware serving session, loaded with
// err: nothing for a cookie it could not use, nor for a stored session it
// cannot read (lost, not an outage: logged); else err, or adopt's error.
func (s *Store) serves(r *http.Request, name string, session *sessions.Session, err error, exclusive bool) error {
	switch {
	case err == nil || errors.Is(err, ErrInvalidCookie):
	case errors.Is(err, ErrDecode):
		s.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "mongostore: discarding an unreadable session",
			slog.String("session", name), slog.String("error", err.Error()))
	default:
		return err
	}
	return s.adopt(r, session, exclusive)
}

// adopt makes session the middleware's unless its loader loaded it (code
// before the middleware called Get: gorilla's registry then returns that
// session): it holds its lock if exclusive, and saves and releases it.
func (s *Store) adopt(r *http.Request, session *sessions.Session, exclusive bool) error {
	if managed, known := s.states.managed(session); managed || !known { // no state: nothing loaded, nothing to lock
		return nil
	}
	if exclusive {
		if _, err := s.Lock(r, session); err != nil {
			return err
		}
	}
	s.states.manage(session)
	return nil
}

// nested serves a request whose session an enclosing middleware saves and
// releases, taking its lock first if exclusive: the lock is the enclosing
// middleware's to release.
func (s *Store) nested(w http.ResponseWriter, r *http.Request, session *sessions.Session, exclusive bool,
	onError func(http.ResponseWriter, *http.Request, error), next http.Handler) {
	if exclusive {
		if _, err := s.Lock(r, session); err != nil { // the enclosing middleware releases the lock after its save
			onError(w, r, err)
			return
		}
	}
	next.ServeHTTP(w, r)
}

// answerError is the middleware's default error handler.
func (s *Store) answerError(w http.ResponseWriter, r *http.Request, err error) {
	log, path := s.cfg.Logger, slog.String("path", r.URL.Path)
	switch {
	case errors.Is(err, ErrSessionGone):
		log.LogAttrs(r.Context(), slog.LevelInfo, "mongostore: session ended during the request", path)
		http.Error(w, "Your session ended while this request ran. Please reload the page.", http.StatusConflict)
	case errors.Is(err, ErrConflict):
		log.LogAttrs(r.Context(), slog.LevelWarn, "mongostore: session changed by concurrent requests", path, slog.String("error", err.Error()))
		http.Error(w, "Your session changed in other requests while this one ran. Please try again.", http.StatusConflict)
	case errors.Is(err, ErrLocked):
		log.LogAttrs(r.Context(), slog.LevelWarn, "mongostore: the session stayed locked by another request", path)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Another request of your session is still running. Please try again.", http.StatusServiceUnavailable)
	default:
		log.LogAttrs(r.Context(), slog.LevelError, "mongostore: session middleware",
			slog.String("method", r.Method), path, slog.String("error", err.Error()))
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
	}
}

// sessionWriter saves the session before the response starts.
type sessionWriter struct {
	http.ResponseWriter
	store      *Store
	req        *http.Request
	session    *sessions.Session
	onError    func(http.ResponseWriter, *http.Request, error)
	baseHeader []headerField  // as before the handler ran (its values shared), restored on a failed save
	baseFields [4]headerField // room for baseHeader's fields
	kept       []string       // the Set-Cookie values of the saves that went through it, kept on a failed save

	once       sync.Once
	committed  atomic.Bool // the response may have started
	failed     bool        // the save failed and onError answered
	stored     map[any]any // the values of storedFrom, decoded once if need be (see changed)
	storedFrom []byte      // the stored encoding stored was decoded from
	encoded    []byte      // the values as the change check encoded them, for the save
}

// headerField is a response header's field: its canonical key, its values.
type headerField struct {
	key    string
	values []string
}

// snapshot appends h's fields to fields, sharing their values.
func snapshot(fields []headerField, h http.Header) []headerField {
	for k, v := range h {
		fields = append(fields, headerField{k, v})
	}
	return fields
}

// finished releases what a request held of session: the lock it may hold
// (exclusive.go), and the encoded values its state keeps.
func (s *Store) finished(ctx context.Context, session *sessions.Session) {
	if chain, lock := s.states.release(session); lock != "" {
		s.release(ctx, chain, lock)
	}
}

// due says whether the session, in state st, is to be written now, and
// whether only to slide its expiry forward (touch).
func (w *sessionWriter) due(st sessionState) (write, touch bool) {
	if w.mustWrite(st) {
		return true, false
	}
	idle, interval := w.store.idleTimeout(st.options.MaxAge), w.store.cfg.TouchInterval
	if interval == 0 {
		interval = min(idle/10, maxTouchInterval)
	}
	interval = min(interval, idle/2) // a longer one would let an active session expire
	touch = st.id != "" && interval > 0 && !w.store.cfg.Now().Before(st.updatedAt.Add(interval))
	return touch, touch
}

// mustWrite reports whether the session is to end or changed. A new, empty
// session is not worth a cookie.
func (w *sessionWriter) mustWrite(st sessionState) bool {
	session := w.session
	w.encoded = nil
	if session.Options != nil && session.Options.MaxAge < 0 {
		if st.id != "" || len(st.others) > 0 {
			return true
		}
		// An unusable cookie is worth expiring, once.
		_, err := w.req.Cookie(session.Name())
		return err == nil && !st.cookieSet
	}
	if st.id == "" {
		return len(session.Values) > 0
	}
	return session.ID != st.token || (session.Options != nil && *session.Options != st.options) || w.changed(st)
}

// changed reports whether the values differ from st.encoded: neither their
// encodings nor (a codec may encode equal values differently, unless the
// encoding is canonical) the values decoded from it are equal.
func (w *sessionWriter) changed(st sessionState) bool {
	codec, buf := w.store.cfg.Codec, w.store.lendBuffer()
	defer w.store.buffers.Put(buf)
	if canonical(codec, st.encoded) && encodesTo(buf[:0], st.encoded, w.session.Values) {
		return false
	}
	enc, err := w.encode(buf[:0])
	if err != nil {
		return true // the save reports the error
	}
	if bytes.Equal(enc, st.encoded) {
		return false
	}
	w.encoded = bytes.Clone(enc) // for the save: the state keeps it, and buf goes back
	if canonical(codec, enc) {
		return true
	}
	if w.stored == nil || !bytes.Equal(w.storedFrom, st.encoded) { // decoded before a save the handler made
		if w.stored, err = codec.Decode(st.encoded); err != nil {
			return true
		}
		w.storedFrom = st.encoded
	}
	return !reflect.DeepEqual(w.stored, w.session.Values)
}

// encode encodes the session's values, appending to buf if the codec can:
// an unchanged session's check allocates nothing.
func (w *sessionWriter) encode(buf []byte) ([]byte, error) {
	if c, ok := w.store.cfg.Codec.(compactCodec); ok {
		return c.appendEncode(buf, w.session.Values)
	}
	return w.store.cfg.Codec.Encode(w.session.Values)
}

// lendBuffer lends a change check the buffer it encodes into; it goes back
// to s.buffers.
func (s *Store) lendBuffer() *[encodeBufferSize]byte {
	if buf, ok := s.buffers.Get().(*[encodeBufferSize]byte); ok {
		return buf
	}
	return new([encodeBufferSize]byte)
}

// commit saves the session if need be, once; on failure onError answers.
func (w *sessionWriter) commit() {
	w.once.Do(func() {
		w.committed.Store(true)
		st := w.store.states.get(w.session)
		if write, touch := w.due(st); write {
			if !w.save(touch) {
				return
			}
			st = w.store.states.get(w.session)
		}
		varyByCookie(w.Header()) // again: the handler may have replaced Vary
		if st.cookieSet {
			preventSharedCaching(w.Header()) // the cookie is set, by this save or the handler's own
		}
	})
}

// save saves the session before the response starts. If that fails, but
// for a touch, onError answers instead of the handler, and save reports
// false.
func (w *sessionWriter) save(touch bool) bool {
	w.stage()
	err := w.store.Save(w.req, w.ResponseWriter, w.session)
	if errors.Is(err, ErrLimit) { // the session is saved
		w.logLimit(err)
		err = nil
	}
	if err != nil && !touch {
		w.failed = true
		w.restoreHeader()
		w.onError(w.ResponseWriter, w.req, err)
		return false
	}
	if err != nil && !errors.Is(err, ErrSessionGone) { // a touch: the handler's response stands
		w.store.cfg.Logger.LogAttrs(w.req.Context(), slog.LevelWarn, "mongostore: could not slide the session's expiry",
			slog.String("session", w.session.Name()), slog.String("error", err.Error()))
	}
	return true
}

// restoreHeader drops what the handler set for its own response, but the
// cookies of sessions saved meanwhile (a RegenerateID's): their documents
// stay as saved.
func (w *sessionWriter) restoreHeader() {
	h := w.ResponseWriter.Header()
	kept := slices.DeleteFunc(slices.Clone(h["Set-Cookie"]), func(v string) bool { return !slices.Contains(w.kept, v) })
	clear(h)
	for _, f := range w.baseHeader {
		h[f.key] = f.values
	}
	if len(kept) > 0 {
		h["Set-Cookie"] = append(slices.Clip(h["Set-Cookie"]), kept...) // the snapshot's values stay as they were
		preventSharedCaching(h)
	}
}

// keepCookie keeps field, a Set-Cookie value that a save through w set, on
// a failed save (which can only come before the response starts).
func (w *sessionWriter) keepCookie(field string) {
	if !w.committed.Load() {
		w.kept = append(w.kept, field)
	}
}

// finish saves what changed after the response started, when the handler
// returns (a new session cannot get its cookie then: that is logged).
func (w *sessionWriter) finish() {
	if !w.committed.Load() {
		w.commit()
		return
	}
	st := w.store.states.get(w.session)
	if w.failed || !w.mustWrite(st) {
		return
	}
	log := w.store.cfg.Logger
	ending := w.session.Options != nil && w.session.Options.MaxAge < 0
	if st.id == "" && !ending {
		log.LogAttrs(w.req.Context(), slog.LevelWarn, "mongostore: new session changed after the response started; not saved (save it before writing the response)",
			slog.String("session", w.session.Name()), slog.String("path", w.req.URL.Path))
		return
	}
	w.stage()
	switch err := w.store.Save(w.req, discardHeaders{}, w.session); {
	case errors.Is(err, ErrLimit):
		w.logLimit(err)
	case errors.Is(err, ErrSessionGone): // a logout elsewhere won, as it always does: no failure
		log.LogAttrs(w.req.Context(), slog.LevelInfo, "mongostore: session ended during the request; its change after the response is dropped",
			slog.String("session", w.session.Name()), slog.String("path", w.req.URL.Path))
	case err != nil:
		log.LogAttrs(w.req.Context(), slog.LevelError, "mongostore: saving the session after the response",
			slog.String("session", w.session.Name()), slog.String("path", w.req.URL.Path), slog.String("error", err.Error()))
	}
}

// logLimit logs err, an ErrLimit of a save: the session is saved.
func (w *sessionWriter) logLimit(err error) {
	w.store.cfg.Logger.LogAttrs(w.req.Context(), slog.LevelError, "mongostore: session saved, but not the per-owner limit",
		slog.String("session", w.session.Name()), slog.String("error", err.Error()))
}

// stage hands the store the encoding the change check made, if any, for
// the save that follows at once: the values are not encoded twice.
func (w *sessionWriter) stage() {
	if w.encoded != nil {
		w.store.states.stage(w.session, w.encoded)
	}
}

// discardHeaders is a ResponseWriter for saves after the response has gone.
type discardHeaders struct{}

func (discardHeaders) Header() http.Header         { return http.Header{} }
func (discardHeaders) Write(b []byte) (int, error) { return len(b), nil }
func (discardHeaders) WriteHeader(int)             {}
func (discardHeaders) responseStarted() bool       { return true } // a new cookie is refused, not lost

// varyByCookie adds Cookie to h's Vary unless it names it (or "*").
func varyByCookie(h http.Header) {
	for _, v := range h["Vary"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, "Cookie") {
				return
			}
		}
	}
	h.Add("Vary", "Cookie")
}

// preventSharedCaching keeps a response out of shared caches.
func preventSharedCaching(h http.Header) {
	cc := strings.ToLower(h.Get("Cache-Control"))
	if !strings.Contains(cc, "no-store") && !strings.Contains(cc, "private") {
		h.Set("Cache-Control", "no-store")
	}
}

// WriteHeader saves the session, if need be, before the status line (1xx
// pass straight through).
func (w *sessionWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if w.commit(); !w.failed {
		w.ResponseWriter.WriteHeader(code)
	}
}

// Write saves the session, if need be, before the first byte.
func (w *sessionWriter) Write(b []byte) (int, error) {
	if w.commit(); w.failed {
		return 0, ErrResponseDiscarded
	}
	return w.ResponseWriter.Write(b)
}

// WriteString saves the session, if need be, and writes s without copying
// it where the underlying writer can.
func (w *sessionWriter) WriteString(s string) (int, error) {
	if w.commit(); w.failed {
		return 0, ErrResponseDiscarded
	}
	return io.WriteString(w.ResponseWriter, s)
}

// ReadFrom keeps the underlying writer's fast path (sendfile).
func (w *sessionWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.commit(); w.failed {
		return 0, ErrResponseDiscarded
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(w.ResponseWriter, src)
}

// FlushError saves the session if need be and flushes.
func (w *sessionWriter) FlushError() error {
	if w.commit(); w.failed {
		return ErrResponseDiscarded
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (w *sessionWriter) Flush() { _ = w.FlushError() }

// Hijack lets a handler take over the connection (WebSockets). A failed
// one leaves the response to come, and its save, as they were; after a
// failed save, it is refused.
func (w *sessionWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.failed { // onError has answered
		return nil, nil, ErrResponseDiscarded
	}
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.once.Do(func() { w.committed.Store(true) })
	}
	return conn, rw, err
}

// Push pushes target over HTTP/2 where a writer it wraps can (else
// http.ErrNotSupported); it does not start the response.
func (w *sessionWriter) Push(target string, opts *http.PushOptions) error {
	for u := range writers(w.ResponseWriter) {
		if p, ok := u.(http.Pusher); ok {
			return p.Push(target, opts)
		}
	}
	return http.ErrNotSupported
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *sessionWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// responseStarted tells Save that a cookie set now would not be sent.
func (w *sessionWriter) responseStarted() bool { return w.committed.Load() }
