package mongostore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The tests of format 3's chain: one document per sign-in, for its whole
// life. Each checks a defect of format 2 (which moved a session to a new
// document at every RegenerateID), failing on it.

// TestRegenerateIDKeepsTheDocument: RegenerateID is one update of the one
// document, which changes its secret: the _id and the handle stay, the old
// cookie loads nothing from then on, the new one loads the session.
func TestRegenerateIDKeepsTheDocument(t *testing.T) {
	events := &eventLog{}
	f := newFixture(t, Config{Expiry: ExpiryNone, OnEvent: events.add})
	b, token := saveNewSession(t, f, map[any]any{"k": "v"})
	before := storedDocument(t, f, token)
	old := *b.cookies[testSessionName]
	f.cmds.reset()
	var regenerated string
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
		regenerated = s.ID
	})
	if got := strings.Join(commandNames(f.cmds), " "); got != "find save" {
		t.Fatalf("commands %q, want a load and one update", got)
	}
	if docID(regenerated) != docID(token) || regenerated == token {
		t.Fatalf("token %q after RegenerateID, want the chain of %q with a new secret", regenerated, token)
	}
	after := storedDocument(t, f, regenerated)
	if after.Lookup(fieldSID).StringValue() == before.Lookup(fieldSID).StringValue() || f.count(t) != 1 {
		t.Fatalf("%d documents, sid %v -> %v; want one document with a new sid", f.count(t), before.Lookup(fieldSID), after.Lookup(fieldSID))
	}
	stale := newBrowser()
	stale.cookies[testSessionName] = &old
	if isLive(t, f, stale) || !isLive(t, f, b) {
		t.Fatal("after RegenerateID the old cookie loads, or the new one does not")
	}
	got := events.wantEvents(t, "regenerate", "created", "regenerated")
	if got[0].Handle != got[1].Handle || got[0].Handle != handle(docID(token)) {
		t.Fatalf("handles %q, %q; want the chain's, unchanged", got[0].Handle, got[1].Handle)
	}
}

// TestStaleSecretCannotSave: a request that loaded the session before
// another regenerated it cannot save it, and sends no cookie: the old
// secret never comes back.
func TestStaleSecretCannotSave(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	r, stale := loaded(t, f, b)
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["login"] = "ada"
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	stale.Values["late"] = 1
	rec := httptest.NewRecorder()
	if err := stale.Save(r, rec); !errors.Is(err, ErrSessionGone) {
		t.Fatalf("Save with the old secret = %v, want ErrSessionGone", err)
	}
	if c := rec.Header().Values("Set-Cookie"); len(c) != 0 {
		t.Fatalf("the stale save set %q", c)
	}
	if s, err := loadSession(t, f, b); err != nil || s.Values["login"] != "ada" || s.Values["late"] != nil {
		t.Fatalf("after both: %v, %v; want the regenerated session alone", s.Values, err)
	}
}

// TestFailedRegenerateNeverUndoesAnEnding: whatever makes a RegenerateID
// fail, an ending that ran before its write stays: the session is gone,
// and nothing was inserted.
func TestFailedRegenerateNeverUndoesAnEnding(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, f *storeFixture, b *browser) // runs after the load, before RegenerateID
	}{
		{"logout", func(t *testing.T, f *storeFixture, b *browser) {
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Options.MaxAge = -1
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"another owner, then sign-out everywhere", func(t *testing.T, f *storeFixture, b *browser) {
			other := newBrowser()
			other.cookies = b.cookies
			other.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				SetOwner(s, "eve", "")
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
			})
			if n, err := f.store.EndOtherSessions(context.Background(), "eve", nil); n != 1 || err != nil {
				t.Fatalf("EndOtherSessions = %d, %v", n, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
			r, s := loaded(t, f, b)
			tc.before(t, f, b)
			f.cmds.reset()
			if err := f.store.RegenerateID(r, httptest.NewRecorder(), s); !errors.Is(err, ErrSessionGone) {
				t.Fatalf("RegenerateID = %v, want ErrSessionGone", err)
			}
			if names := commandNames(f.cmds); strings.Contains(strings.Join(names, " "), "insert") {
				t.Fatalf("RegenerateID sent %q", names)
			}
			if f.count(t) != 0 {
				t.Fatalf("%d documents after the ending, want 0", f.count(t))
			}
		})
	}
}

