package mongostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore/internal/faultproxy"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestDiffApply(t *testing.T) {
	for _, tc := range []struct {
		name              string
		base, mine, their map[any]any
		want              map[any]any
	}{
		{"different keys",
			map[any]any{"a": 1}, map[any]any{"a": 1, "b": 2}, map[any]any{"a": 1, "c": 3},
			map[any]any{"a": 1, "b": 2, "c": 3}},
		{"same key: mine is later",
			map[any]any{"a": 1}, map[any]any{"a": 2}, map[any]any{"a": 3},
			map[any]any{"a": 2}},
		{"a key only they changed keeps their value",
			map[any]any{"a": 1, "b": 1}, map[any]any{"a": 1, "b": 2}, map[any]any{"a": 5, "b": 1},
			map[any]any{"a": 5, "b": 2}},
		{"deleted by me",
			map[any]any{"a": 1, "b": 1}, map[any]any{"b": 1}, map[any]any{"a": 1, "b": 1, "c": 1},
			map[any]any{"b": 1, "c": 1}},
		{"deleted by them, unchanged by me",
			map[any]any{"a": 1, "b": 1}, map[any]any{"a": 1, "b": 1}, map[any]any{"b": 1},
			map[any]any{"b": 1}},
		{"flash read by me, one added by them",
			map[any]any{"_flash": []any{"x"}}, map[any]any{}, map[any]any{"_flash": []any{"x", "z"}},
			map[any]any{"_flash": []any{"z"}}},
		{"flash read by me, mine added after",
			map[any]any{"_flash": []any{"x"}}, map[any]any{"_flash": []any{"y"}}, map[any]any{"_flash": []any{"x", "z"}},
			map[any]any{"_flash": []any{"z", "y"}}},
		{"flash read by both",
			map[any]any{"_flash": []any{"x"}}, map[any]any{}, map[any]any{},
			map[any]any{}},
		{"flashes added by both to none",
			map[any]any{}, map[any]any{"_flash": []any{"y"}}, map[any]any{"_flash": []any{"z"}},
			map[any]any{"_flash": []any{"z", "y"}}},
		{"a duplicate flash stays a duplicate",
			map[any]any{"_flash": []any{"x"}}, map[any]any{"_flash": []any{"x", "x"}}, map[any]any{"_flash": []any{"x"}},
			map[any]any{"_flash": []any{"x", "x"}}},
		{"a list they replaced with a scalar",
			map[any]any{"l": []any{1}}, map[any]any{"l": []any{1, 2}}, map[any]any{"l": "s"},
			map[any]any{"l": []any{2}}},
		{"a list I replaced with a scalar",
			map[any]any{"l": []any{1}}, map[any]any{"l": "s"}, map[any]any{"l": []any{1, 3}},
			map[any]any{"l": "s"}},
		{"empty base: every key of mine is set, lists item by item",
			nil, map[any]any{"a": 1, "_flash": []any{"x"}}, map[any]any{"a": 0, "b": 2, "_flash": []any{"z"}},
			map[any]any{"a": 1, "b": 2, "_flash": []any{"z", "x"}}},
	} {
		for _, codec := range []Codec{compactCodec{}, shiftyCodec{n: new(atomic.Int64)}} {
			t.Run(fmt.Sprintf("%s/%T", tc.name, codec), func(t *testing.T) {
				got := maps.Clone(tc.their)
				c, err := diff(context.Background(), codec, tc.base, tc.mine)
				if err == nil {
					err = apply(context.Background(), codec, &c, got)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// shiftyCodec is compactCodec with an encoding that differs on every call
// for one value, as gob's of a map does (it writes the map in Go's random
// order): a merge must still tell list items apart, and the middleware
// compare values, not encodings.
type shiftyCodec struct {
	compactCodec
	n *atomic.Int64
}

func (c shiftyCodec) Encode(values map[any]any) ([]byte, error) {
	b, err := c.compactCodec.Encode(values)
	return fmt.Appendf(b, "#%d", c.n.Add(1)), err
}

func (c shiftyCodec) Decode(data []byte) (map[any]any, error) {
	return c.compactCodec.Decode(data[:max(bytes.LastIndexByte(data, '#'), 0)])
}

// TestFlashOfAMapMergesOnce: a flash that the default codec writes in its
// gob form (a map[string]int), read in one tab while another tab saves, is
// not delivered again; one added beside it while another tab saves is
// neither lost nor doubled.
func TestFlashOfAMapMergesOnce(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	flash := map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6}
	for trial := range 20 {
		for _, read := range []bool{true, false} {
			b, _ := saveNewSession(t, f, map[any]any{"_flash": []any{flash}})
			rA, rB := b.request(), b.request()
			sA, errA := f.store.Get(rA, testSessionName)
			sB, errB := f.store.Get(rB, testSessionName)
			if err := errors.Join(errA, errB); err != nil {
				t.Fatal(err)
			}
			want := 0
			if read {
				sA.Flashes()
			} else {
				sA.AddFlash("second")
				want = 2
			}
			sB.Values["other"] = trial
			if err := errors.Join(f.store.Save(rB, httptest.NewRecorder(), sB), f.store.Save(rA, httptest.NewRecorder(), sA)); err != nil {
				t.Fatal(err)
			}
			s, err := loadSession(t, f, b)
			if n := len(s.Flashes()); err != nil || n != want || s.Values["other"] != trial {
				t.Fatalf("trial %d (flash read: %v): %d flashes, other %v, %v; want %d, %d", trial, read, n, s.Values["other"], err, want, trial)
			}
		}
	}
}

// TestLongListMergeIsLinear merges a 300,000-item list against 128
// removed items (0.5 s when each item was compared with each removed one),
// and checks that a merge runs out with its context.
func TestLongListMergeIsLinear(t *testing.T) {
	store := &Store{cfg: Config{Codec: compactCodec{}}}
	theirs := make([]any, 300_000)
	for i := range theirs {
		theirs[i] = fmt.Sprint("item ", i)
	}
	base := map[any]any{"l": slices.Clone(theirs[:128])}
	mine := map[any]any{"l": []any{"new"}}
	ctx := context.Background()
	c, err := diff(ctx, store.cfg.Codec, base, mine)
	if err != nil {
		t.Fatal(err)
	}
	values := map[any]any{"l": slices.Clone(theirs)}
	if err := apply(ctx, store.cfg.Codec, &c, values); err != nil {
		t.Fatal(err)
	}
	got := values["l"].([]any)
	if len(got) != len(theirs)-128+1 || got[0] != theirs[128] || got[len(got)-1] != "new" {
		t.Fatalf("merged %d items, first %v, last %v", len(got), got[0], got[len(got)-1])
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := apply(done, store.cfg.Codec, &c, map[any]any{"l": slices.Clone(theirs)}); !errors.Is(err, ErrDatabase) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a merge past its context: %v, want ErrDatabase wrapping context.Canceled", err)
	}
}

// overlap runs two requests of b that both load the session before either
// saves; first's saves, then second's. Each fn changes the session and
// saves it (or not) and returns the error.
func overlap(t *testing.T, f *storeFixture, b *browser, first, second func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error) (error, error) {
	t.Helper()
	r1, r2 := b.request(), b.request()
	w1, w2 := httptest.NewRecorder(), httptest.NewRecorder()
	s1, err := f.store.Get(r1, testSessionName)
	if err != nil || s1.IsNew {
		t.Fatalf("first load: new %v, %v", s1.IsNew, err)
	}
	s2, err := f.store.Get(r2, testSessionName)
	if err != nil || s2.IsNew {
		t.Fatalf("second load: new %v, %v", s2.IsNew, err)
	}
	err1 := first(w1, r1, s1)
	err2 := second(w2, r2, s2)
	b.absorb(w1.Header())
	b.absorb(w2.Header())
	return err1, err2
}

func setAndSave(key string, value any) func(http.ResponseWriter, *http.Request, *sessions.Session) error {
	return func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Values[key] = value
		return s.Save(r, w)
	}
}

// TestOverlappingSavesLoseNothing: 100 times, two requests load the
// session and each saves a different key; the second save meets the
// first's and merges.
func TestOverlappingSavesLoseNothing(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"start": 1})
	want := map[any]any{"start": 1}
	const trials = 100
	for i := range trials {
		a, c := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		err1, err2 := overlap(t, f, b, setAndSave(a, i), setAndSave(c, i))
		if err1 != nil || err2 != nil {
			t.Fatalf("trial %d: saves: %v, %v", i, err1, err2)
		}
		want[a], want[c] = i, i
	}
	s, err := loadSession(t, f, b)
	if err != nil || s.IsNew {
		t.Fatalf("load: new %v, %v", s.IsNew, err)
	}
	if !reflect.DeepEqual(s.Values, want) {
		lost := 0
		for k := range want {
			if _, ok := s.Values[k]; !ok {
				lost++
			}
		}
		t.Fatalf("%d of %d changes lost", lost, 2*trials)
	}
	if !strings.Contains(f.logs.String(), "merged concurrent changes") {
		t.Error("no merge logged")
	}
}

func TestOverlappingSavesOfOneKey(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"k": "start", "other": 1})
	if err1, err2 := overlap(t, f, b, setAndSave("k", "first"), setAndSave("k", "second")); err1 != nil || err2 != nil {
		t.Fatalf("saves: %v, %v", err1, err2)
	}
	s, _ := loadSession(t, f, b)
	if s.Values["k"] != "second" || s.Values["other"] != 1 {
		t.Fatalf("values %v, want the later save's k and other kept", s.Values)
	}
}

