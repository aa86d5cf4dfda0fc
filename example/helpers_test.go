package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongostore/mongostore/internal/testserver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/crypto/bcrypt"
)

// The tests run the app against the server in MONGODB_URI when it is set.
// Otherwise TestMain builds the embedded server's command (FerretDB with
// SQLite, from the embeddb module) and runs one instance of it, in its own
// process so that it is not slowed down by the race detector, for all the
// tests; each test uses a database of its own.

var (
	// testDir is a temporary directory for the whole test run.
	testDir string
	// testURI is the connection string of the database server the tests use.
	testURI string
	// testDB is a client of that server, for the tests' own checks.
	testDB *mongo.Client
	// embeddedServer says testURI is the embedded server of TestMain.
	embeddedServer bool
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mongostore-example-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test set-up:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	testDir = dir

	testURI = os.Getenv("MONGODB_URI")
	if testURI == "" {
		db, err := startDBProcess(filepath.Join(dir, "shared-db"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "test set-up: start embedded server:", err)
			return 1
		}
		defer func() {
			if err := db.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "test tear-down: stop embedded server:", err)
			}
		}()
		testURI = db.URI
		embeddedServer = true
	}
	testDB, err = mongo.Connect(options.Client().ApplyURI(testURI).SetTimeout(30 * time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "test set-up: connect:", err)
		return 1
	}
	defer testDB.Disconnect(context.Background())
	return m.Run()
}

// buildTimeout bounds each go build of the tests.
const buildTimeout = 5 * time.Minute

// goBuild builds the package pkg into testDir once per test run and
// returns the path of the executable.
func goBuild(pkg, name string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		goCmd, err := exec.LookPath("go")
		if err != nil {
			return "", fmt.Errorf("the go command is needed to build %s: %w", pkg, err)
		}
		bin := filepath.Join(testDir, name)
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, goCmd, "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
		return bin, nil
	})
}

var (
	// embeddbBinary is the embedded server's command.
	embeddbBinary = sync.OnceValues(func() (string, error) { return testserver.Build(testDir) })
	// appBinary is this app, built without the race detector.
	appBinary = goBuild(".", "example")
)

// startDBProcess starts the embedded server, in a process of its own, with
// its files in dir.
func startDBProcess(dir string) (*testserver.Process, error) {
	bin, err := embeddbBinary()
	if err != nil {
		return nil, err
	}
	return testserver.Start(bin, dir)
}

var dbSeq atomic.Int64

var notNameChars = regexp.MustCompile(`[^a-z0-9]+`)