// TestEndingRacingRegenerateIsCountedOnce: EndOtherSessions racing
// RegenerateID of the owner's one session ends it once, reports it once,
// and leaves nothing live.
func TestEndingRacingRegenerateIsCountedOnce(t *testing.T) {
	events := &eventLog{}
	f := newFixture(t, Config{Expiry: ExpiryNone, OnEvent: events.add})
	for round := range 30 {
		b, _ := saveNewSession(t, f, map[any]any{ownerKey: "ada"})
		events.take()
		r, s := loaded(t, f, b)
		var wg sync.WaitGroup
		var n int64
		var endErr, regenErr error
		wg.Go(func() { n, endErr = f.store.EndOtherSessions(context.Background(), "ada", nil) })
		wg.Go(func() { regenErr = f.store.RegenerateID(r, httptest.NewRecorder(), s) })
		wg.Wait()
		if endErr != nil || n != 1 {
			t.Fatalf("round %d: EndOtherSessions = %d, %v; want 1", round, n, endErr)
		}
		if regenErr != nil && !errors.Is(regenErr, ErrSessionGone) {
			t.Fatalf("round %d: RegenerateID = %v", round, regenErr)
		}
		got, _ := events.take()
		if ended := strings.Count(strings.Join(got, " "), "ended/"); ended != 1 {
			t.Fatalf("round %d: events %q, want one ending", round, got)
		}
		if f.count(t) != 0 {
			t.Fatalf("round %d: %d documents left", round, f.count(t))
		}
	}
}

// storeOwned inserts n sessions of owner sealed by f.store, as many logins
// would, and returns how many it stored.
func storeOwned(t *testing.T, f *storeFixture, n int, owner string) {
	t.Helper()
	storeOwnedAt(t, f, n, owner, time.Now())
}

