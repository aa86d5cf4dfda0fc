package mongostore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongostore/mongostore/internal/testserver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The integration tests run against the server in MONGODB_URI. When it is
// not set, TestMain builds and starts the embedded FerretDB server of the
// nested embeddb module on a free loopback port, and sets MONGODB_URI for the
// tests and examples.

const testDatabase = "mongostore_test"

// testServerKind is "embedded" for the embedded FerretDB server and
// "external" for a server given in MONGODB_URI.
var testServerKind = "external"

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("MONGODB_URI") != "" || fuzzWorker() {
		os.Exit(m.Run())
	}
	uri, stop, err := testserver.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mongostore tests: start embedded server:", err)
		os.Exit(1)
	}
	testServerKind = "embedded"
	os.Setenv("MONGODB_URI", uri)
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "mongostore tests: stop embedded server:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// fuzzWorker reports whether this process is a fuzzing worker, which runs
// only a fuzz target and needs no database.
func fuzzWorker() bool {
	f := flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() == "true"
}

// commandLog records the commands a client sends, by name.
type commandLog struct {
	mu       sync.Mutex
	commands []bson.Raw
	count    atomic.Int64
}

func (l *commandLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "hello", "isMaster", "ismaster", "endSessions", "buildInfo", "getMore", "killCursors":
			// handshakes and cursor bookkeeping are not round trips the store asks for
			if e.CommandName != "getMore" {
				return
			}
		}
		l.mu.Lock()
		l.commands = append(l.commands, append(bson.Raw(nil), e.Command...))
		l.mu.Unlock()
		l.count.Add(1)
	}}
}

// named returns the recorded commands called name.
func (l *commandLog) named(name string) []bson.Raw {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []bson.Raw
	for _, c := range l.commands {
		if elems, err := c.Elements(); err == nil && len(elems) > 0 && elems[0].Key() == name {
			out = append(out, c)
		}
	}
	return out
}

// reset forgets the recorded commands.
func (l *commandLog) reset() {
	l.mu.Lock()
	l.commands = nil
	l.mu.Unlock()
	l.count.Store(0)
}

// testClient connects to the test server. With a non-nil log, every
// command the client sends is recorded in it.
func testClient(t testing.TB, log *commandLog) *mongo.Client {
	t.Helper()
	opts := options.Client().ApplyURI(os.Getenv("MONGODB_URI")).SetTimeout(30 * time.Second)
	if log != nil {
		opts.SetMonitor(log.monitor())
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

var collectionSeq atomic.Int64

var unsafeCollectionChars = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// testCollection returns a new, empty collection for one test, dropped
// when the test ends.
func testCollection(t testing.TB, client *mongo.Client) *mongo.Collection {
	t.Helper()
	name := unsafeCollectionChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 60 {
		name = name[:60]
	}
	name = fmt.Sprintf("%s_%d_%d", strings.ToLower(name), os.Getpid(), collectionSeq.Add(1))
	coll := client.Database(testDatabase).Collection(name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := coll.Drop(ctx)
		if errors.Is(err, mongo.ErrClientDisconnected) {
			err = dropWithNewClient(ctx, coll.Name()) // the test disconnected its client
		}
		if err != nil {
			t.Logf("collection %s left behind: %v", coll.Name(), err)
		}
	})
	return coll
}

// dropWithNewClient drops the test collection name through a client of its
// own, so that no test leaves a collection behind on a lasting server.
func dropWithNewClient(ctx context.Context, name string) error {
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(ctx) }()
	return client.Database(testDatabase).Collection(name).Drop(ctx)
}
