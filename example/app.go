package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
)

// Names of the cookies and of the session values.
const (
	sessionName = "session"      // the mongostore session: who is logged in
	flashName   = "flash"        // a cookie-only session for messages that outlive a logout
	hintName    = "session-hint" // when the logged-in session expires if unused (see ended.go)
	userKey     = "user"         // session value: the logged-in user's name

	// hostPrefix starts the cookies' names when they are Secure: browsers
	// then accept them only if Secure, with Path "/" and no Domain, so that
	// neither a sibling subdomain nor plain HTTP can plant or overwrite them.
	hostPrefix = "__Host-"
)

// Request limits and timeouts of the handlers.
const (
	maxFormBytes = 4 << 10
	pingTimeout  = 2 * time.Second
	flashMaxAge  = 60 // seconds a flash cookie lives if nobody reads it
	cssCacheAge  = 300
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/style.css
var staticFS embed.FS

// appOptions are what newApp needs.
type appOptions struct {
	// Store keeps the sessions. Its Options.MaxAge must be set. With
	// Options.Secure, the cookies are Secure too and their names get the
	// __Host- prefix (the store checks the options that prefix needs).
	Store *mongostore.Store
	// Users are the accounts that may log in.
	Users *userDB
	// SessionKey is the key of the session cookies; the flash cookies are
	// signed with a key derived from it.
	SessionKey []byte
	// Ping checks that the database answers, for /healthz.
	Ping func(context.Context) error
	// Logger receives the app's logs.
	Logger *slog.Logger
	// Server describes the database server for the home page, without
	// credentials: "MongoDB at host:port", for example.
	Server string
	// Expiry is how expired sessions are deleted (ExpiryTTL or ExpiryGC:
	// what the store chose), for the home page.
	Expiry mongostore.ExpiryMode
	// Metrics, if not nil, serves GET /metrics.
	Metrics http.Handler
	// Absolute is the store's Config.AbsoluteTimeout, which must be set
	// (not zero), for the home page: how long a session lives from its
	// creation at most; negative for no limit.
	Absolute time.Duration
	// Activity is the activity log of the page of sessions, which the
	// store's Config.OnEvent (its record method) feeds.
	Activity *activityLog
	// MaxSessionsPerUser is the store's Config.MaxSessionsPerOwner, for
	// the page of sessions; 0 for no limit.
	MaxSessionsPerUser int
}

// app holds the handlers' dependencies.
type app struct {
	store       *mongostore.Store
	sessionName string // the session cookie's name: sessionName, maybe prefixed
	flashName   string // the flash cookie's name: flashName, maybe prefixed
	hintName    string // the hint cookie's name: hintName, maybe prefixed
	secure      bool   // the cookies are Secure (COOKIE_SECURE)
	flashes     *sessions.CookieStore
	users       *userDB
	ping        func(context.Context) error
	logger      *slog.Logger
	server      string
	expiry      mongostore.ExpiryMode
	absolute    time.Duration
	activity    *activityLog
	limit       int // sessions per user; 0 for no limit
	pages       map[string]*template.Template
}

// newApp returns the app's HTTP handler:
//
//	GET  /login                the login form (or a redirect to the page asked for when logged in)
//	POST /login                checks the form; 303 to the page asked for (the field next) or /, 422 with the form otherwise
//	GET  /                     the logged-in user and what the store keeps of the session; 303 to /login otherwise
//	POST /logout               deletes the session and its cookie; 303 to /login
//	GET  /sessions             the user's sessions on all their devices; 303 to /login?next=/sessions otherwise
//	POST /sessions/end         ends the user's session named by the form field handle; 303 to /sessions
//	POST /sessions/end-others  ends all the user's sessions but this one; 303 to /sessions
//	GET  /healthz              200 when the database answers a ping, 503 otherwise
//	GET  /metrics              the metrics, in the Prometheus text format (if opts.Metrics)
//	GET  /static/style.css
//
// Any other path gets the 404 page, in the app's layout (a path above with
// another method, the 405 page). A session cookie that leads to no live
// session is expired in the response that finds it, with a notice that
// says why (ended.go). Cross-origin POSTs are refused with 403
// (http.CrossOriginProtection), and every response carries security
// headers.
func newApp(opts appOptions) (http.Handler, error) {
	if opts.Store == nil || opts.Users == nil || opts.Ping == nil || opts.Logger == nil || opts.Activity == nil {
		return nil, errors.New("newApp: Store, Users, Ping, Logger and Activity are required")
	}
	if len(opts.SessionKey) < minKeyBytes {
		return nil, fmt.Errorf("newApp: SessionKey has %d bytes, want at least %d", len(opts.SessionKey), minKeyBytes)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	a := &app{
		store:       opts.Store,
		sessionName: sessionName,
		flashName:   flashName,
		hintName:    hintName,
		secure:      opts.Store.Options.Secure,
		flashes:     newFlashStore(opts.SessionKey, opts.Store.Options.Secure),
		users:       opts.Users,
		ping:        opts.Ping,
		logger:      opts.Logger,
		server:      opts.Server,
		expiry:      opts.Expiry,
		absolute:    opts.Absolute,
		activity:    opts.Activity,
		limit:       opts.MaxSessionsPerUser,
		pages:       pages,
	}
	if opts.Store.Options.Secure {
		a.sessionName, a.flashName, a.hintName = hostPrefix+sessionName, hostPrefix+flashName, hostPrefix+hintName
	}
	csrf := http.NewCrossOriginProtection()
	csrf.SetDenyHandler(http.HandlerFunc(a.crossOriginDenied))
	return securityHeaders(csrf.Handler(a.routes(opts.Metrics))), nil
}

// newFlashStore returns the store of the flash cookies, signed with a key
// derived from the session key, Secure when the session cookie is.
func newFlashStore(sessionKey []byte, secure bool) *sessions.CookieStore {
	flashes := sessions.NewCookieStore(deriveKey(sessionKey, "flash cookie"))
	flashes.Options = &sessions.Options{
		Path:     "/",
		MaxAge:   flashMaxAge,
		HttpOnly: true,
		Secure:   secure,
		SameSite: http.SameSiteLaxMode,
	}
	flashes.MaxAge(flashMaxAge)
	return flashes
}

// routes returns the app's routes (see newApp); metrics, if not nil,
// serves GET /metrics.
func (a *app) routes(metrics http.Handler) *http.ServeMux {
	// A session that is only read is written again (to slide its expiry)
	// once per touch interval (Config.TouchInterval): by default a tenth of
	// its max age, at most a minute. A nil error handler logs a failed load
	// or save and answers 500 (409 for a session ended meanwhile).
	// Each request has its eventScope (see withEventScope) for the
	// store's events of its operations.
	middleware := a.store.Middleware(a.sessionName, nil)
	withSession := func(h http.Handler) http.Handler { return withEventScope(middleware(h)) }
	mux := http.NewServeMux()
	mux.Handle("GET /login", withSession(http.HandlerFunc(a.loginForm)))
	mux.Handle("POST /login", withSession(http.HandlerFunc(a.login)))
	mux.Handle("GET /{$}", withSession(http.HandlerFunc(a.home)))
	logoutMiddleware := a.store.Middleware(a.sessionName, a.logoutFailed)
	mux.Handle("POST /logout", withEventScope(logoutMiddleware(http.HandlerFunc(a.logout))))
	mux.Handle("GET /sessions", withSession(http.HandlerFunc(a.sessionList)))
	mux.Handle("POST /sessions/end", withSession(http.HandlerFunc(a.endSession)))
	mux.Handle("POST /sessions/end-others", withSession(http.HandlerFunc(a.endOtherSessions)))
	mux.HandleFunc("GET /healthz", a.healthz)
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("GET /static/style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", cssCacheAge))
		http.ServeFileFS(w, r, staticFS, "static/style.css")
	})
	mux.Handle("/", a.notFound(mux))
	return mux
}

