package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
// environment (less the app's own variables) and waits until it listens.
func startAppProcess(t *testing.T, env ...string) *appProcess {
	t.Helper()
	bin, err := appBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "ADDR", "MONGODB_URI", "DATA_DIR", "DB_NAME", "SESSION_KEY", "SESSION_MAX_AGE", "DEMO_USERS":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
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

// TestRestartKeepsSession logs in, restarts the app process with the same
// SESSION_KEY and data, and checks that the user is still logged in; then
// restarts it without SESSION_KEY and checks that the session is lost, as
// the app's log says.
func TestRestartKeepsSession(t *testing.T) {
	t.Parallel()
	env := []string{"ADDR=127.0.0.1:0", "SESSION_KEY=" + hex.EncodeToString(randomKey()), "DEMO_USERS=alice:wonderland"}
	if embeddedServer {
		env = append(env, "DATA_DIR="+t.TempDir()) // the app starts its own embedded server
	} else {
		env = append(env, "MONGODB_URI="+testURI, "DB_NAME="+testDBName(t))
	}

	first := startAppProcess(t, env...)
	if strings.Contains(first.output(), "will not survive a restart") {
		t.Errorf("the app warns about a generated key although SESSION_KEY is set")
	}
	b := newBrowser(t, first.url)
	b.login("alice", "wonderland")
	r := b.get("/")
	wantStatus(t, "GET / before restart", r, http.StatusOK, "")
	expBefore := pageExpiry(t, r.body)
	first.terminate()

	// Same address, so that the browser's cookie and URL stay the same.
	u, err := url.Parse(first.url)
	if err != nil {
		t.Fatal(err)
	}
	env[0] = "ADDR=" + u.Host
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

	// Without SESSION_KEY the app makes up a key, says so, and the cookie
	// signed with the old key no longer counts.
	third := startAppProcess(t, slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "SESSION_KEY=") })...)
	if !strings.Contains(third.output(), "sessions will not survive a restart") {
		t.Errorf("no warning about the generated key:\n%s", third.output())
	}
	wantStatus(t, "GET / after restart with another key", b.get("/"), http.StatusSeeOther, "/login")
	third.terminate()
}

// TestBadConfiguration checks that the binary refuses bad settings with a
// clear message and exit code 2.
func TestBadConfiguration(t *testing.T) {
	t.Parallel()
	bin, err := appBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "SESSION_KEY=abcd")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("app with a short SESSION_KEY: %v, want exit code 2\n%s", err, out)
	}
	if !strings.Contains(string(out), "SESSION_KEY: 2 bytes, want at least 32") {
		t.Errorf("unclear message: %s", out)
	}
}
