package mongostore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// loginAs saves a new session owned by owner from a new browser and
// returns the browser and the session's ID.
func loginAs(t *testing.T, f *storeFixture, owner, device string) (*browser, string) {
	t.Helper()
	b := newBrowser()
	var id string
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["user"] = owner
		SetOwner(s, owner, device)
		if err := s.Save(r, w); err != nil {
			t.Fatalf("Save: %v", err)
		}
		id = s.ID
	})
	return b, id
}

// listFrom lists owner's sessions from a request of b (whose session is the
// current one).
func listFrom(t *testing.T, f *storeFixture, b *browser, owner string) []OwnedSession {
	t.Helper()
	var list []OwnedSession
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		var err error
		if list, err = f.store.ListSessions(r.Context(), owner, s); err != nil {
			t.Fatalf("ListSessions: %v", err)
		}
	})
	return list
}

func devices(list []OwnedSession) []string {
	var out []string
	for _, s := range list {
		d := s.Device
		if s.Current {
			d += "*"
		}
		out = append(out, d)
	}
	return out
}

func TestOwnedSessions(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	laptop, laptopID := loginAs(t, f, "ada", "Firefox on Linux")
	clock.Advance(time.Minute)
	phone, _ := loginAs(t, f, "ada", "Safari on iPhone")
	clock.Advance(time.Minute)
	tablet, _ := loginAs(t, f, "ada", "")
	loginAs(t, f, "bob", "Chrome on Windows")
	anonymous, _ := saveNewSession(t, f, map[any]any{"cart": "book"})

	// Listing: one find on the owner index (expiry checked on what comes
	// back), newest activity first.
	f.cmds.reset()
	list := listFrom(t, f, laptop, "ada")
	if got, want := devices(list), []string{"", "Safari on iPhone", "Firefox on Linux*"}; !slices.Equal(got, want) {
		t.Fatalf("ada's sessions %q, want %q (newest first, current marked)", got, want)
	}
	filters := commandFilters(t, f.cmds)["find"]
	want, _ := bson.Marshal(ownedFilter([]string{f.store.sealer.ownerDigest("ada")}))
	if len(filters) != 2 || !bytes.Equal(filters[1], want) {
		t.Fatalf("find filters %v, want the request's load and one {owner: digest of ada}", filters)
	}
	first := list[2]
	if !first.CreatedAt.Equal(clock.Now().Add(-2*time.Minute).Truncate(time.Millisecond)) || !first.ExpiresAt.After(first.UpdatedAt) {
		t.Fatalf("laptop session times %+v", first)
	}
	for _, s := range list {
		if strings.Contains(laptopID, s.Handle) || strings.Contains(s.Handle, docID(laptopID)) || len(s.Handle) < 20 {
			t.Fatalf("handle %q reveals or is too short", s.Handle)
		}
	}
	if got := devices(listFrom(t, f, anonymous, "bob")); !slices.Equal(got, []string{"Chrome on Windows"}) {
		t.Fatalf("bob's sessions %q", got)
	}
	if got, err := f.store.ListSessions(context.Background(), "nobody", nil); err != nil || len(got) != 0 {
		t.Fatalf("ListSessions(nobody) = %v, %v", got, err)
	}

	// A handle ends its session for its owner only, and never the
	// request's own.
	phoneHandle := list[1].Handle
	laptopSession := sessionOf(t, f, laptop)
	for _, tc := range []struct {
		owner, handle string
		current       *sessions.Session
		want          OwnedSession // Device and Current
	}{
		{"bob", phoneHandle, nil, OwnedSession{}},
		{"ada", "made-up-handle", nil, OwnedSession{}},
		{"ada", first.Handle, laptopSession, OwnedSession{Device: "Firefox on Linux", Current: true}},
	} {
		got, ended, err := f.store.EndSession(context.Background(), tc.owner, tc.handle, tc.current)
		if err != nil || ended || got.Device != tc.want.Device || got.Current != tc.want.Current {
			t.Fatalf("EndSession(%s, %s) = %+v, %v, %v; want nothing ended, %+v", tc.owner, tc.handle, got, ended, err, tc.want)
		}
	}
	f.cmds.reset()
	got, ended, err := f.store.EndSession(context.Background(), "ada", phoneHandle, laptopSession)
	if err != nil || !ended || got.Device != "Safari on iPhone" || got.Current {
		t.Fatalf("EndSession = %+v, %v, %v; want the phone's session ended", got, ended, err)
	}
	if got := commandNames(f.cmds); !slices.Equal(got, []string{"find", "delete"}) {
		t.Fatalf("EndSession sent %q, want one find and one delete", got)
	}
	if s, _ := loadSession(t, f, phone); !s.IsNew {
		t.Fatal("the ended session still loads on its device")
	}
	if _, ended, _ := f.store.EndSession(context.Background(), "ada", phoneHandle, nil); ended {
		t.Fatal("an ended session was ended twice")
	}

	// A save already under way on a device cannot bring its session back.
	r := tablet.request()
	inFlight, _ := f.store.Get(r, testSessionName)
	if n, err := f.store.EndOtherSessions(context.Background(), "ada", sessionOf(t, f, laptop)); err != nil || n != 1 {
		t.Fatalf("EndOtherSessions = %d, %v; want the tablet's", n, err)
	}
	inFlight.Values["late"] = true
	if err := inFlight.Save(r, httptest.NewRecorder()); !errors.Is(err, ErrSessionGone) {
		t.Fatalf("save on an ended device = %v, want ErrSessionGone", err)
	}
	if got := devices(listFrom(t, f, laptop, "ada")); !slices.Equal(got, []string{"Firefox on Linux*"}) {
		t.Fatalf("after ending the others: %q", got)
	}

	// The owner follows the session to its new ID, under the same handle:
	// a handle names the sign-in chain.
	laptop.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		if err := f.store.RegenerateID(r, w, s); err != nil {
			t.Fatal(err)
		}
	})
	after := listFrom(t, f, laptop, "ada")
	if got := devices(after); !slices.Equal(got, []string{"Firefox on Linux*"}) || after[0].Handle != first.Handle {
		t.Fatalf("after RegenerateID: %q (same handle: %v)", got, after[0].Handle == first.Handle)
	}

	// Expired sessions are never listed, even before anything deletes them.
	f.store.MaxAge(60)
	short, _ := loginAs(t, f, "ada", "short-lived")
	clock.Advance(61 * time.Second)
	if got := devices(listFrom(t, f, short, "ada")); slices.Contains(got, "short-lived") {
		t.Fatalf("an expired session is listed: %q", got)
	}

	// All of them, the caller's included (it was EndAllSessions).
	if n, err := f.store.EndOtherSessions(context.Background(), "ada", nil); err != nil || n != 1 {
		t.Fatalf("EndOtherSessions(nil) = %d, %v; want 1 (the laptop's: the expired one is no session, the TTL index or the GC deletes it)", n, err)
	}
	if s, _ := loadSession(t, f, laptop); !s.IsNew {
		t.Fatal("EndOtherSessions(nil) left the caller's session")
	}
	if s, _ := loadSession(t, f, anonymous); s.IsNew {
		t.Fatal("a session without an owner was ended")
	}
}