func TestOverlappingFlashes(t *testing.T) {
	read := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		if got := s.Flashes(); len(got) != 1 || got[0] != "x" {
			return fmt.Errorf("flashes %v, want [x]", got)
		}
		s.AddFlash("y")
		return s.Save(r, w)
	}
	add := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.AddFlash("z")
		return s.Save(r, w)
	}
	for _, tc := range []struct {
		name          string
		first, second func(http.ResponseWriter, *http.Request, *sessions.Session) error
		want          []any
	}{
		{"read, then added elsewhere", read, add, []any{"y", "z"}},
		{"added, then read elsewhere", add, read, []any{"z", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b, _ := saveNewSession(t, f, map[any]any{"_flash": []any{"x"}})
			if err1, err2 := overlap(t, f, b, tc.first, tc.second); err1 != nil || err2 != nil {
				t.Fatalf("saves: %v, %v", err1, err2)
			}
			s, _ := loadSession(t, f, b)
			if got := s.Flashes(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("flashes %v, want %v: x read once, y and z kept", got, tc.want)
			}
		})
	}
}

func TestOverlappingLogoutWins(t *testing.T) {
	logout := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Options.MaxAge = -1
		return s.Save(r, w)
	}
	for _, tc := range []struct {
		name          string
		first, second func(http.ResponseWriter, *http.Request, *sessions.Session) error
		gone          int // which save answers ErrSessionGone: 0 none, 2 the second
	}{
		{"logout first", logout, setAndSave("k", 1), 2},
		{"logout second", setAndSave("k", 1), logout, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Expiry: ExpiryNone})
			b, id := saveNewSession(t, f, map[any]any{"start": 1})
			err1, err2 := overlap(t, f, b, tc.first, tc.second)
			if err1 != nil || (tc.gone == 2) != errors.Is(err2, ErrSessionGone) || (tc.gone != 2 && err2 != nil) {
				t.Fatalf("saves: %v, %v", err1, err2)
			}
			if n := f.count(t); n != 0 {
				t.Fatalf("%d documents after the logout, want 0", n)
			}
			if s, _ := loadSession(t, f, b); !s.IsNew {
				t.Fatalf("session %s loads after the logout", id)
			}
		})
	}
}

