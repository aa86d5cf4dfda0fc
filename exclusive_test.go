package mongostore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// exclusiveHandler is the middleware of store with Exclusive around fn.
func exclusiveHandler(store *Store, fn func(w http.ResponseWriter, r *http.Request, s *sessions.Session)) http.Handler {
	return store.Middleware(testSessionName, nil, Exclusive())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := store.Get(r, testSessionName)
		fn(w, r, s)
	}))
}

// tokenHandler accepts the one-time token of the session, once: it reads,
// decides and writes, counting what it accepted.
func tokenHandler(store *Store, accepted *atomic.Int64) http.Handler {
	return exclusiveHandler(store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if s.Values["token"] != "t" {
			http.Error(w, "no token", http.StatusForbidden)
			return
		}
		time.Sleep(time.Millisecond) // the decision takes a moment
		delete(s.Values, "token")
		accepted.Add(1)
		_, _ = fmt.Fprint(w, "accepted")
	})
}

// TestExclusiveTokenIsAcceptedOnce: 20 overlapping requests of one session,
// over two store instances sharing the collection (as two app instances
// would; on the embedded server, whose findAndModify is not atomic across
// processes, over one), consume a one-time token: exactly one accepts it,
// in every trial.
func TestExclusiveTokenIsAcceptedOnce(t *testing.T) {
	trials := 100
	f := newFixture(t, Config{Expiry: ExpiryNone})
	other := storeOn(t, testClient(t, nil).Database(testDatabase).Collection(f.coll.Name()), Config{Expiry: ExpiryNone})
	if testServerKind == "embedded" {
		trials, other = 20, f.store
	}
	var accepted atomic.Int64
	handlers := []http.Handler{tokenHandler(f.store, &accepted), tokenHandler(other, &accepted)}
	for trial := range trials {
		b, _ := saveNewSession(t, f, map[any]any{"token": "t"})
		accepted.Store(0)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				rec := httptest.NewRecorder()
				handlers[i%2].ServeHTTP(rec, b.request())
				if rec.Code != http.StatusOK && rec.Code != http.StatusForbidden {
					t.Errorf("trial %d: status %d: %s", trial, rec.Code, rec.Body)
				}
			})
		}
		wg.Wait()
		if n := accepted.Load(); n != 1 {
			t.Fatalf("trial %d: %d requests accepted the token, want 1", trial, n)
		}
	}
}

// TestWithoutExclusiveTheTokenIsAcceptedTwice is the control: without the
// section, overlapping requests both accept the token (the merge keeps
// every change, which is not the point here).
func TestWithoutExclusiveTheTokenIsAcceptedTwice(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"token": "t"})
	var accepted atomic.Int64
	release := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	h := strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		ok := s.Values["token"] == "t"
		arrived.Done()
		<-release // both have read the token
		if ok {
			delete(s.Values, "token")
			accepted.Add(1)
		}
	})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), b.request()) })
	}
	arrived.Wait()
	close(release)
	wg.Wait()
	if accepted.Load() != 2 {
		t.Fatalf("%d accepted without the section; the control expects 2", accepted.Load())
	}
}

// lockedDocument reports whether the session b names holds a lock.
func lockedDocument(t *testing.T, f *storeFixture, b *browser) bool {
	t.Helper()
	raw, ok := browserDocument(t, f, b)
	if !ok {
		return false
	}
	_, err := raw.LookupErr(fieldLock)
	return err == nil
}