// sessionOf loads b's session, as a request would.
func sessionOf(t *testing.T, f *storeFixture, b *browser) *sessions.Session {
	t.Helper()
	s, err := f.store.Get(b.request(), testSessionName)
	if err != nil || s.IsNew {
		t.Fatalf("load: %v (new %v)", err, s.IsNew)
	}
	return s
}

func TestOwnerFieldsFollowTheValues(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	// A session without an owner has no owner fields, and its saves send
	// what they sent before owners existed.
	b, id := saveNewSession(t, f, map[any]any{"k": "v"})
	if _, err := storedDocument(t, f, id).LookupErr(fieldOwner); err == nil {
		t.Fatal("a session without an owner has an owner field")
	}
	f.cmds.reset()
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["k"] = "w"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	upd := saveUpdate(t, f.cmds)
	if _, err := upd.LookupErr("$unset"); err == nil || strings.Contains(upd.String(), `"owner"`) {
		t.Fatalf("the save of a session without an owner sends %s", upd)
	}

	// Owner set later, changed, then removed. The document holds a keyed
	// digest of the owner, never the owner or the device label. The names
	// hold a space, which no hex _id or base64 field can: a short name such
	// as "ada" turns up in a random _id about once in 70 runs.
	for _, step := range []struct{ owner, device string }{{"ada lovelace", "laptop"}, {"ada lovelace", ""}, {"grace hopper", "phone"}, {"", ""}} {
		b.do(func(w http.ResponseWriter, r *http.Request) {
			s, _ := f.store.Get(r, testSessionName)
			SetOwner(s, step.owner, step.device)
			if err := s.Save(r, w); err != nil {
				t.Fatal(err)
			}
		})
		raw := storedDocument(t, f, id)
		field, _ := raw.Lookup(fieldOwner).StringValueOK()
		want := ""
		if step.owner != "" {
			want = f.store.sealer.ownerDigest(step.owner)
		}
		if field != want || (step.owner != "" && strings.Contains(raw.String(), step.owner)) {
			t.Fatalf("after SetOwner(%q, %q): owner field %q, want %q, and no owner in %s", step.owner, step.device, field, want, raw)
		}
		if _, err := raw.LookupErr("device"); err == nil {
			t.Fatal("the document holds a device field")
		}
		if s, _ := loadSession(t, f, b); func() bool { o, d := ownerOf(s.Values); return o != step.owner || d != step.device }() {
			t.Fatalf("after SetOwner(%q, %q): Owner says otherwise", step.owner, step.device)
		}
	}

	// The owner field alone proves nothing: the values, under the MAC, decide.
	bob, bobID := loginAs(t, f, "bob", "bob's phone")
	adaDigest := f.store.sealer.ownerDigest("ada")
	if _, err := f.coll.UpdateOne(context.Background(), bson.D{{Key: fieldID, Value: docID(bobID)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldOwner, Value: adaDigest}}}}); err != nil {
		t.Fatal(err)
	}
	if list, _ := f.store.ListSessions(context.Background(), "ada", nil); len(list) != 0 {
		t.Fatalf("a session whose owner field was changed in the database is listed for ada: %+v", list)
	}
	if got := devices(listFrom(t, f, bob, "bob")); len(got) != 0 {
		t.Fatalf("bob's moved session is listed for bob too: %q (its index entry says ada)", got)
	}

	// Restart unties the session; a long device label is cut.
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		SetOwner(s, "ada", strings.Repeat("é", maxDeviceLength))
		if _, d := ownerOf(s.Values); len(d) > maxDeviceLength || !strings.HasPrefix(d, "éé") || strings.ContainsRune(d, '\uFFFD') {
			t.Fatalf("device label of %d bytes: %q", len(d), d)
		}
		if err := f.store.Restart(r, s); err != nil {
			t.Fatal(err)
		}
		if o, _ := ownerOf(s.Values); o != "" {
			t.Fatal("Restart kept the owner")
		}
	})
}