func TestOverlappingSaveAndSignOutEverywhere(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b := newBrowser()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		SetOwner(s, "ada", "laptop")
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	signOut := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		_, err := f.store.EndOtherSessions(r.Context(), "ada", nil)
		return err
	}
	err1, err2 := overlap(t, f, b, signOut, setAndSave("k", 1))
	if err1 != nil || !errors.Is(err2, ErrSessionGone) {
		t.Fatalf("sign-out %v, save %v; want the save to find the session gone", err1, err2)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d documents, want 0", n)
	}
}

func TestOverlappingRegenerateID(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, oldID := saveNewSession(t, f, map[any]any{"start": 1})
	var newID string
	regenerate := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Values["b"] = 2
		err := f.store.RegenerateID(r, w, s)
		newID = s.ID
		return err
	}
	if err1, err2 := overlap(t, f, b, setAndSave("a", 1), regenerate); err1 != nil || err2 != nil {
		t.Fatalf("save %v, RegenerateID %v", err1, err2)
	}
	if newID == oldID || f.count(t) != 1 {
		t.Fatalf("%d documents; the ID changed: %v", f.count(t), newID != oldID)
	}
	s, _ := loadSession(t, f, b)
	if s.ID != newID || !reflect.DeepEqual(s.Values, map[any]any{"start": 1, "a": 1, "b": 2}) {
		t.Fatalf("loaded %v under the new ID %v; want both changes", s.Values, s.ID == newID)
	}
}

