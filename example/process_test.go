package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// appProcess is the app built by `go build`, running as a process of its
// own, configured through the environment as a user would.
type appProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	done   chan error // the exit status, once the output has been read
	exited bool       // done has been received from

	mu  sync.Mutex
	out strings.Builder // stdout and stderr
}

var listeningRE = regexp.MustCompile(`msg="listening on (http://[^"\s]+)"`)

// startAppProcess starts the app binary with env added to the test's
// environment (less the app's own variables and OpenTelemetry's) and waits
// until it listens.
func startAppProcess(t *testing.T, env ...string) *appProcess {
	t.Helper()
	bin, err := appBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = appEnv(env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = 10 * time.Second // Wait returns even if the output pipe stays open
	if err := cmd.Start(); err != nil {
		t.Fatalf("start app: %v", err)
	}
	p := &appProcess{t: t, cmd: cmd, done: make(chan error, 1)}
	readDone := make(chan struct{})
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-readDone
		p.done <- err
	}()
	urls := make(chan string, 1)
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.out.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		if !p.exited {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case p.url = <-urls:
		return p
	case err := <-p.done:
		p.exited = true
		t.Fatalf("app exited before it listened: %v\n%s", err, p.output())
	case <-time.After(time.Minute):
		t.Fatalf("app did not listen within a minute:\n%s", p.output())
	}
	return nil
}

// appSettings are the environment variables the app reads, but
// OpenTelemetry's (OTEL_*).
var appSettings = []string{"ADDR", "MONGODB_URI", "DATA_DIR", "EMBEDDED_DB_ADDR", "DB_NAME",
	"SESSION_KEY", "SESSION_BLOCK_KEY", "SESSION_MAX_AGE", "COOKIE_SECURE", "DEMO_USERS", "TRUSTED_PROXIES", "MAX_SESSIONS_PER_USER"}

// appEnv returns the test's environment less the app's settings and
// OpenTelemetry's, plus env.
func appEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); {
		case slices.Contains(appSettings, name):
		case strings.HasPrefix(name, "OTEL_"): // the telemetry's settings
		default:
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// output returns what the process printed so far.
func (p *appProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// terminate sends SIGTERM and checks that the app stops cleanly.
func (p *appProcess) terminate() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-p.done:
		p.exited = true
		if err != nil {
			p.t.Fatalf("app exited with %v after SIGTERM:\n%s", err, p.output())
		}
	case <-time.After(30 * time.Second):
		p.t.Fatalf("app did not stop within 30s of SIGTERM:\n%s", p.output())
	}
	out := p.output()
	for _, want := range []string{"shutting down", "msg=stopped"} {
		if !strings.Contains(out, want) {
			p.t.Errorf("app output lacks %q:\n%s", want, out)
		}
	}
	p.t.Logf("app output:\n%s", out)
}

// restartEnv returns the environment of an app process for a restart test:
// a free port, DATA_DIR (a directory of the test's, which the embedded
// server, if any, and a key file use), a free port for the embedded server
// (the default address is TestEmbeddedDatabaseKeepsItsAddress's) and,
// when the tests use a server of their own, that server.
func restartEnv(t *testing.T) []string {
	env := []string{"ADDR=127.0.0.1:0", "DATA_DIR=" + t.TempDir(), "EMBEDDED_DB_ADDR=127.0.0.1:0", "DEMO_USERS=alice:wonderland"}
	if !embeddedServer {
		env = append(env, "MONGODB_URI="+testURI, "DB_NAME="+testDBName(t))
	}
	return env
}

// sameAddr returns env with ADDR set to the address p listens on, so that
// a restarted app keeps the browser's cookie and URL.
func sameAddr(t *testing.T, env []string, p *appProcess) []string {
	t.Helper()
	u, err := url.Parse(p.url)
	if err != nil {
		t.Fatal(err)
	}
	env = slices.Clone(env)
	env[0] = "ADDR=" + u.Host
	return env
}

