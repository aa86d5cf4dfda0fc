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
	"strings"
	"sync"
	"time"

	"github.com/gorilla/sessions"
)

// saveReason says why the middleware writes a session.
type saveReason int

const (
	noSave     saveReason = iota
	saveChange            // values or options changed, or the session is deleted
	saveTouch             // unchanged, but its expiry is due to slide forward
)

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

	// at is the request's instant: the time its save writes.
	at time.Time

	once      sync.Once
	committed bool // commit has run: the response may have started
	failed    bool // the save failed and the error handler answered
	// stored caches the stored values, decoded once for changed (when the
	// codec's encodings cannot be compared); nil until then, and again once
	// a save replaces them.
	stored map[any]any
	// encoded is the session's values as encoded by the last change check,
	// which the save then writes instead of encoding them again.
	encoded []byte
}

// saveReason says whether the session is to be written when the response
// starts: it changed (or is to be deleted), or its expiry is due to slide.
func (w *sessionWriter) saveReason() saveReason {
	if w.mustWrite() {
		return saveChange
	}
	st, ok := w.store.states.get(w.session)
	if !ok {
		return noSave
	}
	touch := w.opts.TouchInterval
	if touch == 0 {
		touch = min(w.store.idleTimeout(w.session.Options)/10, MaxTouchInterval)
	}
	if touch > 0 && !w.store.cfg.Now().Before(st.savedAt.Add(touch)) {
		return saveTouch
	}
	return noSave
}

// mustWrite reports whether the session changed since it was last read or
// written, or is to be deleted (or its stale cookie expired, unless the
// response already does). A new, empty session is not worth a cookie.
func (w *sessionWriter) mustWrite() bool {
	w.encoded = nil // from an earlier check: the values may have changed since
	session := w.session
	st, stored := w.store.states.get(session)
	if session.Options != nil && session.Options.MaxAge < 0 {
		if stored || session.ID != "" {
			return true
		}
		// An unusable cookie is still worth expiring, once.
		_, err := w.req.Cookie(session.Name())
		return err == nil && !setsCookie(w.Header(), session.Name())
	}
	if !stored {
		return len(session.Values) > 0
	}
	return (session.Options != nil && *session.Options != st.options) || w.changed(st)
}

// changed reports whether the session's values differ from what was last
// read or written (st.encoded). With CompactCodec's deterministic form it
// compares encodings, and keeps the new one for the save. Otherwise
// (another codec, or values only gob can encode, which writes maps in
// random order) it compares the values with the stored bytes decoded, once
// per request. A value that merely looks changed (a NaN, an empty slice gob
// reads as nil) costs one needless write, never a lost change.
func (w *sessionWriter) changed(st sessionState) bool {
	if cc, ok := w.store.cfg.Codec.(CompactCodec); ok && cc.deterministic(st.encoded) {
		buf := w.store.encodeBuffer()
		enc, err := cc.AppendEncode((*buf)[:0], w.session.Values)
		if err != nil {
			w.store.buffers.Put(buf)
			return true // the save reports the error
		}
		if bytes.Equal(enc, st.encoded) {
			*buf = enc
			w.store.buffers.Put(buf) // unchanged: nothing keeps it
			return false
		}
		w.encoded = enc // the save writes it, and the session state keeps it
		return true
	}
	if w.stored == nil {
		old, err := w.store.cfg.Codec.Decode(st.encoded)
		if err != nil {
			return true
		}
		w.stored = old
	}
	return !reflect.DeepEqual(w.stored, w.session.Values)
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
	if w.failed || !w.mustWrite() {
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
	return w.saveReason() != noSave
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
		reason := w.saveReason()
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

// save saves the session into rw, as Store.Save does (outliving a client
// that goes away, bounded by Config.Timeout), with the encoding the change
// check made, if any.
func (w *sessionWriter) save(rw http.ResponseWriter) error {
	return w.store.write(w.req, rw, w.session, func(ctx context.Context, rw http.ResponseWriter, session *sessions.Session) error {
		return w.store.save(ctx, rw, session, w.encoded)
	})
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