// TestCancelledLoadLeavesNoLock: a request that goes away while its lock's
// findAndModify is on the wire, which the server has applied, leaves the
// session unlocked: the lock is released then, not left to lapse after
// LockLease, during which the user's next exclusive requests would wait
// and fail with ErrLocked.
func TestCancelledLoadLeavesNoLock(t *testing.T) {
	var cancelRequest atomic.Pointer[context.CancelFunc]
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if cancel := cancelRequest.Load(); cancel != nil && e.CommandName == "findAndModify" {
			time.AfterFunc(100*time.Millisecond, *cancel) // the command is at the server; its answer is on its way
		}
	}}
	coll, proxy := proxiedCollection(t, options.Client().SetMonitor(monitor))
	store := storeOn(t, coll, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, &storeFixture{store: store}, map[any]any{"k": "v"})
	proxy.SetLatency(500 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelRequest.Store(&cancel)
	var ran atomic.Bool
	rec := httptest.NewRecorder()
	exclusiveHandler(store, func(http.ResponseWriter, *http.Request, *sessions.Session) { ran.Store(true) }).ServeHTTP(rec, b.request().WithContext(ctx))
	cancelRequest.Store(nil)
	if ran.Load() || rec.Code == http.StatusOK {
		t.Fatalf("the handler ran (%v), answer %d: the request was not cancelled during its lock's command", ran.Load(), rec.Code)
	}
	raw, err := testClient(t, nil).Database(testDatabase).Collection(coll.Name()).FindOne(context.Background(), bson.D{}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if holder, err := raw.LookupErr(fieldLock); err == nil {
		t.Fatalf("the session stays locked by %s after its request went away", holder)
	}
}

// TestLockWaitReleasesNothing: an exclusive load that gives up while it
// waits for this process's own chain lock (a save of the session under
// way) has sent no findAndModify, so it sends no release either.
func TestLockWaitReleasesNothing(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, token := saveNewSession(t, f, map[any]any{"k": "v"})
	unlock, err := f.store.coll.locks.lock(context.Background(), docID(token))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	f.cmds.reset()
	if _, err := f.store.newSession(b.request().WithContext(ctx), testSessionName, false, true); !errors.Is(err, ErrDatabase) {
		t.Fatalf("a locked load that outlived its request: %v, want ErrDatabase", err)
	}
	if writes := slices.DeleteFunc(commandNames(f.cmds), func(name string) bool { return name == "find" }); len(writes) > 0 {
		t.Fatalf("commands %q sent: want no write (nothing was locked)", writes)
	}
}

// TestExclusiveReleases: the lock is released when the handler returns,
// panics, or its request is cancelled; a request that waits reports how
// long (EventLocked), and one that waits past LockWait gets ErrLocked,
// answered 503 with Retry-After.
func TestExclusiveReleases(t *testing.T) {
	events := &eventLog{}
	f := newFixture(t, Config{Expiry: ExpiryNone, OnEvent: events.add, LockWait: 300 * time.Millisecond})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	events.take()
	for _, tc := range []struct {
		name string
		fn   func(w http.ResponseWriter, r *http.Request, s *sessions.Session)
		ctx  func() context.Context
	}{
		{"returns", func(http.ResponseWriter, *http.Request, *sessions.Session) {}, context.Background},
		{"panics", func(http.ResponseWriter, *http.Request, *sessions.Session) { panic("handler") }, context.Background},
		{"cancelled", func(_ http.ResponseWriter, r *http.Request, _ *sessions.Session) { <-r.Context().Done() }, func() context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_ = cancel
			return ctx
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := exclusiveHandler(f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				if !lockedDocument(t, f, b) {
					t.Error("the handler runs without the lock")
				}
				tc.fn(w, r, s)
			})
			func() {
				defer func() { _ = recover() }()
				h.ServeHTTP(httptest.NewRecorder(), b.request().WithContext(tc.ctx()))
			}()
			if lockedDocument(t, f, b) {
				t.Fatal("the lock outlived the handler")
			}
		})
	}
	got, _ := events.take()
	if strings.Join(got, " ") != "locked locked locked" {
		t.Fatalf("events %q", got)
	}

	// A holder that stays past LockWait: the other request gets ErrLocked.
	held, done := make(chan struct{}), make(chan struct{})
	go exclusiveHandler(f.store, func(http.ResponseWriter, *http.Request, *sessions.Session) {
		close(held)
		<-done
	}).ServeHTTP(httptest.NewRecorder(), b.request())
	<-held
	rec := httptest.NewRecorder()
	exclusiveHandler(f.store, func(http.ResponseWriter, *http.Request, *sessions.Session) {
		t.Error("a second holder ran")
	}).ServeHTTP(rec, b.request())
	close(done)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("waiting past LockWait: %d %q, want 503 with Retry-After", rec.Code, rec.Header())
	}
	// Once the holder is done, the next one waits for it, and says so.
	events.take()
	waiter := make(chan struct{})
	go func() {
		defer close(waiter)
		exclusiveHandler(f.store, func(http.ResponseWriter, *http.Request, *sessions.Session) {}).ServeHTTP(httptest.NewRecorder(), b.request())
	}()
	<-waiter
	if _, e := events.take(); len(e) != 1 || e[0].Kind != EventLocked {
		t.Fatalf("events %+v, want one EventLocked", e)
	}
}

