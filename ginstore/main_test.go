package ginstore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/testserver"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The tests run against the server in MONGODB_URI. When it is not set,
// TestMain builds and starts the embedded FerretDB server of the embeddb
// module (../embeddb) on a free loopback port, and sets MONGODB_URI for the
// tests and examples.

const testDatabase = "ginstore_test"

// testHashKey signs the test stores' cookies.
var testHashKey = bytes.Repeat([]byte{0x11}, 32)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no debug banners in test output
	testserver.Main(m, "ginstore tests")
}

// testClient connects to the test server, until the test ends.
func testClient(t testing.TB) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")).SetTimeout(30 * time.Second))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

var (
	collectionSeq         atomic.Int64
	unsafeCollectionChars = regexp.MustCompile(`[^A-Za-z0-9_]+`)
)

// testCollection returns a new, empty collection of its own for one test,
// dropped when the test ends.
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
		_ = coll.Drop(ctx)
	})
	return coll
}

// newMongoStore returns a mongostore.Store on a collection of the test's
// own, closed when the test ends. It sets cfg.Expiry to ExpiryAuto, which
// servers without TTL indexes (FerretDB v1) need.
func newMongoStore(t testing.TB, cfg mongostore.Config) *mongostore.Store {
	t.Helper()
	cfg.Expiry = mongostore.ExpiryAuto
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := mongostore.NewStore(ctx, testCollection(t, testClient(t)), cfg, testHashKey)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// fakeClock is a settable clock for mongostore.Config.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