// TestOverlappingSaveKeepsRememberMe: a request that changed only a value
// keeps the lifetime another request gave the session.
func TestOverlappingSaveKeepsRememberMe(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	f.store.MaxAge(3600)
	b, id := saveNewSession(t, f, map[any]any{"start": 1})
	remember := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) error {
		s.Options.MaxAge = 30 * 86400
		return s.Save(r, w)
	}
	if err1, err2 := overlap(t, f, b, remember, setAndSave("k", 1)); err1 != nil || err2 != nil {
		t.Fatalf("saves: %v, %v", err1, err2)
	}
	d, err := parseDocument(storedDocument(t, f, id))
	if err != nil || d.maxAge != 30*86400 {
		t.Fatalf("stored maxAge %d (%v), want 30 days", d.maxAge, err)
	}
	if c := b.cookies[testSessionName]; c == nil || c.MaxAge != 30*86400 {
		t.Fatalf("cookie %v, want MaxAge of 30 days", c)
	}
}

// TestConflictsRunOut: another instance saves the session just before each
// of this save's writes, so that every write meets a change.
func TestConflictsRunOut(t *testing.T) {
	var armed atomic.Bool
	var writes atomic.Int64
	var interfere func()
	client := hookedClient(t, func(name string) {
		if armed.Load() && (name == "update" || name == "findAndModify") {
			writes.Add(1)
			interfere()
		}
	})
	coll := testCollection(t, client)
	store := storeOn(t, coll, Config{Expiry: ExpiryNone})
	other := storeOn(t, testClient(t, nil).Database(testDatabase).Collection(coll.Name()), Config{Expiry: ExpiryNone})
	f := &storeFixture{store: store, coll: coll}
	b, id := saveNewSession(t, f, map[any]any{"n": 0})
	n := 0
	interfere = func() {
		n++
		r := b.request()
		s, err := other.Get(r, testSessionName)
		if err == nil {
			s.Values["n"] = n
			err = s.Save(r, httptest.NewRecorder())
		}
		if err != nil {
			t.Errorf("the other instance's save: %v", err)
		}
	}
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := store.Get(r, testSessionName)
		s.Values["mine"] = true
		armed.Store(true)
		err := s.Save(r, w)
		armed.Store(false)
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("Save = %v, want ErrConflict", err)
		}
	})
	if writes.Load() != maxSaveAttempts {
		t.Fatalf("%d writes, want %d", writes.Load(), maxSaveAttempts)
	}
	var s *sessions.Session
	b.do(func(w http.ResponseWriter, r *http.Request) { s, _ = other.Get(r, testSessionName) })
	if _, ok := s.Values["mine"]; ok || s.Values["n"] != maxSaveAttempts {
		t.Fatalf("stored %v (session %s); want the other instance's last save only", s.Values, id)
	}
}