// TestEndingIsNeverBlockedByALock: a logout from outside the section ends
// the session at once while a holder runs; the holder's save then finds it
// gone, and nothing brings it back.
func TestEndingIsNeverBlockedByALock(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	held, loggedOut := make(chan struct{}), make(chan struct{})
	rec := httptest.NewRecorder()
	var wg sync.WaitGroup
	wg.Go(func() {
		exclusiveHandler(f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
			close(held)
			<-loggedOut
			s.Values["k"] = "changed"
			_, _ = fmt.Fprint(w, "ok")
		}).ServeHTTP(rec, b.request())
	})
	<-held
	start := time.Now()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Error(err)
		}
	})
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the logout took %v", waited)
	}
	close(loggedOut)
	wg.Wait()
	if rec.Code != http.StatusConflict || f.count(t) != 0 {
		t.Fatalf("the holder's save after the logout: %d, %d documents; want 409 and none", rec.Code, f.count(t))
	}
}

// TestRegenerateIDInsideTheSection: a regeneration inside the section
// works, and the lock is released after it.
func TestRegenerateIDInsideTheSection(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, token := saveNewSession(t, f, map[any]any{"k": "v"})
	rec := b.do(exclusiveHandler(f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Error(err)
		}
	}).ServeHTTP)
	if rec.Code != http.StatusOK || lockedDocument(t, f, b) || !isLive(t, f, b) || docID(b.cookies[testSessionName].Value) == token {
		t.Fatalf("after RegenerateID in the section: %d, locked %v", rec.Code, lockedDocument(t, f, b))
	}
}

// TestExpiredSessionIsNeverLocked: an exclusive request of an expired
// session gets a new one; the old document takes no lock.
func TestExpiredSessionIsNeverLocked(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, token := saveNewSession(t, f, map[any]any{"k": "v"})
	clock.Advance(2 * time.Minute)
	b.do(exclusiveHandler(f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if !s.IsNew {
			t.Error("an expired session loaded")
		}
	}).ServeHTTP)
	raw := storedDocument(t, f, token)
	if _, err := raw.LookupErr(fieldLock); err == nil {
		t.Fatal("the expired session was locked")
	}
}

