package mongostore

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/sessions"
)

// Every error the store returns wraps one of these (and the driver, codec
// or securecookie error beneath it, if any): test for them with errors.Is.
var (
	// ErrInvalidConfig is returned by NewStore for invalid configuration,
	// keys, or indexes (the message says what to do), by Save for cookie
	// options that browsers would refuse, by Save and RegenerateID for a new
	// session or a regeneration once the middleware's response has started
	// (its cookie would be lost), and by every method given a nil argument
	// it needs.
	ErrInvalidConfig = errors.New("mongostore: invalid configuration")

	// ErrInvalidCookie is returned by Get and New, with a new session, when
	// the cookie is tampered, signed with an unknown key, or malformed.
	ErrInvalidCookie = errors.New("mongostore: invalid session cookie")

	// ErrDecode is returned by Get and New, with a new session, when the
	// stored session cannot be read: written without this application's
	// keys, not encrypted while the store encrypts, in an unknown format,
	// or by another codec. Lock returns it for such a session too, and
	// Save and RegenerateID under ErrConflict (another save's document, or
	// this request's own as loaded).
	ErrDecode = errors.New("mongostore: cannot decode stored session")

	// ErrEncode is returned by Save when the session values cannot be
	// encoded by the codec, or exceed Config.MaxSize. Nothing is written.
	ErrEncode = errors.New("mongostore: cannot encode session values")

	// ErrSessionGone is returned by Save, RegenerateID and Lock (and given
	// to the middleware's onError) when the session ended (a logout
	// elsewhere, expiry) after it was loaded, or another request
	// regenerated it: it stays ended, and the old cookie dead.
	ErrSessionGone = errors.New("mongostore: session ended after it was loaded")

	// ErrConflict is returned by Save and RegenerateID when concurrent
	// saves of the session kept changing it, so that this one could not
	// apply its changes after several attempts, or another save meanwhile
	// stored what this one cannot read (ErrDecode too: an instance with
	// newer keys or codec), or a save after the middleware finished with
	// the session met another save (its changes can no longer be told from
	// the other's). Nothing of it was written.
	// EndOtherSessions and the per-owner limit (under ErrLimit) return it
	// when the owner's sessions kept being saved while they were ended.
	ErrConflict = errors.New("mongostore: session changed by concurrent saves")

	// ErrDatabase wraps failures of database commands, timeouts included.
	ErrDatabase = errors.New("mongostore: database error")

	// ErrLocked is returned when a request could not take its session's
	// lock (Exclusive, Lock) within Config.LockWait: another request of the
	// session held it all along. The middleware's default answer is 503,
	// with Retry-After.
	ErrLocked = errors.New("mongostore: the session is locked by another request")

	// ErrLimit is returned by Save when the session was saved and tied to
	// its owner, but the owner's sessions beyond
	// Config.MaxSessionsPerOwner could not all be ended (the error beneath
	// says why). The session itself is saved.
	ErrLimit = errors.New("mongostore: the per-owner session limit could not be applied")

	// ErrResponseDiscarded is returned by the middleware's writer once a
	// save failed and onError answered: the handler's response is dropped.
	ErrResponseDiscarded = errors.New("mongostore: response discarded: the session could not be saved")
)

// errNil reports a nil argument.
func errNil(what string) error { return fmt.Errorf("%w: nil %s", ErrInvalidConfig, what) }

// checkArgs checks the arguments of Save and RegenerateID.
func checkArgs(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	switch {
	case r == nil:
		return errNil("request")
	case w == nil:
		return errNil("response writer")
	case session == nil:
		return errNil("session")
	}
	return nil
}

// oneLine is errors.Join's error with its texts on one line, once each
// ("; " between them): one log line per error, as log formats want.
type oneLine []error

func (e oneLine) Error() string {
	texts := make([]string, 0, len(e))
	for _, err := range e {
		if t := err.Error(); !slices.Contains(texts, t) {
			texts = append(texts, t)
		}
	}
	return strings.Join(texts, "; ")
}

func (e oneLine) Unwrap() []error { return e }

// orNil returns e as an error: nil if it holds none, its one error, or e
// wrapped (== on a slice panics).
func (e oneLine) orNil() error {
	switch len(e) {
	case 0:
		return nil
	case 1:
		return e[0]
	}
	return fmt.Errorf("%w", e)
}
