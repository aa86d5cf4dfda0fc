package ginstore_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gin-contrib/sessions"
	"github.com/gin-gonic/gin"
	"github.com/gorilla/securecookie"
	gsessions "github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/ginstore"
)

const sessionName = "mysession"

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// sessionApp is a gin app with a session: GET /set stores user=ada, GET
// /get answers the stored user (empty for none). Both answer 500 with the
// store's error if loading or saving fails, which gin-contrib would only log.
type sessionApp struct {
	store  *ginstore.Store
	router *gin.Engine

	// expiresAt is the session's server-side expiry after the last /set.
	expiresAt time.Time
}

func newSessionApp(t *testing.T, store *ginstore.Store) *sessionApp {
	t.Helper()
	app := &sessionApp{store: store, router: gin.New()}
	app.router.Use(sessions.Sessions(sessionName, store))
	app.router.GET("/set", func(c *gin.Context) {
		session := sessions.Default(c)
		session.Set("user", "ada")
		if err := session.Save(); err != nil {
			c.String(http.StatusInternalServerError, "save: %v", err)
			return
		}
		// The request's session, as gin-contrib loaded and saved it.
		saved, err := store.Get(c.Request, sessionName)
		if err != nil {
			c.String(http.StatusInternalServerError, "get: %v", err)
			return
		}
		times, ok := store.MongoStore().Times(saved)
		if !ok {
			c.String(http.StatusInternalServerError, "saved session has no expiry")
			return
		}
		app.expiresAt = times.ExpiresAt
		c.String(http.StatusOK, "ok")
	})
	app.router.GET("/get", func(c *gin.Context) {
		// Loads the session; gin-contrib gets the same one from the
		// request's registry.
		if _, err := store.Get(c.Request, sessionName); err != nil {
			c.String(http.StatusInternalServerError, "get: %v", err)
			return
		}
		user, _ := sessions.Default(c).Get("user").(string)
		c.String(http.StatusOK, "%s", user)
	})
	return app
}

// do serves GET path with the cookie (if any) and returns the response.
func (app *sessionApp) do(t *testing.T, path string, cookie *http.Cookie) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	res := httptest.NewRecorder()
	app.router.ServeHTTP(res, req)
	return res
}

// set serves GET /set and returns the session cookie it sets.
func (app *sessionApp) set(t *testing.T) *http.Cookie {
	t.Helper()
	res := app.do(t, "/set", nil)
	if res.Code != http.StatusOK {
		t.Fatalf("GET /set: %d %s", res.Code, res.Body)
	}
	return sessionCookie(t, res)
}

// get serves GET /get with the cookie and returns the user it answers.
func (app *sessionApp) get(t *testing.T, cookie *http.Cookie) string {
	t.Helper()
	res := app.do(t, "/get", cookie)
	if res.Code != http.StatusOK {
		t.Fatalf("GET /get: %d %s", res.Code, res.Body)
	}
	return res.Body.String()
}

// sessionCookie returns the session cookie the response sets.
func sessionCookie(t *testing.T, res *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, line := range res.Header().Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			t.Fatalf("parse Set-Cookie %q: %v", line, err)
		}
		if c.Name == sessionName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %q", sessionName, res.Header().Values("Set-Cookie"))
	return nil
}

