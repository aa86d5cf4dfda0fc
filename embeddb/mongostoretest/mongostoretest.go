// Package mongostoretest runs mongostore in an application's own tests
// with nothing installed: each store it makes keeps its sessions in an
// embedded FerretDB server (package embeddb) inside the test's process,
// stopped when the test ends.
//
//	func TestLogin(t *testing.T) {
//		store := mongostoretest.NewStore(t, mongostore.Config{})
//		handler := store.Middleware("session", nil)(app.Routes(store))
//		// drive handler with net/http/httptest
//	}
//
// FerretDB v1 has no TTL indexes: expired sessions are deleted by the
// store's GC goroutine, and never served either way.
package mongostoretest

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/embeddb"
)

// TB is what the helpers need of a test: *testing.T and *testing.B have it.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

var _ TB = testing.TB(nil)

// Client starts an embedded server for tb, stopped when tb ends, and
// returns a client connected to it, disconnected first.
func Client(tb TB) *mongo.Client {
	tb.Helper()
	dir, err := os.MkdirTemp("", "mongostoretest-") // not tb.TempDir: a subtest's name can hold a # or %
	if err != nil {
		tb.Fatalf("mongostoretest: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	server, err := embeddb.Start(context.Background(), embeddb.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatalf("mongostoretest: %v", err)
	}
	tb.Cleanup(func() { _ = server.Close() })
	client, err := mongo.Connect(options.Client().ApplyURI(server.URI()).SetTimeout(30 * time.Second))
	if err != nil {
		tb.Fatalf("mongostoretest: connect: %v", err)
	}
	tb.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

// NewStore returns a store on a collection of its own embedded server,
// closed when tb ends. Without keyPairs, it makes a random hash key.
func NewStore(tb TB, cfg mongostore.Config, keyPairs ...[]byte) *mongostore.Store {
	tb.Helper()
	if len(keyPairs) == 0 {
		keyPairs = [][]byte{[]byte(rand.Text() + rand.Text())} // 256 bits and more
	}
	coll := Client(tb).Database("mongostoretest").Collection(fmt.Sprintf("sessions_%d", time.Now().UnixNano()))
	store, err := mongostore.NewStore(context.Background(), coll, cfg, keyPairs...)
	if err != nil {
		tb.Fatalf("mongostoretest: %v", err)
	}
	tb.Cleanup(func() { _ = store.Close() })
	return store
}
