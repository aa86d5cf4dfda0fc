package main

import (
	"container/list"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mongostore/mongostore"
)

// The activity log of the page of sessions: each user's recent sign-ins
// and how they ended, from the store's lifecycle events (Config.OnEvent).
// It lives in memory, bounded, and starts empty at each start of the app.

// Bounds of the activity log.
const (
	activityPerUser  = 10   // sign-ins kept per user, the most recently changed
	activityMaxUsers = 1000 // users kept: beyond, the least recently active is forgotten
)

// How a sign-in ended, as the page says it, before "at <time>".
const (
	endedHere      = "Signed out there"                        // logout, or a new login in that browser
	endedElsewhere = "Signed out from another device"          // a sign-out from the page of sessions
	endedByLimit   = "Signed out because of the session limit" // MAX_SESSIONS_PER_USER
	endedExpired   = "Expired"
	endedOtherwise = "Ended" // a reason this app does not know
)

// signIn is one sign-in of a user, a session's chain named by its handle
// (the same across RegenerateID), as the activity log keeps it.
type signIn struct {
	Handle string
	Device string    // its label, or noDevice
	At     time.Time // when it signed in: the chain's creation
	// Ended says how it ended (endedHere…), "" while it lasts as far as
	// the log knows; EndedAt when.
	Ended   string
	EndedAt time.Time

	// limitedBy is, for a sign-in the limit ended, the handle of the login
	// whose save ended it; told says that login's page has said so.
	limitedBy string
	told      bool
}

// ByLimit says the session limit ended the sign-in.
func (s signIn) ByLimit() bool { return s.Ended == endedByLimit }

// userActivity is the activity log of one user.
type userActivity struct {
	owner   string
	signIns []signIn // the most recently changed first, at most perUser
}

// activityLog keeps the recent sign-ins of the most recently active users.
// Its record method is the store's event subscriber: it runs inside
// requests, so it only updates memory under a mutex, and logs nothing.
type activityLog struct {
	mu       sync.Mutex
	users    map[string]*list.Element // the element's value is a *userActivity
	recent   list.List                // the users, the most recently changed first
	perUser  int
	maxUsers int
	now      func() time.Time
}

// newActivityLog returns an empty log that keeps perUser sign-ins of each
// of maxUsers users at most.
func newActivityLog(perUser, maxUsers int) *activityLog {
	return &activityLog{users: map[string]*list.Element{}, perUser: perUser, maxUsers: maxUsers, now: time.Now}
}

// eventScope is what the store's events within one request share: the
// handle of the session the request's save created (a login), to which
// the sign-ins that the session limit ends then are tied.
type eventScope struct{ created string }

type eventScopeKey struct{}

// withEventScope gives each request an eventScope, which the subscriber
// finds in the context of the request's store operations.
func withEventScope(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), eventScopeKey{}, &eventScope{})))
	})
}

// record is the store's Config.OnEvent: it notes a sign-in (a session
// created with an owner) and how it ended. Events without an owner
// (anonymous sessions) and regenerations (the same sign-in) are ignored.
func (l *activityLog) record(ctx context.Context, e mongostore.Event) {
	if e.Owner == "" || e.Handle == "" {
		return
	}
	scope, _ := ctx.Value(eventScopeKey{}).(*eventScope)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Kind {
	case mongostore.EventCreated:
		if scope != nil {
			scope.created = e.Handle
		}
		l.note(e, "", time.Time{}, "")
	case mongostore.EventExpired:
		l.note(e, endedExpired, e.ExpiresAt, "")
	case mongostore.EventEnded:
		var by string
		if e.Reason == mongostore.EndLimit && scope != nil {
			by = scope.created
		}
		l.note(e, describeEnd(e.Reason), l.now(), by)
	}
}

// describeEnd says how a sign-in that ended for reason ended.
func describeEnd(reason mongostore.EndReason) string {
	switch reason {
	case mongostore.EndLogout, mongostore.EndRestart:
		return endedHere
	case mongostore.EndByHandle, mongostore.EndEverywhere:
		return endedElsewhere
	case mongostore.EndLimit:
		return endedByLimit
	default:
		return endedOtherwise
	}
}

// note puts the sign-in of e first in its owner's log, ended (if ending is
// not "") at at, by the login of the handle by (for the limit); l.mu is
// held. A sign-in the log does not know (it started before the app did, or
// fell out of the log) is made from e. A sign-in ends once.
func (l *activityLog) note(e mongostore.Event, ending string, at time.Time, by string) {
	u := l.user(e.Owner)
	s := signIn{Handle: e.Handle, Device: cmpOr(e.Device, noDevice), At: e.CreatedAt}
	if i := slices.IndexFunc(u.signIns, func(s signIn) bool { return s.Handle == e.Handle }); i >= 0 {
		s = u.signIns[i]
		u.signIns = slices.Delete(u.signIns, i, i+1)
	}
	if ending != "" && s.Ended == "" {
		s.Ended, s.EndedAt, s.limitedBy = ending, at, by
	}
	u.signIns = slices.Insert(u.signIns, 0, s)
	if len(u.signIns) > l.perUser {
		u.signIns = slices.Delete(u.signIns, l.perUser, len(u.signIns))
	}
}

// user returns the log of owner, made if need be, as the most recently
// active user's; beyond maxUsers it forgets the least recently active
// one. l.mu is held.
func (l *activityLog) user(owner string) *userActivity {
	if el, ok := l.users[owner]; ok {
		l.recent.MoveToFront(el)
		return el.Value.(*userActivity)
	}
	u := &userActivity{owner: owner}
	l.users[owner] = l.recent.PushFront(u)
	if l.recent.Len() > l.maxUsers {
		oldest := l.recent.Back()
		delete(l.users, oldest.Value.(*userActivity).owner)
		l.recent.Remove(oldest)
	}
	return u
}

// forPage returns the sign-ins of owner, the most recently changed first,
// and the devices of those that the session limit ended for the login of
// the handle current and that its page has not told of yet: it tells of
// them now.
func (l *activityLog) forPage(owner, current string) (signIns []signIn, limited []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.users[owner]
	if !ok {
		return nil, nil
	}
	u := el.Value.(*userActivity)
	for i, s := range u.signIns {
		if current != "" && s.limitedBy == current && !s.told {
			u.signIns[i].told = true
			limited = append(limited, s.Device)
		}
	}
	return slices.Clone(u.signIns), limited
}

// limitNotice tells the user that their login on this device signed out
// their sessions on devices (labels) to keep to limit sessions per user;
// "" for none.
func limitNotice(devices []string, limit int) string {
	per := fmt.Sprintf("at most %d sessions per user", limit)
	if limit == 1 {
		per = "at most 1 session per user"
	}
	switch len(devices) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("Your least recently used session (%s) was signed out when you signed in here: %s.", devices[0], per)
	default:
		return fmt.Sprintf("Your %d least recently used sessions (%s) were signed out when you signed in here: %s.",
			len(devices), strings.Join(devices, ", "), per)
	}
}