// TestOptionsMapsEveryField checks that Options sets every field of the
// wrapped store's Options, and that new sessions' cookies and server-side
// expiry follow them.
func TestOptionsMapsEveryField(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	ms := newMongoStore(t, mongostore.Config{Now: clock.Now})
	ms.Options.Partitioned = true // not in gin-contrib's Options: reset
	store := ginstore.New(ms)
	store.Options(sessions.Options{
		Path:     "/app",
		Domain:   "example.com",
		MaxAge:   3600,
		Secure:   true,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	want := gsessions.Options{
		Path:     "/app",
		Domain:   "example.com",
		MaxAge:   3600,
		Secure:   true,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	}
	if ms.Options == nil || *ms.Options != want {
		t.Fatalf("store Options = %+v, want %+v", ms.Options, want)
	}

	app := newSessionApp(t, store)
	c := app.set(t)
	if c.Path != "/app" || c.Domain != "example.com" || c.MaxAge != 3600 || !c.Secure || !c.HttpOnly ||
		c.SameSite != http.SameSiteStrictMode || c.Partitioned {
		t.Errorf("cookie %q does not follow the options %+v", c.Raw, want)
	}
	if wantExp := clock.Now().Add(time.Hour).Truncate(time.Millisecond); !app.expiresAt.Equal(wantExp) {
		t.Errorf("session expires at %v, want %v (now + MaxAge)", app.expiresAt, wantExp)
	}

	// A second call replaces all the options.
	store.Options(sessions.Options{MaxAge: 60})
	if want := (gsessions.Options{MaxAge: 60}); *ms.Options != want {
		t.Errorf("after a second Options call, store Options = %+v, want %+v", *ms.Options, want)
	}
}

// TestWeekLongSessionSurvivesTwoIdleDays sets MaxAge to a week through
// gin-contrib's Options, and checks that a session left idle for two days
// (on the store's clock) is still there, and that it is gone after a week.
func TestWeekLongSessionSurvivesTwoIdleDays(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	store := ginstore.New(newMongoStore(t, mongostore.Config{Now: clock.Now}))
	store.Options(sessions.Options{Path: "/", MaxAge: 86400 * 7, HttpOnly: true})
	app := newSessionApp(t, store)

	created := clock.Now()
	cookie := app.set(t)
	if cookie.MaxAge != 86400*7 {
		t.Errorf("cookie Max-Age = %d, want %d", cookie.MaxAge, 86400*7)
	}
	if want := created.Add(week).Truncate(time.Millisecond); !app.expiresAt.Equal(want) {
		t.Errorf("session expires at %v, want %v (a week after its creation)", app.expiresAt, want)
	}

	clock.Advance(2 * day)
	if got := app.get(t, cookie); got != "ada" {
		t.Fatalf("after two idle days, user = %q, want %q", got, "ada")
	}

	// The reads did not extend the session: it ends a week after its save.
	clock.Advance(5*day + time.Second)
	if got := app.get(t, cookie); got != "" {
		t.Errorf("a week and a second after its save, user = %q, want none (expired)", got)
	}
}

// TestWeekLongSessionSurvivesTwoIdleDaysAgedCookie is
// TestWeekLongSessionSurvivesTwoIdleDays with a cookie that is really two
// days old: Config.Now cannot age the cookie's securecookie timestamp (wall
// clock time), so the test re-encodes the session's ID with a timestamp two
// days in the past. The week-long session must still load: the server-side
// expiry, not the cookie's timestamp, decides when a session ends.
func TestWeekLongSessionSurvivesTwoIdleDaysAgedCookie(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	store := ginstore.New(newMongoStore(t, mongostore.Config{Now: clock.Now}))
	store.Options(sessions.Options{Path: "/", MaxAge: 86400 * 7, HttpOnly: true})
	app := newSessionApp(t, store)

	cookie := app.set(t)
	clock.Advance(2 * day)
	aged := *cookie
	aged.Value = ageCookie(t, cookie.Value, time.Now().Add(-2*day))
	if got := app.get(t, &aged); got != "ada" {
		t.Fatalf("with a two-day-old cookie, user = %q, want %q", got, "ada")
	}
}

// ageCookie returns value, a session cookie value that mongostore wrote with
// testHashKey (and no block key), re-encoded with the timestamp of at.
func ageCookie(t *testing.T, value string, at time.Time) string {
	t.Helper()
	// The session ID, read as mongostore reads it (with no age limit).
	codec := securecookie.New(testHashKey, nil)
	codec.SetSerializer(securecookie.NopEncoder{})
	codec.MaxAge(0)
	var id []byte
	if err := codec.Decode(sessionName, value, &id); err != nil {
		t.Fatalf("decode the session cookie: %v", err)
	}

	// Check encodeCookie against securecookie: at the cookie's own
	// timestamp it must give back the same value.
	raw, err := base64.URLEncoding.DecodeString(value)
	if err != nil {
		t.Fatalf("decode the session cookie's base64: %v", err)
	}
	stamp, _, _ := bytes.Cut(raw, []byte("|"))
	unix, err := strconv.ParseInt(string(stamp), 10, 64)
	if err != nil {
		t.Fatalf("the session cookie's timestamp %q: %v", stamp, err)
	}
	if again := encodeCookie(testHashKey, sessionName, id, time.Unix(unix, 0)); again != value {
		t.Fatalf("encodeCookie does not reproduce securecookie's encoding:\n got %s\nwant %s", again, value)
	}

	aged := encodeCookie(testHashKey, sessionName, id, at)
	var got []byte
	if err := codec.Decode(sessionName, aged, &got); err != nil || !bytes.Equal(got, id) {
		t.Fatalf("the aged cookie decodes to %q, %v; want the session ID", got, err)
	}
	oneDay := securecookie.New(testHashKey, nil)
	oneDay.SetSerializer(securecookie.NopEncoder{})
	oneDay.MaxAge(int(day / time.Second))
	if err := oneDay.Decode(sessionName, aged, &got); err == nil {
		t.Fatal("a codec with a one-day max age accepts the aged cookie: it is not aged")
	}
	return aged
}

// encodeCookie encodes value for the cookie called name as
// securecookie.SecureCookie.Encode does with hashKey, no block key and
// securecookie.NopEncoder, but with the timestamp of at instead of now:
// base64url(date|base64url(value)|mac), where mac is the HMAC-SHA256 of
// name|date|base64url(value).
func encodeCookie(hashKey []byte, name string, value []byte, at time.Time) string {
	b := fmt.Appendf(nil, "%s|%d|%s", name, at.Unix(), base64.URLEncoding.EncodeToString(value))
	mac := hmac.New(sha256.New, hashKey)
	mac.Write(b)
	b = append(b, '|')
	b = mac.Sum(b)
	return base64.URLEncoding.EncodeToString(b[len(name)+1:])
}

// TestRegenerateIDThroughMongoStore is a login in a gin handler: the
// session gets a new ID through the wrapped store, keeps its values, and
// the old cookie no longer loads it.
func TestRegenerateIDThroughMongoStore(t *testing.T) {
	store := ginstore.New(newMongoStore(t, mongostore.Config{}))
	app := newSessionApp(t, store)
	app.router.GET("/login", func(c *gin.Context) {
		session := sessions.Default(c)
		session.Set("role", "admin")
		gs, err := store.Get(c.Request, sessionName) // the same session, as gorilla sees it
		if err != nil && !errors.Is(err, mongostore.ErrInvalidCookie) && !errors.Is(err, mongostore.ErrDecode) {
			c.String(http.StatusInternalServerError, "get: %v", err)
			return
		}
		if err := store.MongoStore().RegenerateID(c.Request, c.Writer, gs); err != nil {
			c.String(http.StatusInternalServerError, "regenerate: %v", err)
			return
		}
		c.String(http.StatusOK, "ok")
	})

	before := app.set(t)
	res := app.do(t, "/login", before)
	if res.Code != http.StatusOK {
		t.Fatalf("GET /login: %d %s", res.Code, res.Body)
	}
	after := sessionCookie(t, res)
	if after.Value == before.Value {
		t.Fatal("the session cookie did not change at login")
	}
	if got := app.get(t, after); got != "ada" {
		t.Errorf("with the new cookie, user = %q, want %q", got, "ada")
	}
	if got := app.get(t, before); got != "" {
		t.Errorf("with the cookie from before login, user = %q, want none", got)
	}
	// A bad cookie (tampered, or another store's) is no failure: a login
	// over it gets a new session.
	res = app.do(t, "/login", &http.Cookie{Name: sessionName, Value: "not-a-session-cookie"})
	if res.Code != http.StatusOK || sessionCookie(t, res).Value == "" {
		t.Fatalf("GET /login with a bad cookie: %d %s", res.Code, res.Body)
	}
}

// TestLateRegenerationIsRefused: once the handler has written its response
// (gin's writer says Written), a RegenerateID, whose cookie could no
// longer be sent, fails with ErrInvalidConfig and changes nothing, and a
// new session's save stores nothing: the old cookie still loads.
func TestLateRegenerationIsRefused(t *testing.T) {
	store := ginstore.New(newMongoStore(t, mongostore.Config{}))
	app := newSessionApp(t, store)
	app.router.GET("/late", func(c *gin.Context) {
		gs, err := store.Get(c.Request, sessionName)
		c.String(http.StatusOK, "ok")
		if err == nil {
			err = store.MongoStore().RegenerateID(c.Request, c.Writer, gs)
		}
		if !errors.Is(err, mongostore.ErrInvalidConfig) {
			t.Errorf("a regeneration after the response: %v, want ErrInvalidConfig", err)
		}
	})
	app.router.GET("/late-new", func(c *gin.Context) {
		c.String(http.StatusOK, "ok")
		session := sessions.Default(c)
		session.Set("user", "bob")
		if err := session.Save(); !errors.Is(err, mongostore.ErrInvalidConfig) {
			t.Errorf("a new session saved after the response: %v, want ErrInvalidConfig", err)
		}
	})
	before := app.set(t)
	app.do(t, "/late", before)
	if got := app.get(t, before); got != "ada" {
		t.Errorf("with the cookie from before the refused regeneration, user = %q, want ada", got)
	}
	if res := app.do(t, "/late-new", nil); res.Header().Get("Set-Cookie") != "" {
		t.Errorf("a refused save set a cookie: %q", res.Header().Get("Set-Cookie"))
	}
}

// TestNilStore checks that a Store made from a nil *mongostore.Store fails
// with errors instead of panicking.
func TestNilStore(t *testing.T) {
	store := ginstore.New(nil)
	if store.MongoStore() != nil {
		t.Error("MongoStore() is not nil")
	}
	store.Options(sessions.Options{MaxAge: 60})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for name, get := range map[string]func(*http.Request, string) (*gsessions.Session, error){
		"Get": store.Get,
		"New": store.New,
	} {
		session, err := get(r, sessionName)
		if !errors.Is(err, mongostore.ErrInvalidConfig) {
			t.Errorf("%s: error %v, want one wrapping ErrInvalidConfig", name, err)
		}
		if session == nil || !session.IsNew || session.Values == nil {
			t.Errorf("%s: session %+v, want a new, empty session", name, session)
		}
	}
	err := store.Save(r, httptest.NewRecorder(), gsessions.NewSession(store, sessionName))
	if !errors.Is(err, mongostore.ErrInvalidConfig) {
		t.Errorf("Save: error %v, want one wrapping ErrInvalidConfig", err)
	}
}

// TestEngineWrappedInTheMiddleware: gin's engine wrapped in mongostore's
// net/http middleware (as the README shows) gives gin-contrib's handlers
// the middleware's session: saved without session.Save() before the
// response, with Vary and Cache-Control, and its expiry slid by a read.
func TestEngineWrappedInTheMiddleware(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	ms := newMongoStore(t, mongostore.Config{Now: clock.Now})
	r := gin.New()
	r.Use(sessions.Sessions("mysession", ginstore.New(ms)))
	r.GET("/set", func(c *gin.Context) {
		sessions.Default(c).Set("user", "ada") // no Save: the middleware saves
		c.String(http.StatusOK, "ok")
	})
	r.GET("/get", func(c *gin.Context) {
		user, _ := sessions.Default(c).Get("user").(string)
		c.String(http.StatusOK, "%s", user)
	})
	h := ms.Middleware("mysession", nil)(r)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/set", nil))
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 || rec.Header().Get("Vary") != "Cookie" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("/set: cookies %v, headers %v", cookies, rec.Header())
	}
	clock.Advance(2 * time.Hour) // past the touch interval
	req := httptest.NewRequest(http.MethodGet, "/get", nil)
	req.AddCookie(cookies[0])
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Body.String() != "ada" || len(rec.Result().Cookies()) != 1 || rec.Header().Get("Vary") != "Cookie" {
		t.Fatalf("/get two hours on: %q, cookies %v, headers %v; want ada, the cookie sent again as the read slid the expiry", rec.Body, rec.Result().Cookies(), rec.Header())
	}
}