// storeOwnedAt stores n sessions of owner, saved at now.
func storeOwnedAt(t *testing.T, f *storeFixture, n int, owner string, now time.Time) {
	t.Helper()
	for start := 0; start < n; start += 1000 {
		var docs []any
		for range min(1000, n-start) {
			d := f.store.document(newSaving(t, f.store, map[any]any{ownerKey: owner}, now))
			docs = append(docs, d.raw())
		}
		if _, err := f.coll.InsertMany(context.Background(), docs); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEndOtherSessionsEndsThemAll: sign-out everywhere ends every session
// of the owner however many (more than format 2's 8 rounds of 1,000 on
// DocumentDB; the embedded server scans for each command, so fewer there),
// reports each once, and leaves none but one it cannot read, which every
// listing reads past.
func TestEndOtherSessionsEndsThemAll(t *testing.T) {
	n := 8100
	if testServerKind == "embedded" {
		n = 1100
	}
	events := &eventLog{}
	f := newFixture(t, Config{Expiry: ExpiryNone, OnEvent: events.add})
	storeUnreadable(t, f, 1, "ada")
	storeOwned(t, f, n, "ada")
	ended, err := f.store.EndOtherSessions(context.Background(), "ada", nil)
	if err != nil || ended != int64(n) {
		t.Fatalf("EndOtherSessions = %d, %v; want %d", ended, err, n)
	}
	if got, _ := events.take(); len(got) != n {
		t.Fatalf("%d events, want %d", len(got), n)
	}
	if f.count(t) != 1 {
		t.Fatalf("%d sessions left, want the unreadable one", f.count(t))
	}
}

// storeUnreadable stores n sessions of owner that fail their MAC check.
func storeUnreadable(t *testing.T, f *storeFixture, n int, owner string) {
	t.Helper()
	for range n {
		d := f.store.document(newSaving(t, f.store, map[any]any{ownerKey: owner}, time.Now()))
		d.mac[0] ^= 1
		if _, err := f.coll.InsertOne(context.Background(), d.raw()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnreadableSessionsHideNoOthers: sessions the store cannot read are
// read past, however many fill a listing: the sessions behind them are
// listed, ended by sign-out everywhere, and held to the limit. Listings
// used to stop at the cap, unreadable ones counted, and return nil with
// usable sessions left unseen.
func TestUnreadableSessionsHideNoOthers(t *testing.T) {
	for _, c := range []struct {
		name     string
		limit    int
		run      func(t *testing.T, f *storeFixture) error
		wantLeft int64
	}{
		{"list", 0, func(t *testing.T, f *storeFixture) error {
			listed, err := f.store.ListSessions(context.Background(), "ada", nil)
			if len(listed) != 3 {
				t.Errorf("ListSessions listed %d sessions, want the 3 readable ones", len(listed))
			}
			return err
		}, 3 + 3},
		{"end others", 0, func(t *testing.T, f *storeFixture) error {
			n, err := f.store.EndOtherSessions(context.Background(), "ada", nil)
			if n != 3 {
				t.Errorf("EndOtherSessions ended %d, want the 3 readable ones", n)
			}
			return err
		}, 3},
		{"limit", 2, func(t *testing.T, f *storeFixture) error {
			var err error
			newBrowser().do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				SetOwner(s, "ada", "")
				err = s.Save(r, w)
			})
			return err
		}, 3 + 2}, // the unreadable ones, the login, the latest other
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: c.limit})
			f.store.coll.ownedCap = 3 // listings of 3 sessions stand for listings of 1,000
			storeUnreadable(t, f, 3, "ada")
			storeOwned(t, f, 3, "ada")
			if err := c.run(t, f); err != nil {
				t.Fatal(err)
			}
			if left := f.count(t); left != c.wantLeft {
				t.Fatalf("%d sessions left, want %d", left, c.wantLeft)
			}
		})
	}
}

// TestSessionsOfAnotherCodecAreListedAndEnded: a session the keys verify
// but whose values this store's codec cannot decode (saved by an instance
// with a newer codec, or types this process has not registered: an
// operator's tool) is still its owner's, by the owner digest: listed with
// no device, and ended. It used to be read past, and left signed in.
func TestSessionsOfAnotherCodecAreListedAndEnded(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	other := &storeFixture{store: storeOn(t, f.coll, Config{Expiry: ExpiryNone, Codec: JSONCodec{}}), coll: f.coll}
	loginAs(t, f, "ada", "laptop")
	loginAs(t, other, "ada", "phone")
	loginAs(t, other, "bob", "phone")
	list, err := f.store.ListSessions(context.Background(), "ada", nil)
	if err != nil || !slices.Equal(devices(list), []string{"", "laptop"}) && !slices.Equal(devices(list), []string{"laptop", ""}) {
		t.Fatalf("ListSessions = %v, %v; want the laptop's and one with no device", devices(list), err)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "listed by their owner digest ones whose values the codec cannot decode") {
		t.Fatalf("no warning of the session listed by its owner digest; the store logged:\n%s", logs)
	}
	if n, err := f.store.EndOtherSessions(context.Background(), "ada", nil); n != 2 || err != nil {
		t.Fatalf("EndOtherSessions = %d, %v; want both of ada's ended", n, err)
	}
	if left := f.count(t); left != 1 {
		t.Fatalf("%d sessions left, want bob's alone", left)
	}
}