// TestLockWithoutTheMiddleware: Lock reloads the values the last holder
// left, with the request's own changes since its load over them, and its
// unlock releases the lock.
func TestLockWithoutTheMiddleware(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"n": 1, "mine": "before"})
	r, stale := loaded(t, f, b)
	stale.Values["mine"] = "changed before Lock"        // kept over the reload
	b.do(func(w http.ResponseWriter, r *http.Request) { // another request's change
		s, _ := f.store.Get(r, testSessionName)
		s.Values["n"] = 2
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	unlock, err := f.store.Lock(r, stale)
	if err != nil || stale.Values["n"] != 2 || stale.Values["mine"] != "changed before Lock" || !lockedDocument(t, f, b) {
		t.Fatalf("Lock = %v, values %v, locked %v", err, stale.Values, lockedDocument(t, f, b))
	}
	stale.Values["n"] = 3
	if err := stale.Save(r, httptest.NewRecorder()); err != nil {
		t.Fatal(err)
	}
	unlock()
	if s, _ := loadSession(t, f, b); s.Values["n"] != 3 || lockedDocument(t, f, b) {
		t.Fatalf("after unlock: %v, locked %v", s.Values, lockedDocument(t, f, b))
	}
}

// TestLockAfterTheMiddlewareFinished: work that outlives its handler (on a
// request detached from its cancellation) may Lock the session the
// middleware loaded; once the middleware has finished, unlock releases the
// lock, which the middleware no longer can: whether the work saved the
// session first, or its Lock waited for another holder while the
// middleware finished.
func TestLockAfterTheMiddlewareFinished(t *testing.T) {
	for _, tc := range []struct {
		name             string
		saveFirst, waits bool
	}{{"lock, save", false, false}, {"save, lock", true, false}, {"lock waiting as the middleware finishes", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone, LockWait: 5 * time.Second})
			b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
			unlockOther := func() {}
			if tc.waits { // another request holds the lock
				r := b.request()
				s, _ := f.store.Get(r, testSessionName)
				var err error
				if unlockOther, err = f.store.Lock(r, s); err != nil {
					t.Fatal(err)
				}
			}
			got, finished := make(chan func(), 1), make(chan struct{})
			strictSessionHandler(t, f.store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				later := r.WithContext(context.WithoutCancel(r.Context()))
				go func() { // the work outliving the handler
					if !tc.waits {
						<-finished
					}
					if tc.saveFirst {
						s.Values["k"] = "saved first"
						if err := f.store.Save(later, discardHeaders{}, s); err != nil {
							t.Error(err)
						}
					}
					unlock, err := f.store.Lock(later, s)
					if err != nil {
						t.Error(err)
					}
					got <- unlock
				}()
				if tc.waits {
					time.Sleep(100 * time.Millisecond) // Lock is waiting
				}
			}).ServeHTTP(httptest.NewRecorder(), b.request())
			close(finished)
			unlockOther()
			unlock := <-got
			unlock()
			if lockedDocument(t, f, b) {
				t.Error("the lock outlives unlock: every exclusive request of the session waits for LockLease")
			}
		})
	}
}

// TestExclusiveCost: an uncontended exclusive read-write request sends one
// command more than a plain one: the load takes the lock, the save writes,
// and one update releases it.
func TestExclusiveCost(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"n": 1})
	change := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["n"] = time.Now().UnixNano()
	}
	f.cmds.reset()
	b.do(strictSessionHandler(t, f.store, change).ServeHTTP)
	plain := commandNames(f.cmds)
	f.cmds.reset()
	b.do(exclusiveHandler(f.store, change).ServeHTTP)
	exclusive := commandNames(f.cmds)
	if strings.Join(plain, " ") != "find save" || strings.Join(exclusive, " ") != "findAndModify save save" {
		t.Fatalf("commands: plain %q, exclusive %q", plain, exclusive)
	}
}

// TestHolderKilledInAnotherProcess: a process that takes the lock and dies
// without releasing it leaves a lease that lapses: the next request gets
// the lock within LockLease.
func TestHolderKilledInAnotherProcess(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, LockLease: time.Second})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLockHolder$")
	cmd.Env = append(os.Environ(), "MONGOSTORE_LOCK_HOLDER="+f.coll.Name()+" "+b.cookies[testSessionName].Value)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "holding the lock") {
		t.Fatalf("the holder process: %v\n%s", err, out)
	}
	if !lockedDocument(t, f, b) {
		t.Fatal("the dead holder left no lock")
	}
	start := time.Now()
	rec := b.do(exclusiveHandler(f.store, func(http.ResponseWriter, *http.Request, *sessions.Session) {}).ServeHTTP)
	if waited := time.Since(start); rec.Code != http.StatusOK || waited > 3*time.Second {
		t.Fatalf("after the holder died: %d after %v; want the lock within LockLease (1s)", rec.Code, waited)
	}
}

