// Package lib holds every call the benchmarks make to mongostore (API changes go here).
package lib

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongostore/mongostore"
)

// Store is a mongostore store.
type Store struct{ s *mongostore.Store }

// Codec is mongostore's codec of session values.
type Codec = mongostore.Codec

// Options are how Open makes a store: Expiry is auto, gc, ttl or none;
// Codec nil is the default; Timeout 0 is the store's default.
type Options struct {
	Expiry  string
	Codec   Codec
	Logger  *slog.Logger
	Timeout time.Duration
}

// Open opens a store on coll with opts and the keys of mongostore.NewStore.
func Open(ctx context.Context, coll *mongo.Collection, opts Options, keys ...[]byte) (*Store, error) {
	mode, ok := map[string]mongostore.ExpiryMode{"auto": mongostore.ExpiryAuto, "gc": mongostore.ExpiryGC,
		"ttl": mongostore.ExpiryTTL, "none": mongostore.ExpiryNone}[opts.Expiry]
	if !ok {
		return nil, fmt.Errorf("unknown expiry mode %q", opts.Expiry)
	}
	cfg := mongostore.Config{Logger: opts.Logger, Expiry: mode, Codec: opts.Codec, Timeout: opts.Timeout}
	s, err := mongostore.NewStore(ctx, coll, cfg, keys...)
	if err != nil {
		return nil, err
	}
	return &Store{s}, nil
}

// TTLUnsupported says whether Open's err means the server refuses TTL indexes.
func TTLUnsupported(err error) bool {
	return errors.Is(err, mongostore.ErrInvalidConfig) && strings.Contains(err.Error(), "refuses TTL indexes")
}

// Close stops the store's GC goroutine, if any.
func (s *Store) Close() { _ = s.s.Close() }

// Sessions is the store as a sessions.Store (Get; session.Save calls Save).
func (s *Store) Sessions() sessions.Store { return s.s }

// Middleware is the store's middleware; inside it, Get returns its session.
func (s *Store) Middleware(name string) func(http.Handler) http.Handler {
	return s.s.Middleware(name, nil)
}

// ExclusiveMiddleware is Middleware with mongostore.Exclusive: a session's
// requests one at a time.
func (s *Store) ExclusiveMiddleware(name string) func(http.Handler) http.Handler {
	return s.s.Middleware(name, nil, mongostore.Exclusive())
}

// Load loads the session of cookie, as a handler's Get would.
func (s *Store) Load(ctx context.Context, cookie *http.Cookie) (*sessions.Session, error) {
	return s.s.Get(Request(ctx, cookie), cookie.Name)
}

// Create saves a new session called name, with fill's values and owner on device
// unless owner is "", and again changed by change unless nil; it returns the cookie.
func (s *Store) Create(ctx context.Context, name string, fill func(*sessions.Session), owner, device string, change func(*sessions.Session)) (*http.Cookie, error) {
	r := Request(ctx)
	session, err := s.s.Get(r, name)
	if err != nil {
		return nil, err
	}
	fill(session)
	if owner != "" {
		mongostore.SetOwner(session, owner, device)
	}
	w := httptest.NewRecorder()
	if err := s.s.Save(r, w, session); err != nil {
		return nil, err
	}
	if change != nil {
		change(session)
		if err := s.s.Save(r, httptest.NewRecorder(), session); err != nil {
			return nil, err
		}
	}
	for _, c := range w.Result().Cookies() {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, errors.New("the store set no cookie")
}

// Request is a new GET request of a handler, with cookies.
func Request(ctx context.Context, cookies ...*http.Cookie) *http.Request {
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://bench.invalid/", nil) // a valid URL: no error
	for _, c := range cookies {
		r.AddCookie(c)
	}
	return r
}

// ListSessions counts owner's sessions, listed from current.
func (s *Store) ListSessions(ctx context.Context, owner string, current *sessions.Session) (int64, error) {
	list, err := s.s.ListSessions(ctx, owner, current)
	return int64(len(list)), err
}

// DeleteExpired deletes the expired sessions, as a GC sweep does.
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) { return s.s.DeleteExpired(ctx) }

// EndOtherSessions ends owner's sessions but current and counts them.
func (s *Store) EndOtherSessions(ctx context.Context, owner string, current *sessions.Session) (int64, error) {
	return s.s.EndOtherSessions(ctx, owner, current)
}

// RekeyCounts are mongostore's counts of a Rekey.
type RekeyCounts = mongostore.RekeyCounts

// Rekey re-seals the stored sessions under the store's first key pair.
func (s *Store) Rekey(ctx context.Context, dryRun bool) (RekeyCounts, error) {
	return s.s.Rekey(ctx, mongostore.RekeyOptions{DryRun: dryRun, SingleProcess: true})
}