// TestRestartKeepsSession logs in, restarts the app process with the same
// SESSION_KEY and data, and checks that the user is still logged in; then
// restarts it with another SESSION_KEY and checks that the session is lost.
func TestRestartKeepsSession(t *testing.T) {
	t.Parallel()
	env := append(restartEnv(t), "SESSION_KEY="+hex.EncodeToString(randomKey()))

	first := startAppProcess(t, env...)
	if strings.Contains(first.output(), "session key saved in") || strings.Contains(first.output(), "generated a session key") {
		t.Errorf("the app uses a key file although SESSION_KEY is set:\n%s", first.output())
	}
	b := newBrowser(t, first.url)
	b.login("alice", "wonderland")
	r := b.get("/")
	wantStatus(t, "GET / before restart", r, http.StatusOK, "")
	expBefore := pageExpiry(t, r.body)
	first.terminate()

	env = sameAddr(t, env, first)
	second := startAppProcess(t, env...)
	if second.url != first.url {
		t.Fatalf("restarted app listens on %s, want %s", second.url, first.url)
	}
	r = b.get("/")
	wantStatus(t, "GET / after restart", r, http.StatusOK, "")
	if !strings.Contains(r.body, `<strong id="current-user">alice</strong>`) {
		t.Errorf("after restart the page does not show alice:\n%s", r.body)
	}
	if expAfter := pageExpiry(t, r.body); !expAfter.Equal(expBefore) {
		t.Errorf("expiry changed across the restart: %v, then %v (a read-only visit within a minute must not write)", expBefore, expAfter)
	}
	second.terminate()

	// A rotation, new key first: the old one's cookie still counts.
	key := env[len(env)-1]
	env[len(env)-1] = "SESSION_KEY=" + hex.EncodeToString(randomKey()) + "," + strings.TrimPrefix(key, "SESSION_KEY=")
	rotated := startAppProcess(t, env...)
	r = b.get("/")
	wantStatus(t, "GET / after a restart with SESSION_KEY=new,old", r, http.StatusOK, "")
	if !strings.Contains(r.body, `<strong id="current-user">alice</strong>`) {
		t.Errorf("after the rotation the page does not show alice:\n%s", r.body)
	}
	rotated.terminate()

	// With another key, the cookie signed with the old one no longer counts.
	env[len(env)-1] = "SESSION_KEY=" + hex.EncodeToString(randomKey())
	third := startAppProcess(t, env...)
	wantStatus(t, "GET / after restart with another key", b.get("/"), http.StatusSeeOther, "/login")
	third.terminate()
}

var embeddedURIRE = regexp.MustCompile(`(?m)^embedded database: (mongodb://\S+) \(try: mongosh (\S+) --eval 'db\.sessions\.find\(\)'\)$`)

// TestRestartWithKeyFile checks the app without SESSION_KEY: its first
// start makes a key and keeps it in DATA_DIR (also when the database is
// elsewhere), later starts reuse it, so that sessions survive restarts. It
// also checks that the app prints the embedded server's address, where
// mongosh (here, the driver) finds the session.
func TestRestartWithKeyFile(t *testing.T) {
	t.Parallel()
	env := restartEnv(t)
	dataDir := strings.TrimPrefix(env[1], "DATA_DIR=")
	keyFile := filepath.Join(dataDir, keyFileName)

	first := startAppProcess(t, env...)
	out := first.output()
	if !strings.Contains(out, "generated a session key") || !strings.Contains(out, "file="+keyFile) {
		t.Errorf("the log does not say that a key was made and kept in %s:\n%s", keyFile, out)
	}
	data, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatalf("key file: %v", err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	key := strings.TrimSpace(string(data))
	if k, err := hex.DecodeString(key); err != nil || len(k) != minKeyBytes {
		t.Fatalf("key file holds %d bytes (%v), want %d in hex", len(k), err, minKeyBytes)
	}
	if strings.Contains(out, key) {
		t.Errorf("the key is in the output")
	}

	b := newBrowser(t, first.url)
	b.login("alice", "wonderland")
	wantStatus(t, "GET / before restart", b.get("/"), http.StatusOK, "")

	m := embeddedURIRE.FindStringSubmatch(out)
	switch {
	case embeddedServer && m == nil:
		t.Errorf("the app does not print the embedded server's address and a mongosh command:\n%s", out)
	case embeddedServer:
		if want := strings.TrimSuffix(m[1], "/") + "/" + defaultDBName; m[2] != want {
			t.Errorf("mongosh command for %s, want %s", m[2], want)
		}
		// What the printed command would show.
		client, err := mongo.Connect(options.Client().ApplyURI(m[2]).SetTimeout(30 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer client.Disconnect(context.Background())
		n, err := client.Database(defaultDBName).Collection(collectionName).CountDocuments(t.Context(), bson.D{})
		if err != nil || n != 1 {
			t.Errorf("%d session documents at the printed address (%v), want 1", n, err)
		}
	case m != nil || strings.Contains(out, "embedded database:"):
		t.Errorf("the app prints an embedded server's address although MONGODB_URI is set:\n%s", out)
	}
	first.terminate()

	env = sameAddr(t, env, first)
	second := startAppProcess(t, env...)
	if !strings.Contains(second.output(), "using the session key saved in "+keyFile) {
		t.Errorf("the log does not say the saved key is used:\n%s", second.output())
	}
	r := b.get("/")
	wantStatus(t, "GET / after restart", r, http.StatusOK, "")
	if !strings.Contains(r.body, `<strong id="current-user">alice</strong>`) {
		t.Errorf("after restart the page does not show alice:\n%s", r.body)
	}
	second.terminate()

	// SESSION_KEY, when set, is the key: the file's no longer counts, and
	// the file stays as it was.
	third := startAppProcess(t, append(env, "SESSION_KEY="+hex.EncodeToString(randomKey()))...)
	wantStatus(t, "GET / with SESSION_KEY set to another key", b.get("/"), http.StatusSeeOther, "/login")
	third.terminate()
	if again, err := os.ReadFile(keyFile); err != nil || string(again) != string(data) {
		t.Errorf("the key file changed (%v)", err)
	}
}

// TestBadConfiguration checks that the binary refuses bad settings with a
// clear message and exit code 2.
func TestBadConfiguration(t *testing.T) {
	t.Parallel()
	bin, err := appBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ env, want string }{
		{"SESSION_KEY=abcd", "SESSION_KEY: 2 bytes, want at least 32"},
		{"MAX_SESSIONS_PER_USER=lots", `example: configuration: MAX_SESSIONS_PER_USER: "lots" is not a whole number from 0 (no limit) to 1000`},
	} {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), tc.env)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("app with %s: %v, want exit code 2\n%s", tc.env, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("app with %s: unclear message: %s", tc.env, out)
		}
	}
}