// notFound answers the requests that no other route of mux takes: the 404
// page, or the 405 page with the Allow header for a path that routes serve
// with other methods only (what mux would answer without this catch-all,
// in the app's layout).
func (a *app) notFound(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			page := methodPage{FormOnly: !slices.Contains(allow, http.MethodGet), Allow: allow}
			a.render(w, http.StatusMethodNotAllowed, "method", page)
			return
		}
		a.render(w, http.StatusNotFound, "notfound", notFoundPage{})
	})
}

// allowedMethods returns the methods for which a route of mux other than
// the catch-all "/" serves the path of r.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		probe := &http.Request{Method: method, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := mux.Handler(probe); pattern == "" || pattern == "/" {
			continue
		}
		allow = append(allow, method)
		if method == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	return allow
}

// parsePages parses each page's template together with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		// datetime is for machines (RFC 3339), human for people (local time).
		"datetime": func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") },
		"human":    func(t time.Time) string { return t.Local().Format("Mon 2 Jan 2006 15:04:05 MST") },
		"until":    func(t time.Time) string { return humanDuration(time.Until(t)) },
		// breakAfterSlashes lets a path wrap after a slash (<wbr>) rather
		// than inside a directory's name.
		"breakAfterSlashes": breakAfterSlashes,
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"login", "home", "sessions", "notfound", "method"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parse template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// breakAfterSlashes returns s, HTML-escaped, with a line break opportunity
// (<wbr>) after each slash but a path's first, so that a long path wraps
// between the names of its directories.
func breakAfterSlashes(s string) template.HTML {
	var b strings.Builder
	for i, part := range strings.Split(s, "/") {
		if i > 0 {
			b.WriteString("/")
			if !strings.HasSuffix(b.String(), " /") && b.Len() > 1 {
				b.WriteString("<wbr>")
			}
		}
		b.WriteString(template.HTMLEscapeString(part))
	}
	return template.HTML(b.String())
}