// TestEndOtherSessionsStopsChasingLogins: sign-out everywhere ends the
// sessions saved while it runs, but not without end: if every ending is
// followed by a new login, it gives up with ErrConflict after 3
// rounds beyond the first, having ended all it found until then.
func TestEndOtherSessionsStopsChasingLogins(t *testing.T) {
	for _, c := range []struct {
		name     string
		logins   int // new sessions, one after each ending, at most
		ended    int64
		conflict bool
	}{
		{"logins stop", 3, 5, false},
		{"logins stop at the last chase", 2 * maxChases, 2 * (1 + maxChases), false},
		{"logins go on", 100, 2 * (1 + maxChases), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f *storeFixture
			logins := c.logins
			f = newFixture(t, Config{Expiry: ExpiryNone, OnEvent: func(_ context.Context, e Event) {
				if e.Kind == EventEnded && logins != 0 {
					logins--
					storeOwned(t, f, 1, "ada") // a login as the ending runs
				}
			}})
			storeOwned(t, f, 2, "ada")
			n, err := f.store.EndOtherSessions(context.Background(), "ada", nil)
			if n != c.ended || errors.Is(err, ErrConflict) != c.conflict || (err == nil) == c.conflict {
				t.Fatalf("EndOtherSessions = %d, %v; want %d ended, ErrConflict %v", n, err, c.ended, c.conflict)
			}
			if left, want := f.count(t), map[bool]int64{false: 0, true: 2}[c.conflict]; left != want {
				t.Fatalf("%d sessions left, want %d", left, want)
			}
		})
	}
}

// TestEndOtherSessionsStopsAFlood: logins that come faster than an ending
// ends them fill every listing, so none holds all the owner's sessions;
// sign-out everywhere still gives up with ErrConflict, and a limit stops
// with no error, once its listings hold no target from before it began
// (the limit's own session is from before), each counting right what it
// ended.
func TestEndOtherSessionsStopsAFlood(t *testing.T) {
	const flood = 300 // logins at most, far more than are ended before it stops
	for _, limit := range []int{0, 2} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			var f *storeFixture
			logins, ended := 0, 0
			f = newFixture(t, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: limit, OnEvent: func(_ context.Context, e Event) {
				if e.Kind != EventEnded {
					return
				}
				if ended++; logins < flood {
					logins += 2
					storeOwned(t, f, 2, "ada") // two logins for each ending
				}
			}})
			f.store.coll.ownedCap = 5 // listings of 5 sessions stand for listings of 1,000
			storeOwned(t, f, 12, "ada")
			total := 12
			if limit == 0 {
				n, err := f.store.EndOtherSessions(context.Background(), "ada", nil)
				if !errors.Is(err, ErrConflict) || n != int64(ended) {
					t.Fatalf("EndOtherSessions = %d, %v; want ErrConflict, %d ended", n, err, ended)
				}
			} else {
				saveNewSession(t, f, map[any]any{ownerKey: "ada"}) // a login: its limit gives no error
				total++
			}
			if left := f.count(t); logins >= flood || left != int64(total+logins-ended) {
				t.Fatalf("after %d logins (want fewer than %d), %d sessions left of %d, %d ended", logins, flood, left, total+logins, ended)
			}
		})
	}
}

// TestEndOtherSessionsStopsWhenAnOldSessionComesBack: a session from
// before sign-out everywhere began that is listed again after each ending
// (a lasting stale index entry, say) holds off its bound once, not for
// as long as logins keep every listing full.
func TestEndOtherSessionsStopsWhenAnOldSessionComesBack(t *testing.T) {
	const most = 100 // listings topped up at most
	var f *storeFixture
	var old bson.Raw
	var listings atomic.Int64
	client := hookedClient(t, func(name string) {
		if name != "find" || listings.Add(1) > most {
			return
		}
		// Before each listing: the old session back, and logins up to a full listing.
		_, _ = f.coll.InsertOne(context.Background(), old)
		storeOwned(t, f, 5-int(f.count(t)), "ada")
	})
	coll := testCollection(t, client)
	store := storeOn(t, coll, Config{Expiry: ExpiryNone})
	store.coll.ownedCap = 5 // listings of 5 sessions stand for listings of 1,000
	f = &storeFixture{store: store, coll: testClient(t, nil).Database(testDatabase).Collection(coll.Name())}
	d := store.document(newSaving(t, store, map[any]any{ownerKey: "ada"}, time.Now()))
	old = d.raw()
	n, err := store.EndOtherSessions(context.Background(), "ada", nil)
	if !errors.Is(err, ErrConflict) || listings.Load() >= most {
		t.Fatalf("EndOtherSessions = %d, %v after %d listings; want ErrConflict before %d", n, err, listings.Load(), most)
	}
}