// TestOverlappingMiddlewareRequests: 100 times, two requests of one
// browser run through the middleware at once, each waiting until both have
// loaded the session before changing its own key.
func TestOverlappingMiddlewareRequests(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"start": 1})
	const trials, width = 100, 2
	var barrier sync.WaitGroup
	h := f.store.Middleware(testSessionName, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		barrier.Done()
		barrier.Wait()
		s.Values[r.URL.Query().Get("k")] = true
		w.WriteHeader(http.StatusNoContent)
	}))
	for i := range trials {
		barrier.Add(width)
		var wg sync.WaitGroup
		for j := range width {
			r := b.request()
			r.URL.RawQuery = fmt.Sprintf("k=t%d-%d", i, j)
			wg.Go(func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusNoContent {
					t.Errorf("trial %d request %d: %d %s", i, j, rec.Code, rec.Body)
				}
			})
		}
		wg.Wait()
	}
	s, _ := loadSession(t, f, b)
	lost := 0
	for i := range trials {
		for j := range width {
			if s.Values[fmt.Sprintf("t%d-%d", i, j)] != true {
				lost++
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d changes lost", lost, trials*width)
	}
}

// TestSaveShapes: on a server with a query planner a save is one
// conditional update on {_id, rev}, which the plan serves
// from the _id index; on FerretDB v1 it is findAndModify on exactly {_id}.
func TestSaveShapes(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	b, id := saveNewSession(t, f, map[any]any{"k": "v"})
	f.cmds.reset()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		clock.Advance(time.Minute)
		s.Values["k"] = "w"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	filters := commandFilters(t, f.cmds)
	if len(filters["find"]) != 1 || !isIDOnly(filters["find"][0]) {
		t.Fatalf("loads %v, want one find on exactly {_id}", filters["find"])
	}
	if len(filters["update"]) != 1 || len(filters["findAndModify"]) != 0 {
		t.Fatalf("saves %v, want one update", filters)
	}
	filter := filters["update"][0]
	if elems, _ := filter.Elements(); len(elems) != 2 || filter.Lookup(fieldID).StringValue() != docID(id) ||
		filter.Lookup(fieldRev).AsInt64() != 1 {
		t.Fatalf("save filter %s, want {_id, rev: 1}", filter)
	}
	if atomic, _ := f.store.coll.atomicWrites(context.Background()); !atomic {
		return // FerretDB v1 has no query planner to explain
	}
	plan := explainFind(t, f.coll, filter)
	if used := planIndexes(plan.Lookup("queryPlanner")); !reflect.DeepEqual(used, []string{"_id_"}) {
		t.Fatalf("the plan for %s uses %q, want _id_ alone: %s", filter, used, plan)
	}
}

func TestDetectServer(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	atomic, err := f.store.coll.atomicWrites(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := testServerKind != "embedded"; atomic != want {
		t.Fatalf("atomicWrites %v on the %s server, want %v", atomic, testServerKind, want)
	}
}

// TestSaveMeetingAnUnreadableSave: a save that meets a concurrent save it
// cannot read (an instance of a rolling deploy with a newer key, which this
// one lacks) fails with ErrConflict and ErrDecode, and writes nothing.
func TestSaveMeetingAnUnreadableSave(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	newer := storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey, nil)
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		theirs := b.request()
		ts, err := newer.Get(theirs, testSessionName)
		if err == nil {
			ts.Values["theirs"] = true
			err = ts.Save(theirs, httptest.NewRecorder())
		}
		if err != nil {
			t.Fatalf("the newer instance's save: %v", err)
		}
		s.Values["mine"] = true
		if err := s.Save(r, w); !errors.Is(err, ErrConflict) || !errors.Is(err, ErrDecode) {
			t.Fatalf("Save = %v, want ErrConflict and ErrDecode", err)
		}
	})
	var s *sessions.Session
	b.do(func(w http.ResponseWriter, r *http.Request) { s, _ = newer.Get(r, testSessionName) })
	if s.Values["theirs"] != true || s.Values["mine"] != nil {
		t.Fatalf("values = %v; want the newer instance's save alone", s.Values)
	}
}

// TestSaveAfterTheMiddlewareFinished: a session kept past its handler (by a
// background job, say) and saved after the middleware finished with it
// is saved if no other request saved it since; if one did, what it changed
// can no longer be told from the other's (the middleware released the
// values as loaded), so the save fails with ErrConflict rather than write
// its stale copies over the other's changes and bring back a read flash.
func TestSaveAfterTheMiddlewareFinished(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"x": "old", "_flash": []any{"hello"}})
	keep := func() (*sessions.Session, *http.Request) {
		var kept *sessions.Session
		var keptReq *http.Request
		strictSessionHandler(t, f.store, func(_ http.ResponseWriter, r *http.Request, s *sessions.Session) {
			kept, keptReq = s, r
		}).ServeHTTP(httptest.NewRecorder(), b.request())
		return kept, keptReq
	}
	kept, r := keep()
	kept.Values["job"] = "first"
	if err := f.store.Save(r, httptest.NewRecorder(), kept); err != nil {
		t.Fatalf("a late save that met no other: %v", err)
	}
	kept, r = keep()
	strictSessionHandler(t, f.store, func(_ http.ResponseWriter, _ *http.Request, s *sessions.Session) {
		s.Values["x"] = "new"
		s.Flashes()
	}).ServeHTTP(httptest.NewRecorder(), b.request())
	kept.Values["job"] = "second"
	if err := f.store.Save(r, httptest.NewRecorder(), kept); !errors.Is(err, ErrConflict) {
		t.Fatalf("a late save that met another: %v, want ErrConflict", err)
	}
	s, err := loadSession(t, f, b)
	if err != nil || s.Values["x"] != "new" || s.Values["_flash"] != nil || s.Values["job"] != "first" {
		t.Fatalf("after the late save: %v, %v; want x new, no flash, job first", s.Values, err)
	}
}