// deriveKey derives a key for purpose from key, so that one configured
// secret serves several uses without any two sharing a key.
func deriveKey(key []byte, purpose string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("mongostore example: " + purpose))
	return m.Sum(nil)
}

// loginPage is the data of the login page.
type loginPage struct {
	Flashes  []flash
	Username string
	Error    string
	// Next is the page to return to after the login, a path of this site
	// (see returnTo); "" for the home page.
	Next string
}

// notFoundPage is the data of the 404 page.
type notFoundPage struct {
	Flashes []flash // none: the layout shows them
}

// methodPage is the data of the 405 page.
type methodPage struct {
	Flashes []flash // none: the layout shows them
	// FormOnly says the path takes forms only (POST): the app's buttons
	// send them, and typing its address in opens nothing.
	FormOnly bool
	// Allow are the methods the path takes, as the Allow header lists them.
	Allow []string
}

// homePage is the data of the page of a logged-in user.
type homePage struct {
	Flashes  []flash
	Username string
	// Times are the session's times as stored.
	Times mongostore.SessionTimes
	// AbsoluteExpiresAt is when the session ends however active: its
	// creation plus the store's absolute timeout; zero for no limit.
	AbsoluteExpiresAt time.Time
	// Expiry is the store's expiry mode ("ttl", "gc"), ExpiryHow what it
	// means.
	Expiry, ExpiryHow string
	// Server describes the database server.
	Server string
}

// describeExpiry names an expiry mode, for the log and the home page, and
// says for people what it does.
func describeExpiry(m mongostore.ExpiryMode) (name, how string) {
	switch m {
	case mongostore.ExpiryTTL:
		how = "the server's TTL index deletes expired sessions"
	case mongostore.ExpiryGC:
		how = "the app's GC goroutine deletes expired sessions"
	case mongostore.ExpiryNone:
		how = "nothing deletes expired sessions (the store still refuses them)"
	default:
		how = "chosen by the store"
	}
	return m.String(), how
}

// humanDuration formats d, rounded to the minute, for people: "6d23h59m",
// "23h", "5m", or "less than a minute".
func humanDuration(d time.Duration) string {
	d = d.Round(time.Minute)
	if d < time.Minute {
		return "less than a minute"
	}
	const day = 24 * time.Hour
	var b strings.Builder
	for _, u := range []struct {
		unit   time.Duration
		suffix string
	}{{day, "d"}, {time.Hour, "h"}, {time.Minute, "m"}} {
		if n := d / u.unit; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.suffix)
			d -= n * u.unit
		}
	}
	return b.String()
}

// loginForm serves GET /login. The query's next is the page to return to
// after the login.
func (a *app) loginForm(w http.ResponseWriter, r *http.Request) {
	sess := a.session(r)
	next := returnTo(r.URL.Query().Get("next"))
	if _, ok := sess.Values[userKey].(string); ok {
		http.Redirect(w, r, cmpOr(next, "/"), http.StatusSeeOther)
		return
	}
	flashes := append(a.takeFlashCookie(w, r), takeFlashes(sess)...)
	if notice, ok := a.deadSession(w, r); ok {
		flashes = append(flashes, notice)
	}
	a.render(w, http.StatusOK, "login", loginPage{Flashes: flashes, Next: next})
}