// TestHelperLockHolder is the process TestHolderKilledInAnotherProcess
// kills: with MONGOSTORE_LOCK_HOLDER set, it takes the lock of the session
// whose cookie it is given, says so, and exits without releasing it.
// Without it, it does nothing.
func TestHelperLockHolder(t *testing.T) {
	args := strings.Fields(os.Getenv("MONGOSTORE_LOCK_HOLDER"))
	if len(args) != 2 {
		return
	}
	store := storeOn(t, testClient(t, nil).Database(testDatabase).Collection(args[0]), Config{Expiry: ExpiryNone, LockLease: time.Second})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: testSessionName, Value: args[1]})
	s, err := store.Get(r, testSessionName)
	if err != nil || s.IsNew {
		t.Fatalf("load: %v", err)
	}
	if _, err := store.Lock(r, s); err != nil {
		t.Fatal(err)
	}
	fmt.Println("holding the lock")
	os.Exit(0) // as a killed process would: no release
}

// TestLockedDocumentsStillLoad: a lock's fields are no part of the
// session: a locked document loads, saves and ends as any other.
func TestLockedDocumentsStillLoad(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, token := saveNewSession(t, f, map[any]any{"k": "v"})
	lock := bson.D{{Key: "$set", Value: bson.D{{Key: fieldLock, Value: "someone"}, {Key: fieldLockUntil, Value: time.Now().Add(time.Hour)}}}}
	if _, err := f.coll.UpdateOne(context.Background(), bson.D{{Key: fieldID, Value: docID(token)}}, lock); err != nil {
		t.Fatal(err)
	}
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err := f.store.Get(r, testSessionName)
		if err != nil || s.IsNew {
			t.Fatalf("load of a locked session: %v", err)
		}
		s.Values["k"] = "w"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	if s, err := loadSession(t, f, b); err != nil || s.Values["k"] != "w" {
		t.Fatalf("after a save: %v, %v", s.Values, err)
	}
	if _, err := f.store.Lock(httptest.NewRequest(http.MethodGet, "/", nil), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Lock(nil session) = %v", err)
	}
}

// TestFailedLockKeepsTheSession: when Lock fails inside the plain
// middleware (another request holds the lock past LockWait, or the session
// ended meanwhile), the session stays as loaded: the middleware saves it
// as any other (never as a new session), and an ending stays ended.
func TestFailedLockKeepsTheSession(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, LockWait: 200 * time.Millisecond})
	b, token := saveNewSession(t, f, map[any]any{"k": "v"})
	r, held := loaded(t, f, b)
	unlock, err := f.store.Lock(r, held)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		before func()
		want   error
		docs   int64
	}{
		{"locked elsewhere", func() {}, ErrLocked, 1},
		{"ended meanwhile", func() {
			unlock()
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Options.MaxAge = -1
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
			})
		}, ErrSessionGone, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := b.request()
			sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				s.Values["k"] = "changed"
				tc.before()
				if _, err := f.store.Lock(r, s); !errors.Is(err, tc.want) {
					t.Errorf("Lock = %v, want %v", err, tc.want)
				}
				http.Error(w, "busy", http.StatusServiceUnavailable)
			}).ServeHTTP(rec, req)
			c := responseCookie(rec.Header(), testSessionName)
			if c != nil && c.MaxAge >= 0 && (tc.docs == 0 || docID(tokenOf(t, f, c.Value)) != docID(token)) {
				t.Errorf("the response sets a session cookie of another session: %v", c)
			}
			if n := f.count(t); n != tc.docs {
				t.Errorf("%d documents, want %d", n, tc.docs)
			}
		})
	}
}

