package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/setup"
	"github.com/mongostore/mongostore/internal/testserver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The tests run the command, through app.run, against the server in
// MONGODB_URI; when it is not set, TestMain starts the embedded FerretDB v1
// server (the nested module embeddb, in a child process) as the library's
// tests do.

const testDatabase = "mongostore_admin_test"

// testKey is the application's hash key in the tests, in hex as
// SESSION_KEY holds it.
var testKey = strings.Repeat("6b", 32)

func TestMain(m *testing.M) { testserver.Main(m, "mongostore-admin tests") }

// result is the outcome of one run of the command.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// runCmd runs the command with args in an environment of MONGODB_URI,
// DB_NAME (the test database) and env, which may unset them with "".
func runCmd(t testing.TB, env map[string]string, args ...string) result {
	t.Helper()
	vars := map[string]string{"MONGODB_URI": os.Getenv("MONGODB_URI"), "DB_NAME": testDatabase}
	for k, v := range env {
		vars[k] = v
	}
	var stdout, stderr bytes.Buffer
	a := &app{getenv: func(k string) string { return vars[k] }, stdout: &stdout, stderr: &stderr, progressAfter: progressAfter}
	start := time.Now()
	code := a.run(context.Background(), args)
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	t.Logf("mongostore-admin %s: %s", strings.Join(args, " "), r)
	return r
}

// withKey is the environment with the application's key.
var withKey = map[string]string{"SESSION_KEY": testKey}

func mustContain(t testing.TB, what, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Errorf("%s does not contain %q:\n%s", what, s, text)
		}
	}
}

func mustMatch(t testing.TB, what, text string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(text) {
			t.Errorf("%s does not match %q:\n%s", what, p, text)
		}
	}
}

var (
	clientOnce sync.Once
	client     *mongo.Client
	clientErr  error
)

// testClient returns a client of the test server.
func testClient(t testing.TB) *mongo.Client {
	t.Helper()
	clientOnce.Do(func() {
		client, clientErr = mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")).SetTimeout(30 * time.Second))
	})
	if clientErr != nil {
		t.Fatal(clientErr)
	}
	return client
}

// testServer returns what the test server is.
func testServer(t testing.TB) serverInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := getServerInfo(ctx, testClient(t).Database(testDatabase))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

var collSeq atomic.Int64

// testCollection returns the name of a new collection for one test, dropped
// when it ends, and the collection.
func testCollection(t testing.TB) (string, *mongo.Collection) {
	t.Helper()
	name := fmt.Sprintf("%s_%d_%d", strings.ToLower(regexp.MustCompile(`\W+`).ReplaceAllString(t.Name(), "_")), os.Getpid(), collSeq.Add(1))
	coll := testClient(t).Database(testDatabase).Collection(name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = coll.Drop(ctx)
	})
	return name, coll
}

// newStore returns a store on coll with the test key; now, if not zero,
// is its clock's fixed time.
func newStore(t testing.TB, coll *mongo.Collection, cfg mongostore.Config, now time.Time, keys ...[]byte) *mongostore.Store {
	t.Helper()
	if !now.IsZero() {
		cfg.Now = func() time.Time { return now }
	}
	if len(keys) == 0 {
		keys = [][]byte{bytes.Repeat([]byte{0x6b}, 32)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := mongostore.NewStore(ctx, coll, cfg, keys...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// login saves a new session in store, owned by owner (none if "") on
// device, and returns its cookie.
func login(t testing.TB, store *mongostore.Store, owner, device string) *http.Cookie {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	w := httptest.NewRecorder()
	session, err := store.New(r, "session")
	if err != nil {
		t.Fatal(err)
	}
	session.Values["visits"] = 1
	if owner != "" {
		session.Values["user"] = owner
		mongostore.SetOwner(session, owner, device)
	}
	if err := session.Save(r, w); err != nil {
		t.Fatal(err)
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("save set %d cookies", len(cookies))
	}
	return cookies[0]
}

// loads reports whether the session of cookie is live in store.
func loads(t testing.TB, store *mongostore.Store, cookie *http.Cookie) bool {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(cookie)
	session, err := store.New(r, "session")
	if err != nil {
		t.Fatal(err)
	}
	return !session.IsNew
}

// createIndexes creates the store's indexes in GC mode: a plain
// expiresAt_1, and owner_present, partial (sparse on FerretDB v1, which
// refuses partial indexes).
func createIndexes(t testing.TB, coll *mongo.Collection) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "expiresAt", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	for name, field := range map[string]string{setup.OwnerIndexName: "owner"} {
		partial := options.Index().SetName(name).SetPartialFilterExpression(bson.D{{Key: field, Value: bson.D{{Key: "$exists", Value: true}}}})
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: field, Value: 1}}, Options: partial})
		if setup.Unsupported(err) {
			_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: field, Value: 1}}, Options: options.Index().SetName(name).SetSparse(true)})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// fixture is a collection with the sessions of the tests: live ones of
// alice (two), bob (one) and nobody (two), and expired ones of alice (one)
// and nobody (one). Its indexes are those of GC mode, so that nothing
// deletes the expired ones (the stores have ExpiryNone).
type fixture struct {
	name   string
	coll   *mongo.Collection
	store  *mongostore.Store
	alice  []*http.Cookie // live
	bob    *http.Cookie
	expiry *http.Cookie // alice's expired session
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{}
	f.name, f.coll = testCollection(t)
	// Each reading of the clock a millisecond later: each save at a time of
	// its own, so that the latest saved is known.
	var ticks atomic.Int64
	start := time.Now()
	clock := func() time.Time { return start.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	f.store = newStore(t, f.coll, mongostore.Config{Expiry: mongostore.ExpiryNone, Now: clock}, time.Time{})
	past := newStore(t, f.coll, mongostore.Config{Expiry: mongostore.ExpiryNone}, time.Now().Add(-48*time.Hour))
	createIndexes(t, f.coll)
	f.alice = []*http.Cookie{login(t, f.store, "alice", "Firefox on Linux"), login(t, f.store, "alice", "Safari on iPhone")}
	f.bob = login(t, f.store, "bob", "Chrome on Windows")
	login(t, f.store, "", "")
	login(t, f.store, "", "")
	f.expiry = login(t, past, "alice", "Old laptop")
	login(t, past, "", "")
	return f
}