// login serves POST /login. The form's next is the page to return to.
func (a *app) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "Bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("username"))
	password := r.PostForm.Get("password")
	next := returnTo(r.PostForm.Get("next"))
	if len(name) > maxNameLen || !a.users.authenticate(name, password) {
		a.logger.Info("login failed") // no name or address: no user data in logs
		page := loginPage{Username: name, Error: "Wrong username or password.", Next: next}
		if notice, ok := a.deadSession(w, r); ok {
			page.Flashes = []flash{notice}
		}
		a.render(w, http.StatusUnprocessableEntity, "login", page) // not 401: that needs WWW-Authenticate, for HTTP authentication
		return
	}

	sess := a.session(r)
	// A login starts afresh: nothing of the anonymous session or of an
	// earlier user survives, and the session gets a new ID, which defeats
	// session fixation. Unlike RegenerateID, Restart does not fail when a
	// logout in another tab ended the old session meanwhile: the login
	// still gets its fresh session.
	if err := a.store.Restart(r, sess); err != nil {
		// Nothing is written under the old ID after a failed Restart.
		a.logger.Error("login: end the anonymous session", "error", err.Error())
		a.render(w, http.StatusServiceUnavailable, "login", loginPage{Username: name, Error: "Sorry, we could not log you in. Please try again.", Next: next})
		return
	}
	sess.Values[userKey] = name
	// The session belongs to the user, for their list of sessions
	// (/sessions), with a label of the device made from the User-Agent:
	// the kind of browser and system only.
	mongostore.SetOwner(sess, name, deviceLabel(r.UserAgent()))
	addFlash(sess, flash{kindSuccess, "Welcome, " + name + "!"}) // the page says who is logged in
	a.setHint(w, sess)
	// The middleware stores the session, under a fresh ID, and sets its
	// cookie before the redirect goes out.
	a.logger.Info("login")
	http.Redirect(w, r, cmpOr(next, "/"), http.StatusSeeOther)
}

// returnTo returns next, the page a login is to return to, if it is a
// path of this site other than the home page, else "". A path starts with
// one "/" and holds no backslash (browsers read "/\host" as "//host"), no
// space or control character (they drop a tab or a newline: "/\t/host"),
// no scheme and no host: anything else could send the user to another
// site after the login (an open redirect).
func returnTo(next string) string {
	if len(next) < 2 || next[0] != '/' || next[1] == '/' || strings.ContainsFunc(next, func(r rune) bool {
		return r <= ' ' || r == 0x7f || r == '\\'
	}) {
		return ""
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return ""
	}
	return next
}

// loginURL returns the address of the login form that returns to the page
// of r after the login: its path and query, for a GET (or HEAD) of a page
// other than the home page.
func loginURL(r *http.Request) string {
	page := r.URL.RequestURI()
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || returnTo(page) == "" {
		return "/login"
	}
	// A "/" needs no escaping in a query: ?next=/sessions reads better.
	return "/login?next=" + strings.ReplaceAll(url.QueryEscape(page), "%2F", "/")
}

// home serves GET /.
func (a *app) home(w http.ResponseWriter, r *http.Request) {
	sess, name, ok := a.loggedIn(w, r)
	if !ok {
		return
	}
	flashes := takeFlashes(sess)

	// The middleware saves the session, if it must (the flashes were
	// taken, or its expiry is due to slide), as the header goes out.
	// Store.Times gives the times of the last load or save: asked once the
	// session is saved, it gives exactly what the document holds.
	setPageHeaders(w)
	w.WriteHeader(http.StatusOK)
	times, _ := a.store.Times(sess)
	mode, how := describeExpiry(a.expiry)
	page := homePage{
		Flashes:   flashes,
		Username:  name,
		Times:     times,
		Expiry:    mode,
		ExpiryHow: how,
		Server:    a.server,
	}
	if a.absolute >= 0 {
		page.AbsoluteExpiresAt = times.CreatedAt.Add(a.absolute)
	}
	err := a.pages["home"].ExecuteTemplate(w, "layout", page)
	if err != nil && !errors.Is(err, mongostore.ErrResponseDiscarded) { // else the save failed, and onError answered
		a.logger.Error("render home page", "error", err.Error())
	}
}

// session returns the request's session, which the middleware loaded: the
// store's Get returns the same session for the rest of the request. Get
// also returns the error of that load again, which the middleware has
// dealt with: a tampered or foreign cookie, or a document it cannot read,
// gives a new session, and a database failure never reaches the handler.
func (a *app) session(r *http.Request) *sessions.Session {
	sess, _ := a.store.Get(r, a.sessionName)
	return sess
}

// toLogin answers a request that needs a logged-in session, which the
// request has not, with a redirect to the login form, which returns to the
// page asked for. When the request came back with a session that ended,
// the form says why (see deadSession).
func (a *app) toLogin(w http.ResponseWriter, r *http.Request) {
	if notice, ok := a.deadSession(w, r); ok {
		a.addFlashCookie(w, r, notice)
	}
	http.Redirect(w, r, loginURL(r), http.StatusSeeOther)
}