// TestEmbeddedDatabaseKeepsItsAddress starts the app with neither
// MONGODB_URI nor EMBEDDED_DB_ADDR, while the embedded server's default
// address is taken (by the test, or by whoever holds it): the app says so
// and picks another port. Started again with the same DATA_DIR, its
// server is at the same address, without a word about the default. Each
// start prints the server's URI.
func TestEmbeddedDatabaseKeepsItsAddress(t *testing.T) {
	t.Parallel()
	if ln, err := net.Listen("tcp", defaultEmbeddedAddr); err == nil {
		t.Cleanup(func() { ln.Close() })
	} else {
		t.Logf("%s is taken already: %v", defaultEmbeddedAddr, err)
	}
	env := []string{"ADDR=127.0.0.1:0", "DATA_DIR=" + t.TempDir(), "SESSION_KEY=" + hex.EncodeToString(randomKey())}
	fallback := defaultEmbeddedAddr + " is in use: the embedded database listens on "
	var uris []string
	for start := range 2 {
		p := startAppProcess(t, env...)
		out := p.output()
		m := embeddedURIRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("start %d does not print the embedded server's URI:\n%s", start+1, out)
		}
		uris = append(uris, m[1])
		if said := strings.Contains(out, fallback) && strings.Contains(out, "EMBEDDED_DB_ADDR"); said != (start == 0) {
			t.Errorf("start %d: says the default address is in use and names EMBEDDED_DB_ADDR: %v, want %v:\n%s", start+1, said, start == 0, out)
		}
		newBrowser(t, p.url).login("demo", "demo") // the server works
		p.terminate()
	}
	if uris[0] != uris[1] {
		t.Errorf("the embedded server moved from %s to %s across a restart with the same DATA_DIR", uris[0], uris[1])
	}
	if uris[0] == "mongodb://"+defaultEmbeddedAddr+"/" {
		t.Errorf("the embedded server listens on %s, which was taken", defaultEmbeddedAddr)
	}
}

// TestAddressInUse runs the app with its address, then its embedded
// server's, set to a taken one: it stops with exit code 1 and an error
// that names the setting to change.
func TestAddressInUse(t *testing.T) {
	t.Parallel()
	bin, err := appBinary()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	taken := ln.Addr().String()
	for _, tc := range []struct {
		setting string
		want    string
	}{
		{"ADDR", "example: listen on " + taken + ": address already in use: set ADDR to another address"},
		{"EMBEDDED_DB_ADDR", "example: embedded database: listen on " + taken + ": address already in use: set EMBEDDED_DB_ADDR to another address"},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = appEnv("ADDR=127.0.0.1:0", "DATA_DIR="+t.TempDir(), tc.setting+"="+taken)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("app with %s=%s (taken): %v, want exit code 1\n%s", tc.setting, taken, err, out)
			}
			if !strings.Contains(string(out), tc.want+"\n") {
				t.Errorf("app with %s=%s (taken) does not say %q:\n%s", tc.setting, taken, tc.want, out)
			}
		})
	}
}