// tokenOf returns the token a cookie value of f's store holds.
func tokenOf(t *testing.T, f *storeFixture, value string) string {
	t.Helper()
	token, _, err := f.store.cookies.decode(testSessionName, value)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// TestReleaseSparesAConcurrentSave checks that releasing a lock never
// undoes a save or regeneration of the same process landing at once (on
// FerretDB v1, an update writes back the whole document it read).
func TestReleaseSparesAConcurrentSave(t *testing.T) {
	for _, regenerate := range []bool{false, true} {
		t.Run(fmt.Sprintf("regenerate %v", regenerate), func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			ctx := context.Background()
			for i := range 30 {
				b, token := saveNewSession(t, f, map[any]any{"n": i})
				chain, secret, _ := splitToken(token)
				holder, now := newHolderID(), f.store.cfg.Now()
				if raw, _, err := f.store.coll.acquire(ctx, chain, hashHex(secret), holder, now, now.Add(time.Minute)); raw == nil || err != nil {
					t.Fatalf("acquire: %v", err)
				}
				r, s := loaded(t, f, b)
				s.Values["k"] = "v"
				rec, start, done := httptest.NewRecorder(), make(chan struct{}), make(chan struct{})
				go func() { <-start; f.store.release(ctx, chain, holder); close(done) }()
				close(start)
				err := s.Save(r, rec)
				if regenerate {
					err = f.store.RegenerateID(r, rec, s)
				}
				<-done
				if err != nil {
					t.Fatalf("iteration %d: %v", i, err)
				}
				b.absorb(rec.Header())
				if got, err := loadSession(t, f, b); err != nil || got.Values["k"] != "v" {
					t.Fatalf("iteration %d: the save returned nil, yet the session loads %v (%v)", i, got.Values, err)
				}
			}
		})
	}
}

// decodePanics is a codec whose Decode panics while armed: a bug in a
// custom codec, or in a type it decodes.
type decodePanics struct {
	Codec
	armed atomic.Bool
}

func (c *decodePanics) Decode(b []byte) (map[any]any, error) {
	if c.armed.Load() {
		panic("codec bug")
	}
	return c.Codec.Decode(b)
}

// TestCodecPanicLeavesNoLock: a codec that panics as a locked load opens
// the document, through the middleware or Lock, lets the panic through and
// leaves the session unlocked, not locked until LockLease lapses.
func TestCodecPanicLeavesNoLock(t *testing.T) {
	codec := &decodePanics{Codec: compactCodec{&keyCache{}}}
	f := newFixture(t, Config{Expiry: ExpiryNone, Codec: codec, LockLease: time.Hour})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	serveMiddleware := func() any {
		h := exclusiveHandler(f.store, func(http.ResponseWriter, *http.Request, *sessions.Session) {
			t.Error("the handler ran")
		})
		codec.armed.Store(true)
		return mwServeRecovered(h, httptest.NewRecorder(), b.request())
	}
	lock := func() (v any) {
		r := b.request()
		s, err := f.store.Get(r, testSessionName)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { v = recover() }()
		codec.armed.Store(true)
		_, _ = f.store.Lock(r, s)
		return nil
	}
	for name, panicking := range map[string]func() any{"middleware": serveMiddleware, "Lock": lock} {
		t.Run(name, func(t *testing.T) {
			defer codec.armed.Store(false)
			if v := panicking(); v != "codec bug" {
				t.Fatalf("panicked with %v, want the codec's panic", v)
			}
			if lockedDocument(t, f, b) {
				t.Fatal("the session stays locked after the codec panicked")
			}
		})
	}
}

// TestLockAfterAFailedLoad: Lock of a session whose load failed (Get's
// error ignored) fails too, with ErrDatabase: a section must not run
// unlocked on empty values while the stored session may hold others.
func TestLockAfterAFailedLoad(t *testing.T) {
	store, _ := unreachableStore(t, Config{Timeout: 200 * time.Millisecond})
	r := httptest.NewRequest(http.MethodGet, "http://example.test/", nil)
	r.AddCookie(&http.Cookie{Name: testSessionName, Value: signedCookie(t, store)})
	s, err := store.Get(r, testSessionName)
	if !errors.Is(err, ErrDatabase) {
		t.Fatalf("Get = %v, want ErrDatabase", err)
	}
	if _, err := store.Lock(r, s); !errors.Is(err, ErrDatabase) {
		t.Fatalf("Lock = %v for a session whose load failed, want ErrDatabase", err)
	}
}