// TestRetryAfterAFailedMergedSave: a save that merged another request's
// changes and then failed (its write cut) leaves the session built on that
// request's version: saved again, it writes this request's changes, not
// the other's as its own over a third request's since.
func TestRetryAfterAFailedMergedSave(t *testing.T) {
	var writes atomic.Int64
	var proxy atomic.Pointer[faultproxy.Proxy]
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if (e.CommandName == "update" || e.CommandName == "findAndModify") && writes.Add(1) == 2 {
			proxy.Load().Cut() // the write after the merge
		}
	}}
	coll, p := proxiedCollection(t, options.Client().SetMonitor(monitor).SetRetryWrites(false).SetHeartbeatInterval(500*time.Millisecond))
	proxy.Store(p)
	f := newFixture(t, Config{Expiry: ExpiryNone})
	f.coll = testClient(t, nil).Database(testDatabase).Collection(coll.Name())
	f.store = storeOn(t, f.coll, Config{Expiry: ExpiryNone})
	storeA := storeOn(t, coll, Config{Expiry: ExpiryNone, Timeout: time.Second})
	b, _ := saveNewSession(t, f, map[any]any{"x": 0})
	set := func(x int) { // and a "remember me" of x hours
		r := b.request()
		s, err := f.store.Get(r, testSessionName)
		s.Values["x"], s.Options.MaxAge = x, x*3600
		if err != nil || s.Save(r, httptest.NewRecorder()) != nil {
			t.Fatalf("another request's save of x %d: %v", x, err)
		}
	}
	rA := b.request()
	sA, err := storeA.Get(rA, testSessionName)
	if err != nil {
		t.Fatal(err)
	}
	set(1)
	writes.Store(0)
	sA.Values["y"] = "a"
	if err := storeA.Save(rA, httptest.NewRecorder(), sA); !errors.Is(err, ErrDatabase) || writes.Load() != 2 {
		t.Fatalf("the save whose write after the merge was cut: %v after %d writes; want ErrDatabase after 2", err, writes.Load())
	}
	set(2)
	// The chain's lock is held for Timeout after a write of unknown
	// outcome, and the client reconnects: until then, a save finds nothing
	// sent (ErrDatabase) and is tried again.
	err = ErrDatabase
	for try := 0; errors.Is(err, ErrDatabase) && try < 20; try++ {
		err = storeA.Save(rA, httptest.NewRecorder(), sA)
	}
	if err != nil {
		t.Fatalf("saved again: %v", err)
	}
	if s, err := loadSession(t, f, b); err != nil || s.Values["x"] != 2 || s.Values["y"] != "a" || s.Options.MaxAge != 2*3600 {
		t.Fatalf("after the second save: %v, MaxAge %d, %v; want x 2 and MaxAge 7200 (the third request's), y a", s.Values, s.Options.MaxAge, err)
	}
}

// emptyAsNil is compactCodec but for no values, which it encodes as nil.
type emptyAsNil struct{ compactCodec }

func (c emptyAsNil) Encode(values map[any]any) ([]byte, error) {
	if len(values) == 0 {
		return nil, nil
	}
	return c.compactCodec.Encode(values)
}

func (c emptyAsNil) Decode(data []byte) (map[any]any, error) {
	if len(data) == 0 {
		return map[any]any{}, nil
	}
	return c.compactCodec.Decode(data)
}

// TestMergeOverValuesEncodedAsNil: a codec may encode a session's values
// as nil (none, here), which decryption gives back as nil; two requests
// that save such a session at once merge, as any others do.
func TestMergeOverValuesEncodedAsNil(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone, Codec: emptyAsNil{}}, testHashKey, testBlockKey)
	b, _ := saveNewSession(t, f, map[any]any{})
	rA, rB := b.request(), b.request()
	sA, errA := f.store.Get(rA, testSessionName)
	sB, errB := f.store.Get(rB, testSessionName)
	if err := errors.Join(errA, errB); err != nil || sA.IsNew || sB.IsNew {
		t.Fatalf("loads: %v (new: %v, %v)", err, sA.IsNew, sB.IsNew)
	}
	sA.Values["a"], sB.Values["b"] = 1, 2
	if err := errors.Join(f.store.Save(rA, httptest.NewRecorder(), sA), f.store.Save(rB, httptest.NewRecorder(), sB)); err != nil {
		t.Fatal(err)
	}
	if s, err := loadSession(t, f, b); err != nil || s.Values["a"] != 1 || s.Values["b"] != 2 {
		t.Fatalf("after both saves: %v, %v; want a and b", s.Values, err)
	}
}

