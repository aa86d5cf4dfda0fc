// Package ginstore adapts a mongostore.Store to gin-contrib/sessions, so gin
// applications keep their sessions in MongoDB:
//
//	r := gin.New()
//	r.Use(sessions.Sessions("mysession", ginstore.New(store)))
//
// The adapter only translates gin-contrib's Options into the store's cookie
// options; loading, saving, expiry and security are mongostore's, as
// documented there. The package is its own module, so that the mongostore
// module does not depend on gin.
package ginstore

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-contrib/sessions"
	gsessions "github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
)

// Store is a gin-contrib/sessions store that keeps sessions in MongoDB
// through a *mongostore.Store. Like the store it wraps, it is safe for
// concurrent use, except Options, which is meant for set-up.
type Store struct {
	store *mongostore.Store
}

var _ sessions.Store = (*Store)(nil)

// errNilStore is the error of a Store made with a nil *mongostore.Store.
var errNilStore = fmt.Errorf("%w: ginstore: nil *mongostore.Store", mongostore.ErrInvalidConfig)

// New returns a gin-contrib/sessions store backed by store, for use with
// sessions.Sessions or sessions.SessionsMany. The caller keeps ownership of
// store: close it (store.Close) when the application stops.
//
// store must not be nil; if it is, Get and New return an empty session and
// an error wrapping mongostore.ErrInvalidConfig, and Save fails the same way.
func New(store *mongostore.Store) *Store {
	return &Store{store: store}
}

// MongoStore returns the wrapped store, for what gin-contrib/sessions does
// not cover: store.RegenerateID at login, store.Times, store.Close.
func (s *Store) MongoStore() *mongostore.Store {
	return s.store
}

// Options sets the default cookie options of new sessions: every field of
// options (Path, Domain, MaxAge, Secure, HttpOnly, SameSite) replaces the
// wrapped store's Options, as gin-contrib's own stores do; fields that
// gin-contrib's Options lacks (Partitioned) are reset to their zero value.
// MaxAge is also the server-side idle timeout of those sessions (see
// mongostore.Config). Call it before serving requests.
func (s *Store) Options(options sessions.Options) {
	if s.store == nil {
		return
	}
	s.store.Options = options.ToGorillaOptions()
}

// Get returns the session called name for the request, loading it at most
// once per request. See mongostore.Store.Get.
func (s *Store) Get(r *http.Request, name string) (*gsessions.Session, error) {
	if s.store == nil {
		return s.emptySession(name)
	}
	return s.store.Get(r, name)
}

// New returns the session called name for the request, loaded from the
// database if the request carries a valid cookie for a live session, and a
// new session otherwise. See mongostore.Store.New.
func (s *Store) New(r *http.Request, name string) (*gsessions.Session, error) {
	if s.store == nil {
		return s.emptySession(name)
	}
	return s.store.New(r, name)
}

// Save writes the session to the database and sets its cookie, or deletes
// both when session.Options.MaxAge < 0. See mongostore.Store.Save.
func (s *Store) Save(r *http.Request, w http.ResponseWriter, session *gsessions.Session) error {
	if s.store == nil {
		return errNilStore
	}
	if session == nil {
		return errors.New("ginstore: nil session")
	}
	return s.store.Save(r, w, session)
}

// emptySession is what Get and New return when there is no store to ask:
// a new session (never nil, as gin-contrib/sessions expects) and
// errNilStore.
func (s *Store) emptySession(name string) (*gsessions.Session, error) {
	session := gsessions.NewSession(s, name)
	session.Options = &gsessions.Options{Path: "/"}
	session.IsNew = true
	return session, errNilStore
}