// TestEndOtherSessionsUnderAFrozenClock: with Config.Now standing still,
// sessions saved at the very instant sign-out everywhere begins are from
// before it, not logins meanwhile: they all end, however many listings
// they take.
func TestEndOtherSessionsUnderAFrozenClock(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now})
	f.store.coll.ownedCap = 5 // listings of 5 sessions stand for listings of 1,000
	storeOwnedAt(t, f, 5*(2+maxChases)+3, "ada", clock.Now())
	n, err := f.store.EndOtherSessions(context.Background(), "ada", nil)
	if left := f.count(t); err != nil || left != 0 || n != 5*(2+maxChases)+3 {
		t.Fatalf("EndOtherSessions = %d, %v, %d sessions left; want all %d ended", n, err, left, 5*(2+maxChases)+3)
	}
}

// TestEndOtherSessionsLosingToAnotherEnding: a delete that finds nothing
// because another request ended the session first is no failure, however
// many rounds in a row it happens (concurrent logins under
// MaxSessionsPerOwner race so): only a session listed again after such a
// delete counts against the rounds' bound.
func TestEndOtherSessionsLosingToAnotherEnding(t *testing.T) {
	var other *storeFixture
	var deletes atomic.Int64
	client := hookedClient(t, func(name string) {
		if name == "delete" && deletes.Add(1) <= maxIdleRounds {
			// Another request ends ada's sessions first, and she signs in again.
			if _, err := other.coll.DeleteMany(context.Background(), bson.D{}); err != nil {
				t.Error(err)
			}
			storeOwned(t, other, 1, "ada")
		}
	})
	coll := testCollection(t, client)
	store := storeOn(t, coll, Config{Expiry: ExpiryNone})
	other = &storeFixture{store: store, coll: testClient(t, nil).Database(testDatabase).Collection(coll.Name())}
	storeOwned(t, other, 1, "ada")
	n, err := store.EndOtherSessions(context.Background(), "ada", nil)
	if n != 1 || err != nil {
		t.Fatalf("EndOtherSessions = %d, %v; want the one left after %d lost deletes ended, no error", n, err, maxIdleRounds)
	}
	if left := other.count(t); left != 0 {
		t.Fatalf("%d sessions left, want none", left)
	}
}

// TestEndingsSpareASessionSignedInToByAnother: a session listed as ada's
// that bob signs in to before its delete (on a shared computer, with
// RegenerateID and SetOwner, which keep its document) is bob's: neither
// EndOtherSessions nor EndSession ends it.
func TestEndingsSpareASessionSignedInToByAnother(t *testing.T) {
	for _, end := range []string{"EndOtherSessions", "EndSession"} {
		t.Run(end, func(t *testing.T) {
			var plain *storeFixture
			var shared *browser
			var deletes atomic.Int64
			client := hookedClient(t, func(name string) {
				if name == "delete" && deletes.Add(1) == 1 {
					shared.do(func(w http.ResponseWriter, r *http.Request) {
						s, _ := plain.store.Get(r, testSessionName)
						SetOwner(s, "bob", "shared computer")
						if err := plain.store.RegenerateID(r, w, s); err != nil {
							t.Errorf("bob's sign-in: %v", err)
						}
					})
				}
			})
			coll := testCollection(t, client)
			hooked := &storeFixture{store: storeOn(t, coll, Config{Expiry: ExpiryNone}), coll: coll}
			plainColl := testClient(t, nil).Database(testDatabase).Collection(coll.Name())
			plain = &storeFixture{store: storeOn(t, plainColl, Config{Expiry: ExpiryNone}), coll: plainColl}
			phone, _ := loginAs(t, hooked, "ada", "phone")
			shared, _ = loginAs(t, hooked, "ada", "shared computer")
			var n int64
			var err error
			phone.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := hooked.store.Get(r, testSessionName)
				if end == "EndOtherSessions" {
					n, err = hooked.store.EndOtherSessions(r.Context(), "ada", s)
					return
				}
				list, _ := hooked.store.ListSessions(r.Context(), "ada", s)
				i := slices.IndexFunc(list, func(o OwnedSession) bool { return !o.Current })
				var ended bool
				if _, ended, err = hooked.store.EndSession(r.Context(), "ada", list[i].Handle, s); ended {
					n = 1
				}
			})
			if n != 0 || err != nil || deletes.Load() == 0 {
				t.Fatalf("%s = %d ended, %v (%d deletes); want none ended, no error", end, n, err, deletes.Load())
			}
			if got := listFrom(t, plain, shared, "bob"); len(got) != 1 || !got[0].Current {
				t.Fatalf("bob's sessions = %v; want his sign-in on the shared computer", got)
			}
		})
	}
}