// testDBName returns a database name of its own for test t, and drops that
// database when the test ends.
func testDBName(t testing.TB) string {
	name := notNameChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	name = fmt.Sprintf("ex_%.30s_%d_%d", name, os.Getpid(), dbSeq.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := testDB.Database(name).Drop(ctx); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	return name
}

// randomKey returns a random session key.
func randomKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// testApp is the app running in the test process.
type testApp struct {
	url  string
	cfg  config
	logs *logWriter
}

// startApp runs the app in the test process on a free loopback port, with
// a database of its own, until the test ends. edit, if not nil, changes the
// configuration first.
func startApp(t *testing.T, edit func(*config)) *testApp {
	t.Helper()
	cfg := config{
		Addr:        "127.0.0.1:0",
		MongoURI:    testURI,
		DBName:      testDBName(t),
		SessionKeys: [][]byte{randomKey(), nil},
		MaxAge:      defaultMaxAge,
		Users:       []credential{{Name: "demo", Password: "demo"}},
		BcryptCost:  bcrypt.MinCost, // hashing at the default cost is slow under the race detector
	}
	if edit != nil {
		edit(&cfg)
	}
	urls := make(chan string, 1)
	cfg.OnListen = func(u string) { urls <- u }

	logs := &logWriter{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("app stopped with an error: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("app did not stop within a minute")
		}
		logs.close()
	})

	select {
	case u := <-urls:
		return &testApp{url: u, cfg: cfg, logs: logs}
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("app did not start: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("app did not start within a minute")
	}
	return nil
}

// sessions returns the session collection of the app.
func (a *testApp) sessions() *mongo.Collection {
	return testDB.Database(a.cfg.DBName).Collection(collectionName)
}

// countSessions returns the number of session documents of the app.
func (a *testApp) countSessions(t *testing.T) int64 {
	t.Helper()
	n, err := a.sessions().CountDocuments(t.Context(), bson.D{})
	if err != nil {
		t.Fatalf("count sessions: %v", err)
	}
	return n
}

// logWriter is the app's log: it keeps it for the test's checks and
// shows it in the test's output.
type logWriter struct {
	t      testing.TB
	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.closed {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// String returns everything logged so far.
func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// close stops passing lines on to the test, which may be over.
func (w *logWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so that tests see each response.
type browser struct {
	t      *testing.T
	client *http.Client
	base   string
}

func newBrowser(t *testing.T, base string) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, base: base, client: &http.Client{
		Jar:           jar,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// response is what a test looks at in an HTTP response.
type response struct {
	status   int
	location string
	header   http.Header
	body     string
}

// do sends a request; form, if not nil, is its url-encoded body.
func (b *browser) do(method, path string, form url.Values, header http.Header) response {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(b.t.Context(), method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, location: resp.Header.Get("Location"), header: resp.Header, body: string(data)}
}

func (b *browser) get(path string) response { return b.do(http.MethodGet, path, nil, nil) }

func (b *browser) post(path string, form url.Values) response {
	if form == nil {
		form = url.Values{}
	}
	return b.do(http.MethodPost, path, form, nil)
}

// login logs in and checks that it worked.
func (b *browser) login(user, password string) {
	b.t.Helper()
	r := b.post("/login", url.Values{"username": {user}, "password": {password}})
	if r.status != http.StatusSeeOther || r.location != "/" {
		b.t.Fatalf("POST /login as %s: got %d to %q, want 303 to /\n%s", user, r.status, r.location, r.body)
	}
}

// cookie returns the value of the cookie called name that the jar holds
// for the app, or "".
func (b *browser) cookie(name string) string {
	u, _ := url.Parse(b.base)
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// setCookie puts a cookie in the jar.
func (b *browser) setCookie(name, value string) {
	u, _ := url.Parse(b.base)
	b.client.Jar.SetCookies(u, []*http.Cookie{{Name: name, Value: value, Path: "/"}})
}

// wantStatus fails the test unless r has the status (and, for redirects,
// the location) wanted.
func wantStatus(t *testing.T, what string, r response, status int, location string) {
	t.Helper()
	if r.status != status || r.location != location {
		t.Fatalf("%s: got %d (Location %q), want %d (Location %q)\n%s", what, r.status, r.location, status, location, r.body)
	}
}

// pageTime returns the time of the element <time id="id" datetime="…">
// of a page: the machine-readable form of what the page shows.
func pageTime(t *testing.T, body, id string) time.Time {
	t.Helper()
	m := regexp.MustCompile(`<time id="` + regexp.QuoteMeta(id) + `" datetime="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no time #%s on the page:\n%s", id, body)
	}
	tm, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatalf("time #%s %q: %v", id, m[1], err)
	}
	return tm
}

// pageExpiry returns the session expiry that the home page shows.
func pageExpiry(t *testing.T, body string) time.Time {
	t.Helper()
	return pageTime(t, body, "expires")
}

// pageText returns the text of the element with the id (one whose tag
// name is tag, without child elements but <wbr>) of a page, unescaped.
func pageText(t *testing.T, body, tag, id string) string {
	t.Helper()
	m := regexp.MustCompile(`<` + tag + ` id="` + regexp.QuoteMeta(id) + `"[^>]*>((?:[^<]|<wbr>)*)</` + tag + `>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no <%s id=%q> on the page:\n%s", tag, id, body)
	}
	return html.UnescapeString(strings.ReplaceAll(m[1], "<wbr>", ""))
}
