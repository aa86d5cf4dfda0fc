package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/review"
	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestStats(t *testing.T) {
	f := newFixture(t)
	col := map[string]string{"SESSION_COLLECTION": f.name}

	r := runCmd(t, col, "stats", "-exact")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout,
		"collection  "+testDatabase+"."+f.name+" on ",
		"documents   7\n",
		"live        5 (counted on the expiresAt index)",
		"expired     2 not deleted yet (counted on the expiresAt index)",
		"no GC sweep has deleted them",
		"expiry      GC (a plain index on expiresAt",
		"expiresAt_1 {expiresAt: 1}\n",
		"as the store expects",
		"BSON document size",
		"of 7 documents")
	mustMatch(t, "stdout", r.stdout,
		`the oldest expired 2[34]h\d\dm ago`, // a day ago, give or take the test's duration
		`p50 \d+ B, p90 \d+ B, p99 \d+ B, max \d+ B, mean \d+ B`)
	if testServer(t).Kind == setup.FerretDB1 {
		mustContain(t, "stdout", r.stdout, "the first documents in natural order (the server has no $sample): not a random sample",
			"owner_present {owner: 1}\n", "owner_present is not partial: FerretDB v1 refuses partial indexes")
	} else {
		mustContain(t, "stdout", r.stdout, "a random sample of 7 documents ($sample", "owner_present {owner: 1}, partial\n")
	}

	r = runCmd(t, col, "stats")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustMatch(t, "stdout", r.stdout, `documents   \d+ \(estimated, from the collection's metadata\)`, `live        about \d+ \(documents less expired`)
	mustContain(t, "stdout", r.stdout, "expired     2 not deleted yet")

	r = runCmd(t, col, "stats", "-exact", "-json", "-sample", "3")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Documents != 7 || rep.Live != 5 || rep.Expired != 2 || !rep.Exact {
		t.Errorf("documents %d, live %d, expired %d, exact %v; want 7, 5, 2, true", rep.Documents, rep.Live, rep.Expired, rep.Exact)
	}
	if rep.OldestExpired == nil || rep.LagSeconds < 23*3600 || rep.LagSeconds > 25*3600 {
		t.Errorf("oldest expired %v, %v seconds ago; want a day ago", rep.OldestExpired, rep.LagSeconds)
	}
	if rep.Indexes.Mode != review.ModeGC || len(rep.Indexes.Problems) != 0 {
		t.Errorf("mode %q, problems %q; want GC, none", rep.Indexes.Mode, rep.Indexes.Problems)
	}
	if rep.Sizes == nil || rep.Sizes.Count != 3 || rep.Sizes.P50 < 100 || rep.Sizes.Max < rep.Sizes.P50 {
		t.Errorf("sizes %+v; want 3 documents of some hundred bytes", rep.Sizes)
	}

	// With the keys, a new pair first: the counts of a dry run, named as
	// what Rekey would do, not as what it did.
	r = runCmd(t, map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": strings.Repeat("01", 32) + "," + testKey}, "stats", "-json")
	rep = statsReport{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || rep.Keys == nil {
		t.Fatalf("stats -json with keys: exit %d, %v", r.code, err)
	}
	if k := *rep.Keys; k.Live != 5 || k.WouldReseal != 5 || !slices.Equal(k.ByKey, []int64{0, 5}) || strings.Contains(r.stdout, "Changed") {
		t.Errorf("keys %+v (%s); want 5 live, 5 to re-seal, all under the second pair", k, r.stdout)
	}
	// A first pair without a block key after ones with: counted, where a
	// rekey would need -decrypt.
	r = runCmd(t, map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey + "," + strings.Repeat("01", 32),
		"SESSION_BLOCK_KEY": "," + strings.Repeat("02", 32)}, "stats")
	mustContain(t, "stdout", r.stdout, "key pair 1: 5, key pair 2: 0")
	if r.code != 0 {
		t.Errorf("stats with a plain pair before an encrypting one: exit %d, want 0", r.code)
	}
}