// TestLimitHasItsOwnBudget: the per-owner limit runs after the login's
// save and its event, with its own Timeout: a slow subscriber does not
// leave the owner over the limit.
func TestLimitHasItsOwnBudget(t *testing.T) {
	cfg := Config{Expiry: ExpiryNone, MaxSessionsPerOwner: 1, Timeout: 300 * time.Millisecond,
		OnEvent: func(_ context.Context, e Event) {
			if e.Kind == EventCreated {
				time.Sleep(500 * time.Millisecond) // longer than Timeout
			}
		}}
	f := newFixture(t, cfg)
	first, _ := saveNewSession(t, f, map[any]any{ownerKey: "ada"})
	second, _ := saveNewSession(t, f, map[any]any{ownerKey: "ada"})
	if isLive(t, f, first) || !isLive(t, f, second) || f.count(t) != 1 {
		t.Fatalf("after two logins with a limit of 1: first live %v, second live %v, %d documents",
			isLive(t, f, first), isLive(t, f, second), f.count(t))
	}
}

// TestLimitLeavesLaterLoginsToTheirOwn: a limit ends the sessions saved
// while it runs for maxChases rounds after one that listed them all, then
// stops with no error: the logins still coming each run a limit of their
// own, and the last of them leaves the owner at the limit. Concurrent
// logins used to chase each other's sessions until one gave up with
// ErrLimit.
func TestLimitLeavesLaterLoginsToTheirOwn(t *testing.T) {
	var f *storeFixture
	var chasing atomic.Bool
	later := 0
	f = newFixture(t, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: 2, OnEvent: func(_ context.Context, e Event) {
		if e.Kind == EventEnded && e.Reason == EndLimit && chasing.Load() {
			later++
			storeOwned(t, f, 1, "ada") // a login whose own limit is still to run
		}
	}})
	storeOwned(t, f, 3, "ada")
	chasing.Store(true)
	saveNewSession(t, f, map[any]any{ownerKey: "ada"}) // its limit ends 2 sessions a round, each followed by a login
	chasing.Store(false)
	if left, want := f.count(t), int64(4); later != 2*(1+maxChases) || left != want {
		t.Fatalf("after the limit: %d later logins, %d sessions left; want %d later logins, %d left (the login, the one kept, the last 2)",
			later, left, 2*(1+maxChases), want)
	}
	saveNewSession(t, f, map[any]any{ownerKey: "ada"})
	if left := f.count(t); left != 2 {
		t.Fatalf("after the last login's limit: %d sessions left, want 2", left)
	}
}