// planIndexes returns the names of the indexes a plan of explain uses:
// "indexName" on MongoDB, "Index Name" on DocumentDB (a PostgreSQL plan).
func planIndexes(v bson.RawValue) []string {
	var out []string
	var vals []bson.RawValue
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, _ := v.Document().Elements()
		for _, e := range elems {
			if name, ok := e.Value().StringValueOK(); ok && (e.Key() == "indexName" || e.Key() == "Index Name") {
				out = append(out, name)
			}
			vals = append(vals, e.Value())
		}
	case bson.TypeArray:
		vals, _ = v.Array().Values()
	}
	for _, v := range vals {
		out = append(out, planIndexes(v)...)
	}
	return out
}

// TestOwnerIndex checks the owner index, sparse {owner: 1}, and that the
// commands the store sends to list and end sessions use it alone where the
// server plans queries (with expiresAt in the filter, or a sort on it,
// DocumentDB read the entry of every live session: 60 ms at 5,000).
func TestOwnerIndex(t *testing.T) {
	cmds := &commandLog{}
	coll := testCollection(t, testClient(t, cmds))
	logs := &syncBuffer{}
	store, err := NewStore(context.Background(), coll, Config{Logger: testLogger(logs)}, testHashKey)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var found bson.Raw
	specs, _ := store.coll.indexSpecs(context.Background())
	for _, spec := range specs {
		if name, _ := spec.Lookup("name").StringValueOK(); name == ownerIndexName {
			found = spec
		}
	}
	if found == nil {
		t.Errorf("no %s index among %v; the store logged:\n%s", ownerIndexName, specs, logs)
	} else {
		if key := found.Lookup("key").Document().String(); key != `{"owner": {"$numberInt":"1"}}` {
			t.Errorf("owner index key %s", key)
		}
		// Partial: sessions without an owner have no entry, and their saves
		// do not pay for it. FerretDB v1 refuses partial indexes, and keeps
		// the sparse one without its option.
		partial := found.Lookup("partialFilterExpression").String() == `{"owner": {"$exists": true}}`
		if !partial && testServerKind != "embedded" {
			t.Errorf("owner index %s is not partial", found)
		}
	}
	// A second start finds it.
	cmds.reset()
	again, err := NewStore(context.Background(), coll, Config{Logger: testLogger(logs)}, testHashKey)
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if n := len(slices.DeleteFunc(cmds.named("createIndexes"), func(c bson.Raw) bool { return !isOwnerIndexCommand(c) })); n != 0 {
		t.Errorf("a second start created the owner index again (%d commands)", n)
	}
	if n := len(cmds.named("listIndexes")); n != 1 {
		t.Fatalf("a start listed the indexes %d times, want once for the expiry and owner indexes", n)
	}

	// Listing and ending use it where the server plans queries. The filters
	// are the store's own: a listing {owner} with one key pair and with two
	// ({owner: {$in: ...}}); EndOtherSessions lists, deletes by _id (and
	// owner: the _id index), and lists again.
	f := &storeFixture{store: store, coll: coll, cmds: cmds, logs: logs}
	laptop, _ := loginAs(t, f, "ada", "laptop")
	loginAs(t, f, "ada", "phone")
	loginAs(t, f, "bob", "phone")
	current := sessionOf(t, f, laptop)
	rotated, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rotated.Close()
	cmds.reset()
	for _, s := range []*Store{store, rotated} {
		if list, err := s.ListSessions(context.Background(), "ada", nil); err != nil || len(list) != 2 {
			t.Fatalf("ListSessions = %v, %v; want ada's two sessions", list, err)
		}
	}
	if n, err := store.EndOtherSessions(context.Background(), "ada", current); err != nil || n != 1 {
		t.Fatalf("EndOtherSessions = %d, %v; want the phone's", n, err)
	}
	sent := commandFilters(t, cmds)
	deleteBy := sent["delete"]
	if len(sent["find"]) != 4 || len(deleteBy) != 1 || !slices.Equal(keysOf(deleteBy[0]), []string{fieldID, fieldOwner}) {
		t.Fatalf("filters %v, want four listings and one delete by _id and owner", sent)
	}
	for _, filter := range append(sent["find"], deleteBy...) {
		want := ownerIndexName
		if filter.Lookup(fieldID).Type != 0 {
			want = "_id_"
		}
		plan := explainFind(t, coll, filter)
		if testServerKind == "embedded" {
			// FerretDB v1 uses no index but _id's for any query: its plan
			// is a scan.
			if !strings.Contains(plan.String(), "SCAN") {
				t.Fatalf("FerretDB v1 plan for %v: %s", filter, plan)
			}
			t.Logf("FerretDB v1 scans for %v, as for every query but {_id}", filter)
			continue
		}
		// The owner index alone: not expiresAt_1 (a range over every live
		// session), alone or intersected with it; the delete's, _id's.
		used := planIndexes(plan.Lookup("queryPlanner"))
		if len(used) == 0 || slices.ContainsFunc(used, func(name string) bool { return name != want }) {
			t.Fatalf("the plan for %v uses %q, want %s alone: %s", filter, used, want, plan)
		}
		t.Logf("the plan for %v uses %q", filter, used)
	}
}