// TestStatsModes checks the expiry mode stats reads from the indexes of a
// store in each mode, and its warnings about missing indexes.
func TestStatsModes(t *testing.T) {
	t.Run("auto", func(t *testing.T) {
		name, coll := testCollection(t)
		store := newStore(t, coll, mongostore.Config{}, time.Time{})
		login(t, store, "alice", "Firefox")
		r := runCmd(t, map[string]string{"SESSION_COLLECTION": name}, "stats")
		if r.code != 0 {
			t.Fatalf("exit code %d", r.code)
		}
		if testServer(t).Kind == setup.FerretDB1 { // no TTL indexes: the GC goroutine
			mustContain(t, "stdout", r.stdout, "expiry      GC", "as the store expects")
		} else {
			mustContain(t, "stdout", r.stdout, "expiry      TTL (a TTL index on expiresAt)",
				"expiresAt_1 is a TTL index with expireAfterSeconds 0", "expiresAt_1 {expiresAt: 1}, TTL expireAfterSeconds 0", "as the store expects")
		}
	})
	t.Run("none", func(t *testing.T) {
		name, coll := testCollection(t)
		store := newStore(t, coll, mongostore.Config{Expiry: mongostore.ExpiryNone}, time.Time{})
		login(t, store, "", "")
		r := runCmd(t, map[string]string{"SESSION_COLLECTION": name}, "stats")
		if r.code != 0 {
			t.Fatalf("exit code %d", r.code)
		}
		mustContain(t, "stdout", r.stdout, "expiry      none (no index on expiresAt)",
			"warning: no index on expiresAt: every sweep (DeleteExpired) scans the collection",
			"warning: no owner_present index", "counted by a collection scan")
	})
	t.Run("other TTL", func(t *testing.T) {
		name, coll := testCollection(t)
		ctx := context.Background()
		_, err := coll.Indexes().CreateMany(ctx, []mongo.IndexModel{
			{Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("expires").SetExpireAfterSeconds(3600)},
			{Keys: bson.D{{Key: "owner", Value: 1}}, Options: options.Index().SetName("owner_present")},
		})
		if testServer(t).Kind == setup.FerretDB1 {
			// No such index can exist there: nothing to report.
			if !setup.TTLRefused(err) {
				t.Fatalf("FerretDB v1 answered a TTL index with %v, want a refusal", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		r := runCmd(t, map[string]string{"SESSION_COLLECTION": name}, "stats")
		if r.code != 0 {
			t.Fatalf("exit code %d", r.code)
		}
		mustContain(t, "stdout", r.stdout, "expiry      TTL",
			"warning: expires is a TTL index with expireAfterSeconds 3600, not 0",
			"the index on expiresAt is called expires, not expiresAt_1",
			"warning: owner_present is not partial")
	})
}

func TestStatsMissingCollection(t *testing.T) {
	name, coll := testCollection(t)
	createIndexes(t, coll) // the database exists, with this collection in it
	r := runCmd(t, map[string]string{"SESSION_COLLECTION": name + "_typo"}, "stats")
	if r.code != 1 {
		t.Errorf("exit code %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "collection "+testDatabase+"."+name+"_typo does not exist", name, "check DB_NAME or -db")
}

func TestSessions(t *testing.T) {
	f := newFixture(t)
	col := map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey}

	r := runCmd(t, col, "sessions", "-owner", "alice")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, `2 live sessions of "alice", the latest saved first (times in UTC):`,
		"HANDLE", "DEVICE", "CREATED", "UPDATED", "EXPIRES", "Firefox on Linux", "Safari on iPhone")
	for _, not := range []string{"Old laptop", "Chrome on Windows"} {
		if strings.Contains(r.stdout, not) {
			t.Errorf("the list shows %q, not a live session of alice's", not)
		}
	}
	if lines := strings.Count(r.stdout, "\n"); lines != 5 {
		t.Errorf("%d lines, want 5 (title, blank, header, two sessions)", lines)
	}
	// The latest saved first: Safari's session was saved after Firefox's.
	if strings.Index(r.stdout, "Safari") > strings.Index(r.stdout, "Firefox") {
		t.Error("not the latest saved first")
	}

	r = runCmd(t, col, "sessions", "-owner", "alice", "-json")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	var list []ownedSession
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("%d sessions, want 2", len(list))
	}
	for _, s := range list {
		if s.Handle == "" || !s.ExpiresAt.After(time.Now()) || s.CreatedAt.After(s.UpdatedAt) || s.CreatedAt.Location() != time.UTC {
			t.Errorf("session %+v: want a handle, times in UTC, a future expiry", s)
		}
	}

	r = runCmd(t, col, "sessions", "-owner", "carol")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	if r.stdout != "no live sessions of \"carol\"\n" {
		t.Errorf("stdout %q, want no live sessions of carol", r.stdout)
	}

	// After a key rotation, the old key, second in SESSION_KEY, still finds them.
	rotated := map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": strings.Repeat("01", 32) + "," + testKey}
	r = runCmd(t, rotated, "sessions", "-owner", "alice")
	mustContain(t, "stdout", r.stdout, `2 live sessions of "alice"`)
	// Other keys: TestWrongKeys.
}

// TestWrongKeys checks that sessions and end, given keys that read none of
// the collection's sessions, fail saying so, rather than report that the
// user has none; and that with the right keys a user without sessions is
// no failure.
func TestWrongKeys(t *testing.T) {
	f := newFixture(t)
	other := strings.Repeat("01", 32)
	tests := []struct {
		name      string
		key       string
		blockKey  string
		args      []string
		code      int
		stdout    string
		stderr    []string
		unchanged bool // no document deleted
	}{
		{"sessions, right key, no sessions", testKey, "", []string{"sessions", "-owner", "carol"}, 0, `no live sessions of "carol"`, nil, true},
		{"end, right key, no sessions", testKey, "", []string{"end", "-owner", "carol"}, 0, `no live session of "carol" to end`, nil, true},
		{"sessions, wrong key", other, "", []string{"sessions", "-owner", "alice"}, 1, "", []string{"do not match", "SESSION_KEY", "give them all, newest first: SESSION_KEY=new,old"}, true},
		{"end, wrong key", other, "", []string{"end", "-owner", "alice"}, 1, "", []string{"do not match", "nothing was deleted"}, true},
		{"end -handle, wrong key", other, "", []string{"end", "-owner", "alice", "-handle", "x"}, 1, "", []string{"do not match"}, true},
		{"end, empty -handle", testKey, "", []string{"end", "-owner", "alice", "-handle", ""}, 2, "", []string{"-handle is empty"}, true},
		{"end -dry-run, empty -handle", testKey, "", []string{"end", "-owner", "alice", "-handle=", "-dry-run"}, 2, "", []string{"-handle is empty"}, true},
		{"sessions, wrong block key", testKey, strings.Repeat("02", 32), []string{"sessions", "-owner", "alice"}, 1, "",
			[]string{"do not match", "SESSION_BLOCK_KEY", "not encrypted"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := countDocuments(t, f.coll)
			r := runCmd(t, map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": tt.key, "SESSION_BLOCK_KEY": tt.blockKey}, tt.args...)
			if r.code != tt.code {
				t.Errorf("exit code %d, want %d", r.code, tt.code)
			}
			mustContain(t, "stdout", r.stdout, tt.stdout)
			mustContain(t, "stderr", r.stderr, tt.stderr...)
			if tt.code != 0 && r.stdout != "" {
				t.Errorf("a failure printed a result: %s", r.stdout)
			}
			if after := countDocuments(t, f.coll); tt.unchanged && after != before {
				t.Errorf("%d documents before, %d after", before, after)
			}
		})
	}
}

func countDocuments(t *testing.T, coll *mongo.Collection) int64 {
	t.Helper()
	n, err := coll.CountDocuments(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// usersCollection returns a collection that is not the store's: users,
// with an index on expiresAt (a TTL one of an hour where the server has
// TTL indexes; plain and named as the store's own where it has not), and
// the indexes it had then. Its expiresAt dates run from 40 minutes ago
// to 40 minutes from now: two past, none an hour past, so that the server's
// TTL job deletes none while a test runs.
func usersCollection(t *testing.T) (string, *mongo.Collection, []bson.Raw) {
	t.Helper()
	name, coll := testCollection(t)
	ctx := context.Background()
	now := time.Now()
	var docs []any
	for i := range 5 {
		docs = append(docs, bson.D{{Key: "name", Value: fmt.Sprintf("user%d", i)}, {Key: "email", Value: fmt.Sprintf("user%d@example.com", i)},
			{Key: "v", Value: 1}, {Key: "expiresAt", Value: now.Add(time.Duration(i-2) * 20 * time.Minute)}})
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(3600)})
	if err != nil {
		if testServer(t).Kind != setup.FerretDB1 {
			t.Fatal(err)
		}
		if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "expiresAt", Value: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	return name, coll, indexSpecs(t, coll)
}

func indexSpecs(t *testing.T, coll *mongo.Collection) []bson.Raw {
	t.Helper()
	cur, err := coll.Indexes().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var specs []bson.Raw
	if err := cur.All(context.Background(), &specs); err != nil {
		t.Fatal(err)
	}
	return specs
}

// TestForeignCollection checks that every command, pointed at a collection
// that is not the store's, fails saying so, and that none suggests
// changing its indexes or changes them.
func TestForeignCollection(t *testing.T) {
	name, coll, specs := usersCollection(t)
	for _, args := range [][]string{{"stats"}, {"stats", "-json"}, {"check"}, {"sessions", "-owner", "user1"}, {"end", "-owner", "user1"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCmd(t, map[string]string{"SESSION_COLLECTION": name, "SESSION_KEY": testKey}, args...)
			if r.code != 1 {
				t.Errorf("exit code %d, want 1", r.code)
			}
			mustContain(t, "stderr", r.stderr, testDatabase+"."+name+" does not hold mongostore sessions", "name, email")
			for _, s := range []string{"collMod", "dropIndex", "NewStore turns", "NewStore changes", "NewStore drops", "NewStore creates", "3600 to 0"} {
				if strings.Contains(r.stdout+r.stderr, s) {
					t.Errorf("the output says %q", s)
				}
			}
			if n := countDocuments(t, coll); n != 5 {
				t.Errorf("%d documents left, want 5", n)
			}
			if after := indexSpecs(t, coll); !slices.EqualFunc(after, specs, func(a, b bson.Raw) bool { return a.String() == b.String() }) {
				t.Errorf("indexes %v, were %v", after, specs)
			}
		})
	}
}

// TestSessionsDeviceEscapes checks that a device label, which comes from a
// User-Agent, cannot send escape sequences to the terminal.
func TestSessionsDeviceEscapes(t *testing.T) {
	name, coll := testCollection(t)
	store := newStore(t, coll, mongostore.Config{Expiry: mongostore.ExpiryNone}, time.Time{})
	login(t, store, "mallory", "\x1b]0;pwned\x07\x1b[2J")
	r := runCmd(t, map[string]string{"SESSION_COLLECTION": name, "SESSION_KEY": testKey}, "sessions", "-owner", "mallory")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	if strings.ContainsAny(r.stdout, "\x1b\x07") {
		t.Errorf("the output holds control characters: %q", r.stdout)
	}
	mustContain(t, "stdout", r.stdout, `"\x1b]0;pwned\a\x1b[2J"`)
}

func TestEnd(t *testing.T) {
	f := newFixture(t)
	col := map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey}

	// A dry run says what it would end, and ends nothing.
	r := runCmd(t, col, "end", "-owner", "alice", "-dry-run")
	if r.code != 0 {
		t.Fatalf("dry run: exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, `a dry run, nothing was ended: end would end every session of "alice" of these:`, "2 live sessions")
	for i, c := range f.alice {
		if !loads(t, f.store, c) {
			t.Errorf("the dry run ended alice's session %d", i)
		}
	}

	r = runCmd(t, col, "end", "-owner", "alice")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	// Alice's two live sessions (her expired one is the TTL index's or the GC's to delete).
	mustContain(t, "stdout", r.stdout, `ended every session of "alice" that these keys find: 2 sessions`)
	for i, c := range f.alice {
		if loads(t, f.store, c) {
			t.Errorf("alice's session %d still loads", i)
		}
	}
	if !loads(t, f.store, f.bob) {
		t.Error("bob's session was ended too")
	}
	if list, err := f.store.ListSessions(context.Background(), "alice", nil); err != nil || len(list) != 0 {
		t.Errorf("ListSessions(alice) = %d sessions, %v; want none", len(list), err)
	}
	n, err := f.coll.CountDocuments(context.Background(), bson.D{})
	if err != nil || n != 5 {
		t.Errorf("%d documents left, %v; want 5 (bob's, two without owner, one expired without owner, alice's expired one)", n, err)
	}

	r = runCmd(t, col, "end", "-owner", "alice")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, `no live session of "alice" to end`)

	// One session, by its handle.
	list, err := f.store.ListSessions(context.Background(), "bob", nil)
	if err != nil || len(list) != 1 {
		t.Fatalf("ListSessions(bob) = %d sessions, %v", len(list), err)
	}
	for _, dry := range [][]string{{"-dry-run"}, nil} {
		r = runCmd(t, col, append([]string{"end", "-owner", "bob", "-handle", "not-a-handle"}, dry...)...)
		if r.code != 1 || r.stdout != "" {
			t.Errorf("end %v, an unknown handle: exit code %d, stdout %q; want 1, nothing", dry, r.code, r.stdout)
		}
	}
	mustContain(t, "stderr", r.stderr, `none of the latest 1000 live sessions of "bob" has the handle "not-a-handle"`, "mongostore-admin sessions -owner bob")
	if !loads(t, f.store, f.bob) {
		t.Error("an unknown handle ended bob's session")
	}
	r = runCmd(t, col, "end", "-owner", "bob", "-handle", list[0].Handle, "-dry-run")
	if r.code != 0 || !loads(t, f.store, f.bob) {
		t.Fatalf("end -dry-run of bob's session: exit code %d, or it ended the session", r.code)
	}
	mustContain(t, "stdout", r.stdout, "a dry run, nothing was ended: end would end the session "+list[0].Handle+` of "bob"`)
	r = runCmd(t, map[string]string{"SESSION_COLLECTION": f.name, "SESSION_KEY": testKey}, "end", "-owner", "alice", "-handle", list[0].Handle)
	if r.code != 1 {
		t.Errorf("exit code %d for bob's handle given as alice's, want 1", r.code)
	}
	r = runCmd(t, col, "end", "-owner", "bob", "-handle", list[0].Handle)
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, `ended the session `+list[0].Handle+` of "bob" (Chrome on Windows, last saved `)
	if loads(t, f.store, f.bob) {
		t.Error("bob's session still loads")
	}
}

// TestCheck runs check on a collection a store prepared in ExpiryAuto,
// through a URI that sets a read preference and a write concern.
func TestCheck(t *testing.T) {
	name, coll := testCollection(t)
	store := newStore(t, coll, mongostore.Config{}, time.Time{})
	login(t, store, "alice", "Firefox")
	login(t, store, "", "")
	info := testServer(t)

	r := runCmd(t, map[string]string{"SESSION_COLLECTION": name}, "check")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, "server        "+info.Kind, "collection    "+testDatabase+"."+name+": ",
		"read pref     client default primary (the driver's default: the URI sets none)",
		"the store reads from the primary whatever the client's default",
		"write concern none in the URI", "retryWrites   on",
		"scratch       "+testDatabase+"."+scratchPrefix)
	switch info.Kind {
	case setup.FerretDB1:
		mustContain(t, "stdout", r.stdout, "(claims MongoDB ",
			"TTL indexes   no: code 238 (NotImplemented)", "collMod       a plain index to a TTL one: no: code 238 (NotImplemented)",
			"ExpiryAuto    GC: the GC goroutine deletes expired sessions")
	case setup.FerretDB2:
		mustContain(t, "stdout", r.stdout, "on PostgreSQL with DocumentDB (claims MongoDB ",
			"TTL indexes   yes", "collMod       a TTL index's expireAfterSeconds (3600 to 0): yes\n",
			"              a plain index to a TTL one: no: code 72 (InvalidOptions)",
			"ExpiryAuto    TTL: expiresAt_1 is already a TTL index with expireAfterSeconds 0")
	default:
		mustContain(t, "stdout", r.stdout, "TTL indexes   yes", "ExpiryAuto    TTL: expiresAt_1 is already")
	}
	assertNoScratch(t)

	uri := strings.TrimSuffix(testURI(), "/") + "/?readPreference=secondaryPreferred&w=majority&retryWrites=false"
	r = runCmd(t, map[string]string{"SESSION_COLLECTION": name, "MONGODB_URI": uri}, "check")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, "read pref     client default secondaryPreferred (from the URI)",
		"write concern w=majority (from the URI); the store's writes use it", "retryWrites   off (from the URI)")
	assertNoScratch(t)

	// Unacknowledged writes: check fails, its probes still getting the
	// server's answers; end refuses them, and changes nothing.
	w0 := strings.TrimSuffix(testURI(), "/") + "/?w=0"
	r = runCmd(t, map[string]string{"SESSION_COLLECTION": name, "MONGODB_URI": w0}, "check")
	if r.code != 1 {
		t.Fatalf("check with w=0: exit code %d, want 1", r.code)
	}
	mustContain(t, "stdout", r.stdout, "write concern w=0 (from the URI)\n", "unacknowledged writes: the store cannot tell")
	mustContain(t, "stderr", r.stderr, "the store needs acknowledged writes, and MONGODB_URI asks for w=0")
	if info.Kind == setup.FerretDB1 {
		mustContain(t, "stdout", r.stdout, "TTL indexes   no: code 238 (NotImplemented)")
	}
	assertNoScratch(t)
	r = runCmd(t, map[string]string{"SESSION_COLLECTION": name, "MONGODB_URI": w0, "SESSION_KEY": testKey}, "end", "-owner", "alice")
	if r.code != 2 || !strings.Contains(r.stderr, "w=0") {
		t.Fatalf("end with w=0: want exit 2 naming w=0")
	}
	if n, err := coll.CountDocuments(context.Background(), bson.D{}); err != nil || n != 2 {
		t.Fatalf("after end with w=0: %d sessions (%v), want 2", n, err)
	}

	// A collection that does not exist yet.
	r = runCmd(t, map[string]string{"SESSION_COLLECTION": name + "_new"}, "check")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout, "does not exist yet", "NewStore creates owner_present "+map[bool]string{false: "(partial)", true: "(sparse)"}[info.Kind == setup.FerretDB1])
	assertNoScratch(t)
}