// TestDeepPairing: items whose encodings differ are paired by
// reflect.DeepEqual, while few are left over, and the pairing runs out
// with its context (Config.Timeout).
func TestDeepPairing(t *testing.T) {
	a := []keyedItem{{"#1", map[string]int{"x": 1}}, {"#2", "kept"}}
	b := []keyedItem{{"#3", "added"}, {"#4", map[string]int{"x": 1}}}
	aLeft, bLeft, err := unmatched(context.Background(), a, b)
	if err != nil || len(aLeft) != 1 || aLeft[0].item != "kept" || len(bLeft) != 1 || bLeft[0].item != "added" {
		t.Fatalf("unmatched = %v, %v, %v; want the maps paired", aLeft, bLeft, err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := unmatched(done, a, b); !errors.Is(err, ErrDatabase) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a pairing past its context: %v, want ErrDatabase wrapping context.Canceled", err)
	}
	many := make([]keyedItem, maxDeepPairs/2+1) // too many to compare with two: left unpaired
	for i := range many {
		many[i] = keyedItem{fmt.Sprint("many ", i), i}
	}
	if aLeft, _, err := unmatched(done, a, many); err != nil || len(aLeft) != 2 {
		t.Fatalf("past maxDeepPairs: %v, %v; want no deep pass", aLeft, err)
	}
}

// lostAnswer: a session {"x": 0} saved by f.store, loaded by slow
// (Timeout 1s) through a proxy; change runs with 1.5s of latency on the
// server's answers, so its write commits but its answer is lost
// (ErrDatabase). monitor, if not nil, watches slow's commands.
func lostAnswer(t *testing.T, monitor *event.CommandMonitor, change func(r *http.Request, s *sessions.Session, store *Store) error) (
	f *storeFixture, b *browser, r *http.Request, s *sessions.Session, slow *Store) {
	t.Helper()
	opts := options.Client().SetRetryWrites(false).SetHeartbeatInterval(500 * time.Millisecond)
	if monitor != nil {
		opts.SetMonitor(monitor)
	}
	coll, p := proxiedCollection(t, opts)
	f = newFixture(t, Config{Expiry: ExpiryNone})
	f.coll = testClient(t, nil).Database(testDatabase).Collection(coll.Name())
	f.store = storeOn(t, f.coll, Config{Expiry: ExpiryNone})
	slow = storeOn(t, coll, Config{Expiry: ExpiryNone, Timeout: time.Second})
	b, _ = saveNewSession(t, f, map[any]any{"x": 0})
	r = b.request()
	s, err := slow.Get(r, testSessionName)
	if err != nil {
		t.Fatal(err)
	}
	p.SetLatency(1500 * time.Millisecond)
	err = change(r, s, slow)
	p.SetLatency(0)
	if !errors.Is(err, ErrDatabase) {
		t.Fatalf("the slow write: %v, want ErrDatabase", err)
	}
	time.Sleep(time.Second) // the write has committed on the server, and the chain's lock in slow is free again
	return f, b, r, s, slow
}

// saveUntilDone saves s as callers retry after ErrDatabase, and takes the
// last save's cookie into b.
func saveUntilDone(t *testing.T, b *browser, r *http.Request, s *sessions.Session, store *Store) {
	t.Helper()
	err := ErrDatabase
	for try := 0; errors.Is(err, ErrDatabase) && try < 40; try++ {
		rec := httptest.NewRecorder()
		if err = store.Save(r, rec, s); err == nil {
			b.absorb(rec.Header())
		}
	}
	if err != nil {
		t.Fatalf("saved again: %v", err)
	}
}

func addFlash(r *http.Request, s *sessions.Session, store *Store) error {
	s.AddFlash("saved")
	return store.Save(r, httptest.NewRecorder(), s)
}

func regenerate(r *http.Request, s *sessions.Session, store *Store) error {
	s.Values["login"] = "ada"
	return store.RegenerateID(r, httptest.NewRecorder(), s)
}

// storedFlashes returns how many flashes b's session holds.
func storedFlashes(t *testing.T, f *storeFixture, b *browser) int {
	t.Helper()
	got, err := loadSession(t, f, b)
	if err != nil {
		t.Fatal(err)
	}
	flashes, _ := got.Values["_flash"].([]any)
	return len(flashes)
}

// TestRetryAfterALostAnswer: a save whose write committed but whose answer
// was lost is saved again, as callers retry; the retry meets its own
// write, not another request's: a flash added once is stored once, and a
// regeneration goes on with the user signed in (before: the flash twice,
// and ErrSessionGone). Lock refuses the session until a save has sorted
// out what is stored (it would apply the request's changes twice, or
// find the regenerated secret and say the session ended).
func TestRetryAfterALostAnswer(t *testing.T) {
	t.Run("a flash", func(t *testing.T) {
		f, b, r, s, slow := lostAnswer(t, nil, addFlash)
		if _, err := slow.Lock(r, s); !errors.Is(err, ErrDatabase) {
			t.Fatalf("Lock before a save = %v, want ErrDatabase", err)
		}
		saveUntilDone(t, b, r, s, slow)
		if n := storedFlashes(t, f, b); n != 1 {
			t.Fatalf("the one flash added is stored %d times", n)
		}
		unlock, err := slow.Lock(r, s)
		if err != nil {
			t.Fatalf("Lock after the save: %v", err)
		}
		unlock()
	})
	t.Run("a regeneration", func(t *testing.T) {
		f, b, r, s, slow := lostAnswer(t, nil, regenerate)
		if _, err := slow.Lock(r, s); !errors.Is(err, ErrDatabase) {
			t.Fatalf("Lock before a save = %v, want ErrDatabase", err)
		}
		saveUntilDone(t, b, r, s, slow)
		if got, _ := loadSession(t, f, b); got.IsNew || got.Values["login"] != "ada" {
			t.Fatalf("after the retried regeneration the new cookie loads IsNew %v, %v: the user is signed out", got.IsNew, got.Values)
		}
	})
}

// TestTwoLostAnswers: two lost answers in a row, the first write
// committed (W1), the second never sent (W2): the third save still knows
// W1 for its own, and the flash is stored once.
func TestTwoLostAnswers(t *testing.T) {
	var armed atomic.Bool
	var updates atomic.Int32
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "update" && armed.Load() && updates.Add(1) == 2 {
			time.Sleep(1300 * time.Millisecond) // past the save's deadline: W2 is never sent
		}
	}}
	f, b, r, s, slow := lostAnswer(t, monitor, addFlash)
	armed.Store(true)
	err := slow.Save(r, httptest.NewRecorder(), s)
	armed.Store(false)
	if !errors.Is(err, ErrDatabase) {
		t.Fatalf("second save = %v, want ErrDatabase", err)
	}
	saveUntilDone(t, b, r, s, slow)
	if n := storedFlashes(t, f, b); n != 1 {
		t.Fatalf("the one flash added is stored %d times", n)
	}
}