// TestLimitFailureIsReported: a limit that could not be applied is
// reported as ErrLimit, the session saved.
func TestLimitFailureIsReported(t *testing.T) {
	client := testClient(t, nil)
	coll := testCollection(t, client)
	var cut atomic.Bool
	store := storeOn(t, coll, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: 1,
		OnEvent: func(ctx context.Context, e Event) {
			if e.Kind == EventCreated && cut.Load() {
				_ = client.Disconnect(ctx) // the limit's commands fail
			}
		}})
	f := &storeFixture{store: store, coll: testClient(t, nil).Database(testDatabase).Collection(coll.Name())}
	saveNewSession(t, f, map[any]any{ownerKey: "ada"})
	cut.Store(true)
	b := newBrowser()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := store.Get(r, testSessionName)
		SetOwner(s, "ada", "")
		if err := s.Save(r, w); !errors.Is(err, ErrLimit) || !errors.Is(err, ErrDatabase) {
			t.Fatalf("Save = %v, want ErrLimit wrapping ErrDatabase", err)
		}
	})
	if _, ok := b.cookies[testSessionName]; !ok || f.count(t) != 2 {
		t.Fatalf("cookie set %v, %d documents; want the session saved beside the other", ok, f.count(t))
	}
}

// TestHandlesSurviveKeyRotation: a handle listed before a key rotation
// names the same session after it, and ends it.
func TestHandlesSurviveKeyRotation(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	storeOwned(t, f, 1, "ada")
	ctx := context.Background()
	before, err := f.store.ListSessions(ctx, "ada", nil)
	if err != nil || len(before) != 1 {
		t.Fatalf("ListSessions = %v, %v", before, err)
	}
	rotated := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey, nil)
	after, err := rotated.ListSessions(ctx, "ada", nil)
	if err != nil || len(after) != 1 || after[0].Handle != before[0].Handle {
		t.Fatalf("after the rotation: %v, %v; want the handle %q", after, err, before[0].Handle)
	}
	if _, ended, err := rotated.EndSession(ctx, "ada", before[0].Handle, nil); !ended || err != nil {
		t.Fatalf("EndSession with the handle listed before = %v, %v", ended, err)
	}
}

// TestEndingOfAnExpiredSessionIsAnExpiry: a logout after the session's
// idle timeout has passed is reported as an expiry, not a logout.
func TestEndingOfAnExpiredSessionIsAnExpiry(t *testing.T) {
	clock := newFakeClock()
	events := &eventLog{}
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, OnEvent: events.add})
	f.store.MaxAge(60)
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	r, s := loaded(t, f, b)
	clock.Advance(61 * time.Second)
	s.Options.MaxAge = -1
	if err := s.Save(r, httptest.NewRecorder()); err != nil {
		t.Fatal(err)
	}
	events.wantEvents(t, "logout past the idle timeout", "created", "expired")
}

// TestGCReportsOnlySessions: a sweep deletes every expired document, and
// reports an expiry only for those that verify as sessions.
func TestGCReportsOnlySessions(t *testing.T) {
	clock := newFakeClock()
	events := &eventLog{}
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, OnEvent: events.add})
	f.store.MaxAge(60)
	saveNewSession(t, f, map[any]any{"k": "v"})
	foreign := bson.D{{Key: fieldID, Value: "not-a-session"}, {Key: fieldExpiresAt, Value: bson.NewDateTimeFromTime(clock.Now())}}
	if _, err := f.coll.InsertOne(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	events.take()
	clock.Advance(time.Hour)
	if n, err := f.store.DeleteExpired(context.Background()); n != 2 || err != nil {
		t.Fatalf("DeleteExpired = %d, %v; want 2", n, err)
	}
	events.wantEvents(t, "sweep", "expired")
}

