package mongostore

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore/internal/faultproxy"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// The store reads from the primary whatever the client's default read
// preference: a request must read what the last one wrote. A driver sends a
// standalone server (the test servers are) no read preference at all, so
// these tests reach the server through a faultproxy.Proxy that makes it
// claim to be a mongos, to which the driver sends every mode but primary
// in $readPreference, and look at each command the client starts.

// mongosClient connects through a proxy that makes the test server claim
// to be a mongos, with rp as the client's read preference and w majority,
// recording in cmds every command the client sends. Its handshakes are
// OP_QUERY, answered by OP_REPLY, or, with stableAPI, OP_MSG.
func mongosClient(t *testing.T, rp *readpref.ReadPref, stableAPI bool, cmds *commandLog) *mongo.Client {
	t.Helper()
	uri := os.Getenv("MONGODB_URI")
	proxy, err := faultproxy.New(uriHost(t, uri))
	if err != nil {
		t.Fatal(err)
	}
	proxy.ClaimMongos(true)
	proxied, err := proxy.MongoURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	opts := options.Client().ApplyURI(proxied).SetTimeout(30 * time.Second).
		SetReadPreference(rp).SetWriteConcern(writeconcern.Majority()).SetMonitor(cmds.monitor())
	if stableAPI {
		opts.SetServerAPIOptions(options.ServerAPI(options.ServerAPIVersion1))
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		_ = client.Disconnect(context.Background())
		proxy.Close()
	})
	return client
}

// readPrefMode returns the mode of cmd's $readPreference, or "" if it has
// none.
func readPrefMode(t *testing.T, cmd bson.Raw) string {
	t.Helper()
	rp, err := cmd.LookupErr("$readPreference")
	if err != nil {
		return ""
	}
	mode, ok := rp.Document().Lookup("mode").StringValueOK()
	if !ok {
		t.Fatalf("$readPreference without a mode: %v", cmd)
	}
	return mode
}

func TestReadPrefPrimaryWhateverTheClientDefault(t *testing.T) {
	for _, rp := range []*readpref.ReadPref{readpref.SecondaryPreferred(), readpref.Nearest()} {
		for _, handshake := range []string{"OP_QUERY", "OP_MSG"} {
			t.Run(rp.Mode().String()+"/"+handshake, func(t *testing.T) {
				testReadPrefPrimary(t, rp, handshake == "OP_MSG")
			})
		}
	}
}

func testReadPrefPrimary(t *testing.T, rp *readpref.ReadPref, stableAPI bool) {
	ctx := context.Background()
	cmds := &commandLog{}
	client := mongosClient(t, rp, stableAPI, cmds)
	coll := testCollection(t, client)

	// The control: the client's own reads carry its read preference, so
	// the server passes for a mongos and the test below can fail.
	if err := coll.FindOne(ctx, bson.D{}).Err(); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatalf("FindOne: %v", err)
	}
	finds := cmds.named("find")
	if len(finds) != 1 {
		t.Fatalf("%d find commands recorded for one FindOne", len(finds))
	}
	if mode := readPrefMode(t, finds[0]); mode != rp.Mode().String() {
		t.Fatalf("the client's own FindOne has $readPreference mode %q, want %q: the proxy did not make the server pass for a mongos", mode, rp.Mode().String())
	}
	// A plain index on expiresAt, as a start in GC mode leaves it: set-up
	// then tries collMod too.
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: fieldExpiresAt, Value: 1}}}); err != nil {
		t.Fatalf("create the plain index: %v", err)
	}
	cmds.reset()

	// Every operation of the store: set-up, load, insert, update,
	// RegenerateID, the owner's listing and ending of sessions, deletion of
	// the expired ones, a request through the middleware, and a logout.
	store := storeOn(t, coll, Config{})
	f := &storeFixture{store: store, coll: coll, cmds: cmds, logs: &syncBuffer{}}
	b, _ := saveNewSession(t, f, map[any]any{"n": 1})
	var current *sessions.Session
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err := store.Get(r, testSessionName)
		if err != nil || s.IsNew {
			t.Fatalf("load: new %t, %v", s.IsNew, err)
		}
		SetOwner(s, "alice", "laptop")
		if err := s.Save(r, w); err != nil {
			t.Fatalf("update: %v", err)
		}
		if err := store.RegenerateID(r, w, s); err != nil {
			t.Fatalf("RegenerateID: %v", err)
		}
		current = s
	})
	other := newBrowser()
	other.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := store.New(r, testSessionName)
		SetOwner(s, "alice", "phone")
		if err := s.Save(r, w); err != nil {
			t.Fatalf("save a second session: %v", err)
		}
	})
	list, err := store.ListSessions(ctx, "alice", current)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListSessions: %d sessions, %v; want 2", len(list), err)
	}
	for _, o := range list {
		if !o.Current {
			if _, ended, err := store.EndSession(ctx, "alice", o.Handle, current); err != nil || !ended {
				t.Fatalf("EndSession: ended %t, %v", ended, err)
			}
		}
	}
	if _, err := store.EndOtherSessions(ctx, "alice", current); err != nil {
		t.Fatalf("EndOtherSessions: %v", err)
	}
	if _, err := store.DeleteExpired(ctx); err != nil {
		t.Fatalf("DeleteExpired: %v", err)
	}
	h := strictSessionHandler(t, store, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["n"] = 2
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, b.request())
	b.absorb(rec.Header())
	if responseCookie(rec.Header(), testSessionName) == nil {
		t.Fatal("the middleware saved no session")
	}
	b.do(func(w http.ResponseWriter, r *http.Request) {
		s, err := store.Get(r, testSessionName)
		if err != nil || s.IsNew {
			t.Fatalf("load after the middleware: new %t, %v", s.IsNew, err)
		}
		s.Options.MaxAge = -1
		if err := s.Save(r, w); err != nil {
			t.Fatalf("logout: %v", err)
		}
	})
	store.Close() // waits for a GC sweep under way, whose commands count too

	names := commandNames(cmds)
	t.Logf("the store's commands: %v", names)
	for _, want := range []string{"listIndexes", "createIndexes", "find", "insert", "save", "delete"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s command recorded: the test missed an operation", want)
		}
	}
	cmds.mu.Lock()
	defer cmds.mu.Unlock()
	if len(names) != len(cmds.commands) {
		t.Fatalf("%d commands, %d names", len(cmds.commands), len(names))
	}
	for i, cmd := range cmds.commands {
		name := names[i]
		if mode := readPrefMode(t, cmd); mode != "" && mode != "primary" {
			t.Errorf("%s has $readPreference mode %q: %v", name, mode, cmd)
		}
		w := cmd.Lookup("writeConcern", "w")
		switch name {
		case "insert", "save", "delete", "findAndModify":
			if s, ok := w.StringValueOK(); !ok || s != "majority" {
				t.Errorf("%s has writeConcern w %v, want the client's majority: %v", name, w, cmd)
			}
		case "createIndexes", "dropIndexes", "collMod":
			// Set-up: logged only. RunCommand (collMod) sends the command
			// as given, without the client's write concern.
			wc := "none"
			if w.Type != 0 {
				wc = w.String()
			}
			t.Logf("%s has writeConcern w %s", name, wc)
		}
	}
}