// TestOwnWriteThenAnotherSave: a retried save meets its own committed
// write (W1, a login: SetOwner), and before its next write another request
// of the same browser saves over W1: the merge that follows compares owners
// with W1's (before: with the owner before W1, ErrSessionGone), so both
// saves land.
func TestOwnWriteThenAnotherSave(t *testing.T) {
	var armed atomic.Bool
	var updates atomic.Int32
	var between func()
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "update" && armed.Load() && updates.Add(1) == 2 {
			between()
		}
	}}
	f, b, r, s, slow := lostAnswer(t, monitor, func(r *http.Request, s *sessions.Session, store *Store) error {
		SetOwner(s, "alice", "laptop")
		return store.Save(r, httptest.NewRecorder(), s)
	})
	between = func() {
		b.do(func(w http.ResponseWriter, r *http.Request) {
			o, err := f.store.Get(r, testSessionName)
			if err != nil || o.IsNew {
				t.Errorf("the other request: %v, new %v", err, o.IsNew)
				return
			}
			o.Values["other"] = 1
			if err := o.Save(r, w); err != nil {
				t.Errorf("the other request's save: %v", err)
			}
		})
	}
	armed.Store(true)
	err := slow.Save(r, httptest.NewRecorder(), s)
	armed.Store(false)
	if err != nil {
		t.Fatalf("the retried save = %v, want it saved over its own write and the other request's", err)
	}
	if got, err := loadSession(t, f, b); err != nil || got.Values["other"] != 1 {
		t.Fatalf("stored %v, %v", got.Values, err)
	}
}
