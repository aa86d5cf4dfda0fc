package main

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
)

// The page of a user's sessions: one per browser or device they logged in
// with, from the store's owner index (login ties each session to its user
// with mongostore.SetOwner).

// sessionsPage is the data of the page that lists a user's sessions.
type sessionsPage struct {
	Flashes  []flash
	Username string
	// Sessions are the user's live sessions: the current one, marked
	// Current, first, then the others, the most recently used first.
	Sessions []mongostore.OwnedSession
	// Others is how many of them are not the current one.
	Others int
	// Current is the handle of the current session.
	Current string
	// LimitNotice, if not "", says which sessions the login of this one
	// signed out to keep to the limit of sessions per user: once, on the
	// first visit of the page after that login. It is a warning.
	LimitNotice string
	// Activity is the user's recent sign-ins and how they ended, the most
	// recently changed first, from the activity log; ActivityKept is how
	// many the log keeps.
	Activity     []signIn
	ActivityKept int
}

// noDevice stands for a session stored without a device label.
const noDevice = "Unknown device"

// loggedIn returns the session of the request and the name of its user,
// and sets the hint cookie (see setHint); when nobody is logged in it
// redirects to the login form and returns ok false.
func (a *app) loggedIn(w http.ResponseWriter, r *http.Request) (sess *sessions.Session, name string, ok bool) {
	sess = a.session(r)
	if name, ok = sess.Values[userKey].(string); !ok {
		a.toLogin(w, r)
		return sess, "", false
	}
	a.setHint(w, sess)
	return sess, name, true
}

// databaseError answers a request whose database operation what failed as
// the middleware answers one whose session could not be loaded or saved:
// it logs the error and answers 500.
func (a *app) databaseError(w http.ResponseWriter, r *http.Request, what string, err error) {
	a.logger.Error(what, "method", r.Method, "path", r.URL.Path, "error", err.Error())
	http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
}

// sessionList serves GET /sessions.
func (a *app) sessionList(w http.ResponseWriter, r *http.Request) {
	sess, name, ok := a.loggedIn(w, r)
	if !ok {
		return
	}
	list, err := a.store.ListSessions(r.Context(), name, sess)
	if err != nil {
		a.databaseError(w, r, "list sessions", err)
		return
	}
	page := sessionsPage{Flashes: takeFlashes(sess), Username: name, Sessions: list, ActivityKept: a.activity.perUser}
	page.Current, page.Others = currentFirst(list)
	var limited []string
	page.Activity, limited = a.activity.forPage(name, page.Current)
	if a.limit > 0 {
		page.LimitNotice = limitNotice(limited, a.limit)
	}
	a.render(w, http.StatusOK, "sessions", page)
}

// currentFirst puts the current session of list (from ListSessions) first,
// then the others, the most recently used first (as ListSessions orders
// them), and labels those without a device label noDevice. It returns the
// current session's handle ("" if none is) and how many others there are.
func currentFirst(list []mongostore.OwnedSession) (current string, others int) {
	for i, s := range list {
		if s.Device == "" {
			list[i].Device = noDevice
		}
		if s.Current {
			current = s.Handle
		} else {
			others++
		}
	}
	slices.SortStableFunc(list, func(x, y mongostore.OwnedSession) int {
		switch {
		case x.Current == y.Current:
			return 0
		case x.Current:
			return -1
		default:
			return 1
		}
	})
	return current, others
}

// endSession serves POST /sessions/end: it ends the user's session named
// by the form field handle, one of the handles of the page's list.
func (a *app) endSession(w http.ResponseWriter, r *http.Request) {
	sess, name, ok := a.loggedIn(w, r)
	if !ok {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "Bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	handle := r.PostForm.Get("handle")
	if handle == "" {
		http.Error(w, "Bad request: no session handle", http.StatusBadRequest)
		return
	}
	target, ended, err := a.store.EndSession(r.Context(), name, handle, sess)
	switch {
	case err != nil:
		a.databaseError(w, r, "end session", err)
		return
	case target.Current:
		// The page offers no such button: logging out ends this one.
		addFlash(sess, flash{kindInfo, "That is the session you are using: to end it, log out."})
	case !ended:
		// Ended meanwhile (expired, logged out, ended from another
		// device), or not one of this user's sessions.
		addFlash(sess, flash{kindInfo, "That session had already ended."})
	default:
		device := cmpOr(target.Device, noDevice)
		a.logger.Info("ended a session")
		addFlash(sess, flash{kindSuccess, "Signed out " + device + "."})
	}
	http.Redirect(w, r, "/sessions", http.StatusSeeOther)
}

// endOtherSessions serves POST /sessions/end-others: it ends all the
// user's sessions but the current one ("sign out everywhere else").
func (a *app) endOtherSessions(w http.ResponseWriter, r *http.Request) {
	sess, name, ok := a.loggedIn(w, r)
	if !ok {
		return
	}
	n, err := a.store.EndOtherSessions(r.Context(), name, sess)
	if err != nil {
		a.databaseError(w, r, "end other sessions", err)
		return
	}
	a.logger.Info("ended other sessions", "count", n)
	switch n {
	case 0:
		addFlash(sess, flash{kindInfo, "Those sessions had already ended."})
	case 1:
		addFlash(sess, flash{kindSuccess, "Signed out 1 other session."})
	default:
		addFlash(sess, flash{kindSuccess, fmt.Sprintf("Signed out %d other sessions.", n)})
	}
	http.Redirect(w, r, "/sessions", http.StatusSeeOther)
}
