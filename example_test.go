package mongostore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// get fetches url with client and prints the response body.
func get(client *http.Client, url string) {
	resp, err := client.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(strings.TrimSpace(string(body)))
}

// exampleStore returns a store on a fresh collection of the server in
// MONGODB_URI, and a function that drops the collection and disconnects.
func exampleStore(ctx context.Context, collection string, cfg mongostore.Config, keys ...[]byte) (*mongostore.Store, *mongo.Collection, func()) {
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	coll := client.Database("example").Collection(collection)
	if len(keys) == 0 {
		keys = [][]byte{[]byte("an example key of 32 bytes!!!!!!")}
	}
	store, err := mongostore.NewStore(ctx, coll, cfg, keys...)
	if err != nil {
		log.Fatal(err)
	}
	return store, coll, func() {
		store.Close()
		coll.Drop(ctx)
		client.Disconnect(ctx)
	}
}

// newBrowser returns an HTTP client that keeps cookies, like a browser.
func newBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

// The quick start: a handler that counts a visitor's visits. README.md
// shows the lines between the quick-start markers (TestReadmeQuickStart
// checks that they match).
func Example() {
	ctx := context.Background()
	// quick start begins
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	coll := client.Database("myapp").Collection("sessions")
	hashKey := []byte("32+ random bytes, from a secret!") // the same on every instance
	store, err := mongostore.NewStore(ctx, coll, mongostore.Config{}, hashKey)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		session, _ := store.Get(r, "session") // a fresh session on a bad or expired cookie
		visits, _ := session.Values["visits"].(int)
		session.Values["visits"] = visits + 1 // two requests at once count one: Middleware(…, Exclusive()) runs them in turn
		if err := session.Save(r, w); err != nil {
			http.Error(w, "cannot save session", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "visit number %d\n", visits+1)
	})
	// quick start ends
	defer client.Disconnect(ctx)
	defer coll.Drop(ctx)

	srv := httptest.NewServer(handler)
	defer srv.Close()
	browser := newBrowser()
	get(browser, srv.URL)
	get(browser, srv.URL)
	get(newBrowser(), srv.URL) // another visitor
	// Output:
	// visit number 1
	// visit number 2
	// visit number 1
}

// The middleware loads the session once per request and saves it after the
// handler if the handler changed it.
func ExampleStore_Middleware() {
	ctx := context.Background()
	store, _, done := exampleStore(ctx, "middleware_sessions", mongostore.Config{})
	defer done()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		session, _ := store.Get(r, "session") // the session the middleware loaded
		if name, ok := session.Values["name"].(string); ok {
			fmt.Fprintf(w, "welcome back, %s\n", name)
			return
		}
		session.Values["name"] = r.URL.Query().Get("name") // saved by the middleware
		fmt.Fprintln(w, "hello, stranger")
	})
	withSessions := store.Middleware("session", nil) // nil onError: log, and answer 500 (409 for a session ended meanwhile)

	srv := httptest.NewServer(withSessions(mux))
	defer srv.Close()
	browser := newBrowser()
	get(browser, srv.URL+"/hello?name=Ada")
	get(browser, srv.URL+"/hello")
	// Output:
	// hello, stranger
	// welcome back, Ada
}

// At login, give the session a new ID so that an ID planted before login
// (session fixation) is worth nothing afterwards.
func ExampleStore_RegenerateID() {
	ctx := context.Background()
	store, coll, done := exampleStore(ctx, "login_sessions", mongostore.Config{})
	defer done()

	var before string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		session, _ := store.Get(r, "session")
		before = session.ID
		// ... check the credentials, then:
		session.Values["user"] = r.FormValue("user")
		if err := store.RegenerateID(r, w, session); err != nil {
			http.Error(w, "login failed", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "new ID:", session.ID != before)
	})
	mux.HandleFunc("GET /visit", func(w http.ResponseWriter, r *http.Request) {
		session, _ := store.Get(r, "session")
		session.Values["visited"] = true
		_ = session.Save(r, w)
	})

	srv := httptest.NewServer(mux)
	defer srv.Close()
	browser := newBrowser()
	get(browser, srv.URL+"/visit") // an anonymous session exists before login
	resp, err := browser.PostForm(srv.URL+"/login", url.Values{"user": {"ada"}})
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(string(body))
	n, _ := coll.CountDocuments(ctx, map[string]any{})
	fmt.Println("documents:", n)
	// Output:
	// new ID: true
	// documents: 1
}

