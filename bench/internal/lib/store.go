// Package lib holds every call the benchmarks make to mongostore, so that a
// change of the library's API is adapted here, in this one file.
package lib

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongostore/mongostore"
)

// GCComment is the comment on the commands of the store's GC sweeps.
const GCComment = "mongostore gc sweep"

// Store is a mongostore store.
type Store struct{ s *mongostore.Store }

// Open opens a store on coll with expiry mode expiry (auto, gc, ttl or
// none), logging to logger, with the keys of mongostore.NewStore.
func Open(ctx context.Context, coll *mongo.Collection, expiry string, logger *slog.Logger, keys ...[]byte) (*Store, error) {
	mode, ok := map[string]mongostore.ExpiryMode{"auto": mongostore.ExpiryAuto, "gc": mongostore.ExpiryGC,
		"ttl": mongostore.ExpiryTTL, "none": mongostore.ExpiryNone}[expiry]
	if !ok {
		return nil, fmt.Errorf("unknown expiry mode %q", expiry)
	}
	s, err := mongostore.NewStore(ctx, coll, mongostore.Config{Logger: logger, Expiry: mode}, keys...)
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

// Middleware is the store's middleware with the default options; inside
// it, Get returns the middleware's session.
func (s *Store) Middleware(name string) func(http.Handler) http.Handler {
	return s.s.Middleware(name, nil)
}

// Load loads the session of cookie, as a handler's Get would.
func (s *Store) Load(ctx context.Context, cookie *http.Cookie) (*sessions.Session, error) {
	r := request(ctx)
	r.AddCookie(cookie)
	return s.s.Get(r, cookie.Name)
}

// Create creates a session called name with the values fill gives it and,
// unless owner is empty, owned by owner on device; saves it, changes it
// with change unless it is nil and saves it again; and returns its cookie.
func (s *Store) Create(ctx context.Context, name string, fill func(*sessions.Session), owner, device string, change func(*sessions.Session)) (*http.Cookie, error) {
	r := request(ctx)
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

// request is a new GET request of a handler.
func request(ctx context.Context) *http.Request {
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://bench.invalid/", nil) // a valid URL: no error
	return r
}

// ListSessions counts owner's sessions, listed from current.
func (s *Store) ListSessions(ctx context.Context, owner string, current *sessions.Session) (int64, error) {
	list, err := s.s.ListSessions(ctx, owner, current)
	return int64(len(list)), err
}

// EndOtherSessions ends owner's sessions but current and counts them.
func (s *Store) EndOtherSessions(ctx context.Context, owner string, current *sessions.Session) (int64, error) {
	return s.s.EndOtherSessions(ctx, owner, current)
}