// TestNilArguments: a nil context, request, writer or session gives
// ErrInvalidConfig from every exported method, never a panic; a nil
// handler panics at construction, naming what is wrong.
func TestNilArguments(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	s, ctx := f.store, context.Context(nil)
	r, w := httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder()
	session := sessions.NewSession(s, testSessionName)
	_, err1 := NewStore(ctx, f.coll, Config{}, testHashKey)
	_, err2 := s.ListSessions(ctx, "ada", nil)
	_, _, err3 := s.EndSession(ctx, "ada", "h", nil)
	_, err4 := s.EndOtherSessions(ctx, "ada", nil)
	_, err5 := s.DeleteExpired(ctx)
	_, err6 := s.Rekey(ctx, RekeyOptions{})
	_, err7 := s.Get(nil, testSessionName)
	_, err8 := s.New(nil, testSessionName)
	for i, err := range []error{err1, err2, err3, err4, err5, err6, err7, err8,
		s.Save(nil, w, session), s.Save(r, nil, session), s.Save(r, w, nil),
		s.RegenerateID(nil, w, session), s.RegenerateID(r, nil, session), s.RegenerateID(r, w, nil),
		s.Restart(nil, session), s.Restart(r, nil)} {
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("call %d: %v, want ErrInvalidConfig", i+1, err)
		}
	}
	if _, ok := s.Times(nil); ok {
		t.Error("Times(nil) = ok")
	}
	func() {
		defer func() {
			if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "SetOwner: nil session") {
				t.Errorf("SetOwner(nil) panicked with %v, want a message naming the nil session", v)
			}
		}()
		SetOwner(nil, "ada", "")
	}()
	defer func() {
		if v := recover(); v == nil || !strings.Contains(v.(string), "nil handler") {
			t.Fatalf("Middleware(nil handler) panicked with %v, want a message naming the nil handler", v)
		}
	}()
	s.Middleware(testSessionName, nil)(nil)
}

// TestRekeyRefusals: Rekey refuses a key list that would store encrypted
// sessions plain unless asked to, and says what it did when asked; on a
// server whose writes are not atomic across processes (FerretDB v1) it
// refuses to write unless SingleProcess.
func TestRekeyRefusals(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey)
	saveNewSession(t, f, map[any]any{"k": "v"})
	ctx := context.Background()
	decrypting := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey, testBlockKey)
	if c, err := decrypting.Rekey(ctx, RekeyOptions{SingleProcess: true}); !errors.Is(err, ErrInvalidConfig) || c.Changed != 0 {
		t.Fatalf("Rekey that would decrypt = %+v, %v; want ErrInvalidConfig and nothing changed", c, err)
	}
	if c, err := decrypting.Rekey(ctx, RekeyOptions{SingleProcess: true, Decrypt: true}); err != nil || c.Changed != 1 || c.Decrypted != 1 {
		t.Fatalf("Rekey with Decrypt = %+v, %v; want 1 changed, decrypted", c, err)
	}
	encrypting := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey, otherHashKey, nil)
	c, err := encrypting.Rekey(ctx, RekeyOptions{})
	if atomic := testServerKind != "embedded"; atomic != (err == nil) || (atomic && c.Encrypted != 1) {
		t.Fatalf("Rekey without SingleProcess on the %s server = %+v, %v", testServerKind, c, err)
	}
	if err != nil && !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Rekey refused with %v, want ErrInvalidConfig", err)
	}
}

// TestLimitOfOneGivesUpWithNoError: a limit of 1 keeps no other session,
// and, as any limit, gives up on logins that keep coming with no error:
// each runs a limit of its own.
func TestLimitOfOneGivesUpWithNoError(t *testing.T) {
	var f *storeFixture
	var chasing atomic.Bool
	f = newFixture(t, Config{Expiry: ExpiryNone, MaxSessionsPerOwner: 1, OnEvent: func(_ context.Context, e Event) {
		if e.Kind == EventEnded && e.Reason == EndLimit && chasing.Load() {
			storeOwned(t, f, 1, "ada") // a login whose own limit is still to run
		}
	}})
	storeOwned(t, f, 2, "ada")
	chasing.Store(true)
	saveNewSession(t, f, map[any]any{ownerKey: "ada"}) // fails the test if Save returns an error
	chasing.Store(false)
}