// Without a TTL index (ExpiryNone), the application deletes expired
// sessions itself, for example from a scheduled job.
func ExampleStore_DeleteExpired() {
	ctx := context.Background()
	now := time.Now()
	store, _, done := exampleStore(ctx, "expired_sessions", mongostore.Config{
		Expiry: mongostore.ExpiryNone,
		Now:    func() time.Time { return now }, // a fake clock, to expire sessions at once
	})
	defer done()
	store.MaxAge(60)

	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		session, _ := store.New(r, "session")
		session.Values["n"] = 1
		if err := session.Save(r, httptest.NewRecorder()); err != nil {
			log.Fatal(err)
		}
	}
	now = now.Add(2 * time.Minute)

	deleted, err := store.DeleteExpired(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", deleted)
	// Output:
	// deleted: 3
}

// A login ties the session to its user; the user's "devices" page lists the
// sessions and ends the others.
func ExampleStore_ListSessions() {
	ctx := context.Background()
	store, _, done := exampleStore(ctx, "owned_sessions", mongostore.Config{})
	defer done()

	// Two devices log in as ada (as a login handler would, after Restart).
	var laptop *sessions.Session
	for _, device := range []string{"Firefox on Linux", "Safari on iPhone"} {
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		session, _ := store.New(r, "session")
		session.Values["user"] = "ada"
		mongostore.SetOwner(session, "ada", device)
		if err := session.Save(r, httptest.NewRecorder()); err != nil {
			log.Fatal(err)
		}
		if laptop == nil {
			laptop = session
		}
	}

	// The laptop's request lists ada's sessions, then signs out the others.
	list, err := store.ListSessions(ctx, "ada", laptop)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range list {
		fmt.Println(s.Device, "current:", s.Current)
	}
	ended, err := store.EndOtherSessions(ctx, "ada", laptop)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ended:", ended)
	// Unordered output:
	// Firefox on Linux current: true
	// Safari on iPhone current: false
	// ended: 1
}

// OnEvent sees every transition of a session: here, an audit log of
// sign-ins and sign-outs, and a per-user limit of two sessions that signs
// out the least recently used device at a third login.
func ExampleConfig_events() {
	ctx := context.Background()
	audit := func(ctx context.Context, e mongostore.Event) {
		// Runs inside the request: keep it quick (hand it to a channel for slow work).
		fmt.Println(e.Kind, e.Reason, e.Owner, e.Device)
	}
	start, seconds := time.Now(), atomic.Int64{} // a clock that moves a second a login
	store, _, done := exampleStore(ctx, "audited_sessions", mongostore.Config{
		OnEvent:             audit,
		MaxSessionsPerOwner: 2,
		Now:                 func() time.Time { return start.Add(time.Duration(seconds.Load()) * time.Second) },
	})
	defer done()

	login := func(device string) (*http.Request, *sessions.Session) {
		seconds.Add(1)
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		session, _ := store.New(r, "session")
		mongostore.SetOwner(session, "ada", device)
		if err := session.Save(r, httptest.NewRecorder()); err != nil {
			log.Fatal(err)
		}
		return r, session
	}
	login("laptop")
	r, phone := login("phone")
	login("tablet") // the third: the laptop, least recently used, is signed out

	phone.Options.MaxAge = -1 // log out
	if err := phone.Save(r, httptest.NewRecorder()); err != nil {
		log.Fatal(err)
	}
	// Output:
	// created  ada laptop
	// created  ada phone
	// created  ada tablet
	// ended limit ada laptop
	// ended logout ada phone
}

// Key rotation at rest: a store given the new key pair first and the old
// one after it reads every session; Rekey re-seals them all under the new
// pair, after which the old one can go.
func ExampleStore_Rekey() {
	ctx := context.Background()
	oldKey := []byte("an old hash key of 32 bytes or more")
	newKey := []byte("the new hash key, 32 bytes or more")
	old, coll, done := exampleStore(ctx, "rekeyed_sessions", mongostore.Config{}, oldKey)
	defer done()
	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		session, _ := old.New(r, "session")
		session.Values["n"] = 1
		if err := session.Save(r, httptest.NewRecorder()); err != nil {
			log.Fatal(err)
		}
	}

	rotated, err := mongostore.NewStore(ctx, coll, mongostore.Config{}, newKey, nil, oldKey, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer rotated.Close()
	counts, err := rotated.Rekey(ctx, mongostore.RekeyOptions{SingleProcess: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("live:", counts.Live, "changed:", counts.Changed, "unverified:", counts.Unverified)
	counts, _ = rotated.Rekey(ctx, mongostore.RekeyOptions{DryRun: true}) // a dry run: what depends on each key pair now
	fmt.Println("new key:", counts.ByKey[0], "old key:", counts.ByKey[1])
	// Output:
	// live: 3 changed: 3 unverified: 0
	// new key: 3 old key: 0
}
