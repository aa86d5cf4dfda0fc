package ginstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/mongostore/mongostore"
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
	if os.Getenv("MONGODB_URI") != "" {
		os.Exit(m.Run())
	}
	uri, stop, err := startEmbeddedServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ginstore tests: start embedded server:", err)
		os.Exit(1)
	}
	os.Setenv("MONGODB_URI", uri)
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "ginstore tests: stop embedded server:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// startEmbeddedServer builds ../embeddb/cmd/embeddb and runs it with its
// data in a temporary directory. It returns the server's URI, which the
// server prints as its first line, and a function that stops the server (by
// closing its standard input) and removes the data.
func startEmbeddedServer() (uri string, stop func() error, err error) {
	dir, err := os.MkdirTemp("", "ginstore-test-")
	if err != nil {
		return "", nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", nil, fmt.Errorf("the go command is needed to build the embedded server: %w", err)
	}
	bin := filepath.Join(dir, "embeddb")
	build := exec.Command(goCmd, "build", "-o", bin, "./cmd/embeddb")
	build.Dir = filepath.Join("..", "embeddb")
	if out, err := build.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("go build ../embeddb/cmd/embeddb: %w\n%s", err, out)
	}

	// Cancelling ctx kills the server; it is the last resort of stop.
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-dir", filepath.Join(dir, "data"), "-stdin")
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 5 * time.Second // bounds Wait once the server is gone or killed
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return "", nil, err
	}
	lines := make(chan string, 1)
	waitErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
		waitErr <- cmd.Wait()
	}()
	select {
	case uri = <-lines:
	case err := <-waitErr:
		cancel()
		return "", nil, fmt.Errorf("embedded server exited before printing its URI: %v", err)
	case <-time.After(time.Minute):
		cancel()
		<-waitErr
		return "", nil, errors.New("embedded server did not print its URI within a minute; killed")
	}
	stop = func() error {
		defer os.RemoveAll(dir)
		defer cancel()
		stdin.Close() // the server stops at EOF on its standard input
		select {
		case err := <-waitErr:
			return err
		case <-time.After(30 * time.Second):
			cancel()
			<-waitErr
			return errors.New("embedded server did not stop within 30s; killed")
		}
	}
	return uri, stop, nil
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
