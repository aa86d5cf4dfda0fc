package ginstore_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mongostore/mongostore/internal/readmecheck"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestReadmeExample checks that the README's gin program holds the code
// of the runnable Example, so the README never shows code that does not
// work: every line of the Example between its markers, in order, with the
// README's own lines between them allowed. Two differences are expected:
// the README's run returns the errors the Example (a function without an
// error result) passes to log.Fatal, and it reads MONGODB_URI into uri
// first, to check that it is set.
func TestReadmeExample(t *testing.T) {
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	shown := readmeProgram(t)
	code := readmecheck.Between(t, string(example), "\t// gin example begins\n", "\t// gin example ends")
	readmecheck.HoldsExample(t, shown, code)
}

// readmeProgram returns the README's gin program: the first Go block of
// its section "gin".
func readmeProgram(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	gin := readmecheck.Between(t, string(readme), "## gin\n", "## ")
	return readmecheck.Between(t, gin, "```go\n", "```")
}

// programAddr finds the address the README's gin program listens on.
var programAddr = regexp.MustCompile(`&http\.Server\{Addr: "([^"]+)"`)

// TestReadmeProgramRuns builds the README's gin program and runs it as a
// reader would. Without MONGODB_URI it stops at once and says to set it.
// With it (the test server), it serves two visits of one browser (1, then
// 2), and SIGINT, then SIGTERM, stops it cleanly: exit code 0, "stopped"
// printed (once run has returned, so its deferred Close and Disconnect
// have run), its port closed. Its address is not that of mongostore's
// sample app or quick start, which the README suggests running with it;
// the test runs it on a free port instead.
func TestReadmeProgramRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program with the go command; not in -short")
	}
	shown := readmeProgram(t)
	m := programAddr.FindStringSubmatch(shown)
	if m == nil {
		t.Fatalf("the gin program makes no &http.Server{Addr: \"…\"}:\n%s", shown)
	}
	wantOwnAddr(t, m[1])
	addr := freeAddr(t)
	bin := readmecheck.Build(t, strings.Replace(shown, `Addr: "`+m[1]+`"`, `Addr: "`+addr+`"`, 1), nil)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = envWithURI("")
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Errorf("without MONGODB_URI the program did not stop with an error (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "MONGODB_URI is not set: set it to") || strings.Contains(string(out), "error parsing uri") {
		t.Errorf("without MONGODB_URI the program does not say to set it:\n%s", out)
	}

	t.Cleanup(func() {
		client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
		if err == nil {
			_ = client.Database("myapp").Collection("gin_sessions").Drop(context.Background())
			_ = client.Disconnect(context.Background())
		}
	})
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { runUntilSignal(t, bin, addr, sig) })
	}
}

// wantOwnAddr fails the test if addr, the gin program's, is the address of
// mongostore's sample app (example/main.go's defaultAddr) or quick start
// (the library's README).
func wantOwnAddr(t *testing.T, addr string) {
	t.Helper()
	for file, re := range map[string]*regexp.Regexp{
		"../example/main.go": regexp.MustCompile(`defaultAddr\s*=\s*"([^"]+)"`),
		"../README.md":       regexp.MustCompile(`&http\.Server\{Addr:\s*"([^"]+)"`), // the quick start
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		switch m := re.FindSubmatch(data); {
		case m == nil:
			t.Errorf("%s: no address found with %s", file, re)
		case string(m[1]) == addr:
			t.Errorf("the gin program listens on %s, as %s does: run together, the second fails", addr, file)
		}
	}
	if readme, _ := os.ReadFile("README.md"); !strings.Contains(string(readme), "open <http://"+addr+">") {
		t.Errorf("the README does not say to open http://%s", addr)
	}
}

// runUntilSignal runs the gin program bin, listening on addr, against the
// test server; visits it twice; sends it sig, and checks that it stops
// cleanly.
func runUntilSignal(t *testing.T, bin, addr string, sig syscall.Signal) {
	output := &readmecheck.Output{}
	cmd := exec.Command(bin)
	cmd.Env = envWithURI(os.Getenv("MONGODB_URI"))
	cmd.Stdout, cmd.Stderr = output, output
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	visits := readmecheck.VisitTwice(t, addr, output)
	if visits != [2]string{"visit number 1", "visit number 2"} {
		t.Errorf("two visits: %q, want visit number 1, then 2", visits)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err // for the clean-up
		if err != nil {
			t.Errorf("after %v the program exited with %v, want exit code 0:\n%s", sig, err, output)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the program did not stop within 30s of %v:\n%s", sig, output)
	}
	t.Logf("output:\n%s", output)
	if !strings.Contains(output.String(), "stopped\n") {
		t.Errorf("after %v the program did not say stopped (its deferred calls did not all run):\n%s", sig, output)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("after %v something still listens on %s", sig, addr)
	}
}

// envWithURI returns the test's environment with MONGODB_URI set to uri
// ("" for unset).
func envWithURI(uri string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MONGODB_URI=") {
			env = append(env, kv)
		}
	}
	if uri != "" {
		env = append(env, "MONGODB_URI="+uri)
	}
	return env
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// readmeImports are the packages the README's snippets may use without an
// import block of their own, by the name they are used under. sessions is
// gin-contrib's, as in a gin application.
var readmeImports = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"log":        "log",
	"os":         "os",
	"time":       "time",
	"gin":        "github.com/gin-gonic/gin",
	"sessions":   "github.com/gin-contrib/sessions",
	"ginstore":   "github.com/mongostore/mongostore/ginstore",
	"mongostore": "github.com/mongostore/mongostore",
	"mongo":      "go.mongodb.org/mongo-driver/v2/mongo",
	"options":    "go.mongodb.org/mongo-driver/v2/mongo/options",
}

// TestReadmeCodeCompiles builds every Go block of README.md as its own
// program in this module, as the library's test of the same name does for
// its README (see readmecheck.File for how a snippet is made a program).
func TestReadmeCodeCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command; not in -short")
	}
	blocks := readmecheck.Blocks(t, "README.md")
	if len(blocks) < 2 {
		t.Fatalf("found %d Go blocks in README.md, want the gin example and the login", len(blocks))
	}
	readmecheck.Compile(t, blocks, readmeImports)
}