// logout serves POST /logout.
func (a *app) logout(w http.ResponseWriter, r *http.Request) {
	sess := a.session(r)
	if _, ok := sess.Values[userKey].(string); ok {
		a.logger.Info("logout")
	}
	// The middleware deletes the document and expires the cookie (also a
	// cookie that led to no session: expired or tampered).
	sess.Options.MaxAge = -1
	a.clearHint(w)
	// The session is gone, so the message goes in a cookie of its own.
	a.addFlashCookie(w, r, flash{kindSuccess, "You have been logged out."})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// logoutFailed answers a logout whose session could not be loaded or
// ended (the database is down, say): this browser is signed out all the
// same, its cookies expired, and told that the session itself may live on
// until it expires.
func (a *app) logoutFailed(w http.ResponseWriter, r *http.Request, err error) {
	a.logger.Warn("logout: the session could not be ended; this browser's cookies are expired", "error", err.Error())
	opts := *a.store.Options
	opts.MaxAge = -1
	http.SetCookie(w, sessions.NewCookie(a.sessionName, "", &opts))
	a.clearHint(w)
	a.addFlashCookie(w, r, flash{kindWarning, "You have been logged out in this browser, but the server could not end the session now."})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// healthz serves GET /healthz.
func (a *app) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pingTimeout)
	defer cancel()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := a.ping(ctx); err != nil {
		a.logger.Warn("health check: database does not answer", "error", err.Error())
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "database unavailable")
		return
	}
	fmt.Fprintln(w, "ok")
}

// crossOriginDenied answers POSTs that http.CrossOriginProtection refuses.
func (a *app) crossOriginDenied(w http.ResponseWriter, r *http.Request) {
	a.logger.Warn("refused cross-origin request", "method", r.Method, "path", r.URL.Path,
		"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
	http.Error(w, "Forbidden: cross-origin request", http.StatusForbidden)
}

// render writes page with data and status. It renders into a buffer first,
// so that a template error gives a clean 500.
func (a *app) render(w http.ResponseWriter, status int, page string, data any) {
	var buf bytes.Buffer
	if err := a.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		a.logger.Error("render page", "page", page, "error", err.Error())
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	setPageHeaders(w)
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// setPageHeaders sets the headers of an HTML page about one user.
func setPageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
}

// Kinds of flash messages, which colour them: each is a CSS class.
const (
	kindSuccess = "success" // something the user asked for was done: green
	kindInfo    = "info"    // how things stand, nothing wrong: blue
	kindWarning = "warning" // something the user did not ask for happened: amber
)

// flash is a message for the next page the user sees.
type flash struct {
	Kind string // kindSuccess, kindInfo or kindWarning
	Text string
}

// addFlash adds f to the flash messages of sess (the session, or the flash
// cookie's), as a []string of its kind and text: a type that the store's
// codec and gob (the flash cookie's) encode with no registration.
func addFlash(sess *sessions.Session, f flash) {
	sess.AddFlash([]string{f.Kind, f.Text})
}

// takeFlashes takes the flash messages out of sess. A message stored as a
// bare string, by an earlier version of the app, is information.
func takeFlashes(sess *sessions.Session) []flash {
	var out []flash
	for _, f := range sess.Flashes() {
		switch f := f.(type) {
		case []string:
			if len(f) == 2 && slices.Contains([]string{kindSuccess, kindInfo, kindWarning}, f[0]) {
				out = append(out, flash{f[0], f[1]})
			}
		case string:
			out = append(out, flash{kindInfo, f})
		}
	}
	return out
}

// addFlashCookie adds a flash message to the flash cookie.
func (a *app) addFlashCookie(w http.ResponseWriter, r *http.Request, f flash) {
	fs, _ := a.flashes.Get(r, a.flashName) // an unreadable cookie gives a fresh session
	addFlash(fs, f)
	if err := fs.Save(r, w); err != nil {
		a.logger.Error("save flash cookie", "error", err.Error())
	}
}

// takeFlashCookie returns the messages of the flash cookie and deletes it.
func (a *app) takeFlashCookie(w http.ResponseWriter, r *http.Request) []flash {
	if _, err := r.Cookie(a.flashName); err != nil {
		return nil
	}
	fs, _ := a.flashes.Get(r, a.flashName)
	msgs := takeFlashes(fs)
	fs.Options.MaxAge = -1
	if err := fs.Save(r, w); err != nil {
		a.logger.Error("delete flash cookie", "error", err.Error())
	}
	return msgs
}

// securityHeaders sets headers that keep browsers from framing, sniffing or
// loading anything but the app's own style sheet.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; "+
			"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("X-Frame-Options", "DENY")
		hdr.Set("Referrer-Policy", "same-origin")
		hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
		hdr.Set("Cross-Origin-Resource-Policy", "same-origin")
		hdr.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
		h.ServeHTTP(w, r)
	})
}