// TestCheckPredictsNewStore checks, on collections with the indexes a store
// may meet, that what check says ExpiryAuto would do is what NewStore
// does: the mode it picks, or its failure.
func TestCheckPredictsNewStore(t *testing.T) {
	info := testServer(t)
	cases := []struct {
		name    string
		indexes []mongo.IndexModel
		ttlOnly bool // the case needs TTL indexes
	}{
		{"empty", nil, false},
		{"the store's plain index", []mongo.IndexModel{{Keys: bson.D{{Key: "expiresAt", Value: 1}}}}, false},
		{"another plain index", []mongo.IndexModel{{Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("exp")}}, false},
		{"a TTL index of an hour", []mongo.IndexModel{{Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(3600)}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name, coll := testCollection(t)
			ctx := context.Background()
			if tc.indexes != nil {
				_, err := coll.Indexes().CreateMany(ctx, tc.indexes)
				if tc.ttlOnly && info.Kind == setup.FerretDB1 {
					// No such index can exist there: nothing to predict.
					if !setup.TTLRefused(err) {
						t.Fatalf("FerretDB v1 answered a TTL index with %v, want a refusal", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
			} else if err := coll.Database().CreateCollection(ctx, name); err != nil {
				t.Fatal(err)
			}
			r := runCmd(t, map[string]string{"SESSION_COLLECTION": name}, "check")
			predicted := ""
			for _, l := range strings.Split(r.stdout, "\n") {
				if rest, ok := strings.CutPrefix(l, "ExpiryAuto    "); ok {
					predicted = rest
				}
			}
			store, err := mongostore.NewStore(ctx, coll, mongostore.Config{}, []byte(strings.Repeat("k", 32)))
			if err == nil {
				store.Close()
			}
			switch {
			case errors.Is(err, mongostore.ErrInvalidConfig):
				reason, ok := strings.CutPrefix(predicted, "NewStore would fail (ErrInvalidConfig): ")
				if r.code != 1 || !ok || !strings.Contains(err.Error(), reason) {
					t.Errorf("NewStore failed (%v); check exited %d and predicted %q", err, r.code, predicted)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if r.code != 0 {
				t.Errorf("check exited %d; NewStore succeeded", r.code)
			}
			indexes, err := listIndexes(ctx, coll)
			if err != nil {
				t.Fatal(err)
			}
			mode := review.ReviewIndexes(indexes, info.Kind).Mode
			if !strings.HasPrefix(predicted, mode+":") {
				t.Errorf("NewStore left the indexes of mode %s, %v; check predicted %q", mode, indexes, predicted)
			}
		})
	}
}

// TestCheckLeavesNothing checks that check leaves no database and no
// collection behind: on a database that does not exist, and on one that
// does (each the test's own: other runs may share the server).
func TestCheckLeavesNothing(t *testing.T) {
	ctx := context.Background()
	client := testClient(t)
	prefix := fmt.Sprintf("mongostore_admin_leaves_%d_%d_", os.Getpid(), time.Now().UnixNano())
	missing, existing := prefix+"missing", prefix+"existing"
	t.Cleanup(func() {
		_ = client.Database(missing).Drop(context.Background())
		_ = client.Database(existing).Drop(context.Background())
	})
	if _, err := client.Database(existing).Collection("other").InsertOne(ctx, bson.D{{Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	list := func() (dbs, colls []string) {
		dbs, err := client.ListDatabaseNames(ctx, bson.D{{Key: "name", Value: bson.D{{Key: "$regex", Value: "^" + prefix}}}})
		if err != nil {
			t.Fatal(err)
		}
		colls, err = client.Database(existing).ListCollectionNames(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(dbs)
		slices.Sort(colls)
		return dbs, colls
	}
	for _, db := range []string{missing, existing} {
		t.Run(strings.TrimPrefix(db, prefix), func(t *testing.T) {
			dbs, colls := list()
			r := runCmd(t, map[string]string{"DB_NAME": db}, "check")
			if r.code != 0 {
				t.Errorf("exit code %d, want 0", r.code)
			}
			dbsAfter, collsAfter := list()
			if !slices.Equal(dbs, dbsAfter) || !slices.Equal(colls, collsAfter) {
				t.Errorf("before check: databases %v, collections of %s %v; after: %v, %v", dbs, existing, colls, dbsAfter, collsAfter)
			}
		})
	}
}

func testURI() string { return os.Getenv("MONGODB_URI") }

// assertNoScratch checks that no scratch collection of check is left.
func assertNoScratch(t *testing.T) {
	t.Helper()
	names, err := testClient(t).Database(testDatabase).ListCollectionNames(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, scratchPrefix) {
			t.Errorf("check left its scratch collection %s", n)
		}
	}
}

// TestUnreadableSessionsAreReported: a user's session that opens with none
// of the keys given (encrypted, and no SESSION_BLOCK_KEY) is neither listed
// nor ended, and sessions and end say so and exit 1, after what they did.
func TestUnreadableSessionsAreReported(t *testing.T) {
	name, coll := testCollection(t)
	plain := newStore(t, coll, mongostore.Config{}, time.Time{})
	for range 3 {
		login(t, plain, "bob", "Safari")
	}
	login(t, plain, "alice", "Firefox")
	encrypting := newStore(t, coll, mongostore.Config{}, time.Time{}, bytes.Repeat([]byte{0x6b}, 32), bytes.Repeat([]byte{0x42}, 32))
	login(t, encrypting, "alice", "Chrome")
	env := map[string]string{"SESSION_COLLECTION": name, "SESSION_KEY": testKey}
	for _, args := range [][]string{{"sessions", "-owner", "alice"}, {"end", "-owner", "alice"}} {
		r := runCmd(t, env, args...)
		if r.code != 1 {
			t.Errorf("%s: exit code %d, want 1", args[0], r.code)
		}
		mustContain(t, "stdout", r.stdout, "1 ")
		mustContain(t, "stderr", r.stderr, "1 session of the user in "+testDatabase+"."+name+" opened with none of these keys, and was neither listed nor ended")
	}
	if n := countDocuments(t, coll); n != 4 {
		t.Fatalf("%d sessions left, want the 3 of bob and alice's encrypted one", n)
	}
}

// TestListingCap: of a user with more sessions than a listing holds, the
// latest 1,000, sessions and end -dry-run say that older ones may exist
// (that end ends them all, the library's TestEndOtherSessionsEndsThemAll
// checks: here it would take half a minute on FerretDB v1).
func TestListingCap(t *testing.T) {
	name, coll := testCollection(t)
	store := newStore(t, coll, mongostore.Config{}, time.Time{})
	for range listCap + 3 {
		login(t, store, "mallory", "Firefox")
	}
	env := map[string]string{"SESSION_COLLECTION": name, "SESSION_KEY": testKey}
	for _, args := range [][]string{{"sessions", "-owner", "mallory"}, {"sessions", "-owner", "mallory", "-json"}, {"end", "-owner", "mallory", "-dry-run"}} {
		if r := runCmd(t, env, args...); r.code != 0 || !strings.Contains(r.stderr, `"mallory" may have older ones`) {
			t.Errorf("%q: exit %d; want 0, and a warning that older sessions may exist", args, r.code)
		}
	}
	if r := runCmd(t, env, "end", "-owner", "mallory", "-dry-run"); !strings.Contains(r.stdout, "these and any older ones") {
		t.Errorf("end -dry-run does not say it would end older ones too")
	}
}