// TestSessionsLoadedBeforeTheMiddleware: code before the middleware (an
// auth check) that loads the session with Get hands the middleware
// gorilla's registry's session, loaded without the lock. Exclusive still
// runs the handlers one at a time, and under the plain middleware Lock's
// unlock still leaves the lock to the middleware's save: a one-time token
// is accepted once in every trial.
func TestSessionsLoadedBeforeTheMiddleware(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	var accepted atomic.Int64
	locking := f.store.Middleware(testSessionName, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		unlock, err := f.store.Lock(r, s)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer unlock() // under the middleware, it leaves the lock to the middleware's save
		if s.Values["token"] == "t" {
			time.Sleep(time.Millisecond)
			delete(s.Values, "token")
			accepted.Add(1)
		}
	}))
	for _, tc := range []struct {
		name  string
		inner http.Handler
	}{{"Exclusive", tokenHandler(f.store, &accepted)}, {"Lock under the middleware", locking}} {
		t.Run(tc.name, func(t *testing.T) {
			auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, err := f.store.Get(r, testSessionName); err != nil {
					t.Error(err)
				}
				tc.inner.ServeHTTP(w, r)
			})
			for trial := range 10 {
				b, _ := saveNewSession(t, f, map[any]any{"token": "t"})
				accepted.Store(0)
				var wg sync.WaitGroup
				for range 10 {
					wg.Go(func() { auth.ServeHTTP(httptest.NewRecorder(), b.request()) })
				}
				wg.Wait()
				if n := accepted.Load(); n != 1 || lockedDocument(t, f, b) {
					t.Fatalf("trial %d: %d requests accepted the token, want 1; locked after: %v", trial, n, lockedDocument(t, f, b))
				}
			}
		})
	}
}

// TestLockKeepsWhatTheRequestSetOfItsSession: Lock reloads the session,
// and keeps over it what the request set since its load besides values: a
// regeneration pending after a failed RegenerateID (the pre-login cookie
// must not load the saved session), a logout's MaxAge, a "remember me".
func TestLockKeepsWhatTheRequestSetOfItsSession(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, MaxSize: 1024})
	t.Run("a pending regeneration", func(t *testing.T) {
		b, _ := saveNewSession(t, f, map[any]any{"n": 1})
		old := *b.cookies[testSessionName]
		r, s := loaded(t, f, b)
		s.Values["login"], s.Values["big"] = "ada", strings.Repeat("x", 2048)
		if err := f.store.RegenerateID(r, httptest.NewRecorder(), s); !errors.Is(err, ErrEncode) {
			t.Fatalf("RegenerateID = %v, want ErrEncode", err)
		}
		delete(s.Values, "big")
		lockAndSave(t, f.store, r, s)
		stale := newBrowser()
		stale.cookies[testSessionName] = &old
		if got, _ := loadSession(t, f, stale); !got.IsNew {
			t.Fatalf("the pre-login cookie loads %v: Lock dropped the pending regeneration", got.Values)
		}
	})
	for _, maxAge := range []int{-1, 90 * 24 * 3600} {
		t.Run(fmt.Sprintf("MaxAge %d", maxAge), func(t *testing.T) {
			b, _ := saveNewSession(t, f, map[any]any{"n": 1})
			r, s := loaded(t, f, b)
			s.Options.MaxAge = maxAge
			lockAndSave(t, f.store, r, s)
			got, err := loadSession(t, f, b)
			if err != nil || got.IsNew != (maxAge < 0) || (maxAge > 0 && got.Options.MaxAge != maxAge) {
				t.Fatalf("after the save: IsNew %v, MaxAge %d, %v; Lock dropped MaxAge %d", got.IsNew, got.Options.MaxAge, err, maxAge)
			}
		})
	}
}

// lockAndSave takes the lock of s, saves it and releases the lock.
func lockAndSave(t *testing.T, store *Store, r *http.Request, s *sessions.Session) {
	t.Helper()
	unlock, err := store.Lock(r, s)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := s.Save(r, httptest.NewRecorder()); err != nil {
		t.Fatal(err)
	}
}