// keysOf returns the keys of doc's fields, in order.
func keysOf(doc bson.Raw) []string {
	elems, _ := doc.Elements()
	keys := make([]string, len(elems))
	for i, e := range elems {
		keys[i] = e.Key()
	}
	return keys
}

// TestOwnedSessionsExpire checks both expiry paths: the TTL index where the
// server has one, the GC goroutine where it has not. An expired session
// leaves the owner's list at once, and its document goes soon after.
func TestOwnedSessionsExpire(t *testing.T) {
	f := newFixture(t, Config{GCInterval: 100 * time.Millisecond})
	f.store.MaxAge(1)
	loginAs(t, f, "ada", "brief")
	if list, err := f.store.ListSessions(context.Background(), "ada", nil); err != nil || len(list) != 1 {
		t.Fatalf("before expiry: %v, %v", list, err)
	}
	time.Sleep(1100 * time.Millisecond)
	if list, err := f.store.ListSessions(context.Background(), "ada", nil); err != nil || len(list) != 0 {
		t.Fatalf("an expired session is listed: %v, %v", list, err)
	}
	// The owner field holds ada's digest (the old test counted {owner:
	// "ada"}, which matched nothing whatever the expiry did).
	owned := bson.D{{Key: fieldOwner, Value: f.store.sealer.ownerDigest("ada")}}
	wait := 30 * time.Second
	if f.store.expiry == ExpiryTTL {
		wait = 2 * time.Minute // the TTL monitor runs every 60s
	}
	deadline := time.Now().Add(wait)
	for {
		n, err := f.coll.CountDocuments(context.Background(), owned)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s left the expired session's document for %v", modeName(f.store.expiry), wait)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("expiry by %s removed the owned session", modeName(f.store.expiry))
}

// TestOwnedSessionsAcrossKeyRotation checks that sessions saved before a key
// rotation are still listed and ended (their owner digest is the old key's
// until their next save, which moves it to the new key's).
func TestOwnedSessionsAcrossKeyRotation(t *testing.T) {
	old := newFixture(t, Config{Expiry: ExpiryNone}, testHashKey)
	b, id := loginAs(t, old, "ada", "laptop")
	rotated, err := NewStore(context.Background(), old.coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rotated.Close()
	f := &storeFixture{store: rotated, coll: old.coll, cmds: old.cmds, logs: old.logs}
	if got := devices(listFrom(t, f, b, "ada")); !slices.Equal(got, []string{"laptop*"}) {
		t.Fatalf("after the rotation: %q, want the session saved under the old key", got)
	}
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := rotated.Get(r, testSessionName)
		s.Values["seen"] = true
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
	})
	raw, err := f.coll.FindOne(context.Background(), bson.D{{Key: fieldID, Value: docID(id)}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := raw.Lookup(fieldOwner).StringValueOK(); got != rotated.sealer.ownerDigests("ada")[0] {
		t.Fatalf("owner field %q after a save with the new key, want the new key's digest", got)
	}
	if n, err := rotated.EndOtherSessions(context.Background(), "ada", nil); err != nil || n != 1 {
		t.Fatalf("EndOtherSessions(nil) = %d, %v", n, err)
	}
}

// saveOwned saves n new sessions of owner through f.store, from as many
// requests, several at a time, labelled device and their number, and
// returns the browsers that hold their cookies.
func saveOwned(t *testing.T, f *storeFixture, owner, device string, n int) []*browser {
	t.Helper()
	browsers := make([]*browser, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				b := newBrowser()
				b.do(func(w http.ResponseWriter, r *http.Request) {
					s, err := f.store.Get(r, testSessionName)
					if err == nil {
						SetOwner(s, owner, fmt.Sprintf("%s %d", device, i))
						err = s.Save(r, w)
					}
					if err != nil {
						errs <- err
					}
				})
				browsers[i] = b
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("save a session of %s: %v", owner, err)
	}
	return browsers
}

func TestListSessionsPastExpiredDocuments(t *testing.T) {
	// Defect 8: ListSessions read at most 1,000 of the owner's documents, unsorted, expired ones included, so 1,100 expired documents hid the live sessions.
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	saveOwned(t, f, "ada", "old", 1100)
	clock.Advance(2 * time.Minute) // they expired a minute ago; nothing deletes them (ExpiryNone)
	f.store.MaxAge(3600)
	live := saveOwned(t, f, "ada", "live", 3)
	if n := f.count(t); n != 1103 {
		t.Fatalf("%d documents, want the 1,100 expired ones and 3 live", n)
	}

	list, err := f.store.ListSessions(context.Background(), "ada", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := devices(list)
	slices.Sort(got)
	if want := []string{"live 0", "live 1", "live 2"}; !slices.Equal(got, want) {
		t.Fatalf("ListSessions listed %d sessions (%q...), want the live ones %q", len(got), got[:min(len(got), 5)], want)
	}
	for _, s := range list {
		ended, ok, err := f.store.EndSession(context.Background(), "ada", s.Handle, nil)
		if err != nil || !ok || ended.Device != s.Device {
			t.Fatalf("EndSession(%s) = %+v, %v, %v; want it ended", s.Device, ended, ok, err)
		}
	}
	for i, b := range live {
		if s, _ := loadSession(t, f, b); !s.IsNew {
			t.Fatalf("live session %d still loads after EndSession", i)
		}
	}
	if list, err := f.store.ListSessions(context.Background(), "ada", nil); err != nil || len(list) != 0 {
		t.Fatalf("after ending the live sessions: %d listed, %v; want none", len(list), err)
	}
}
