package mongostore

import (
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/mongostore/mongostore/internal/readmecheck"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestReadmeQuickStart checks that the README's quick start holds the code
// of the runnable Example, so the README never shows code that does not
// work: every line of the Example between the quick-start markers, in
// order, with the README's own lines between them allowed. Two
// differences are expected: the README's run returns the errors the
// Example (a function without an error result) passes to log.Fatal, and
// it reads MONGODB_URI into uri first, to check that it is set.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	shown := readmecheck.Between(t, string(readme), "## Quick start\n\n```go\n", "```")
	code := readmecheck.Between(t, string(example), "\t// quick start begins\n", "\t// quick start ends")
	readmecheck.HoldsExample(t, shown, code)
}

// quickStartAddr finds the address the README's quick start listens on.
var quickStartAddr = regexp.MustCompile(`Addr:\s*"([^"]+)"`)

// TestReadmeQuickStartRuns builds the README's quick start and runs it as
// a reader would. Without MONGODB_URI it stops at once and says what to
// set. With it (the test server), it listens on its address, which is not
// the sample app's (example/main.go's defaultAddr): the README suggests
// running both. Two visits of one browser count 1, then 2. SIGTERM then
// stops it cleanly: it exits 0, within seconds.
func TestReadmeQuickStartRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program with the go command; not in -short")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := readmecheck.Between(t, string(readme), "## Quick start\n\n```go\n", "```")
	m := quickStartAddr.FindStringSubmatch(shown)
	if m == nil {
		t.Fatalf("the quick start's http.Server has no Addr: \"…\":\n%s", shown)
	}
	addr := m[1]
	app, err := os.ReadFile("example/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if d := regexp.MustCompile(`defaultAddr\s*=\s*"([^"]+)"`).FindSubmatch(app); d == nil {
		t.Error("example/main.go has no defaultAddr")
	} else if string(d[1]) == addr {
		t.Errorf("the quick start listens on %s, the sample app's default address: run together, the second fails", addr)
	}
	if !strings.Contains(string(readme), "open <http://"+addr+">") {
		t.Errorf("the README does not say to open http://%s", addr)
	}

	bin := readmecheck.Build(t, shown, nil)
	env := func(uri string) []string {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "MONGODB_URI=") {
				env = append(env, kv)
			}
		}
		return append(env, "MONGODB_URI="+uri)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = env("")
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Errorf("without MONGODB_URI the quick start did not stop with an error (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "MONGODB_URI is not set") {
		t.Errorf("without MONGODB_URI the quick start does not say to set it:\n%s", out)
	}

	// The quick start's address is fixed: the rest cannot run if it is
	// taken. (Not a skip: CI's DocumentDB leg allows none.)
	if ln, err := net.Listen("tcp", addr); err != nil {
		t.Logf("NOT RUN: the quick start against the server: %s is taken (%v)", addr, err)
		return
	} else {
		ln.Close()
	}
	output := &readmecheck.Output{}
	cmd = exec.Command(bin)
	cmd.Env = env(os.Getenv("MONGODB_URI"))
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Kill()
			<-waited
		}
		client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
		if err == nil {
			_ = client.Database("myapp").Collection("sessions").Drop(context.Background())
			_ = client.Disconnect(context.Background())
		}
	})
	visits := readmecheck.VisitTwice(t, addr, output)
	if visits != [2]string{"visit number 1", "visit number 2"} {
		t.Errorf("two visits: %q, want visit number 1, then 2", visits)
	}

	// SIGTERM, as a service manager or a container runtime sends it: the
	// server shuts down, run returns nil after its deferred calls, and
	// main returns: exit status 0.
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		exited = true
		if err != nil {
			t.Errorf("after SIGTERM the quick start exited with %v, want status 0:\n%s", err, output.String())
		}
		t.Logf("the quick start exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Errorf("the quick start has not exited 10 s after SIGTERM:\n%s", output.String())
	}
}

// readmeImports are the packages README snippets may use without an import
// block of their own, by the name they are used under.
var readmeImports = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"log":        "log",
	"slog":       "log/slog",
	"os":         "os",
	"time":       "time",
	"hex":        "encoding/hex",
	"mongostore": "github.com/mongostore/mongostore",
	"sessions":   "github.com/gorilla/sessions",
	"mongo":      "go.mongodb.org/mongo-driver/v2/mongo",
	"options":    "go.mongodb.org/mongo-driver/v2/mongo/options",
	"bson":       "go.mongodb.org/mongo-driver/v2/bson",
	"event":      "go.mongodb.org/mongo-driver/v2/event",
	"sync":       "sync",
	"otel":       "go.opentelemetry.io/otel",
	"attribute":  "go.opentelemetry.io/otel/attribute",
	"codes":      "go.opentelemetry.io/otel/codes",
	"trace":      "go.opentelemetry.io/otel/trace",
}

// markdownFiles are the pages whose code the tests check: README.md and
// every page of docs/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md (%v)", err)
	}
	return append([]string{"README.md"}, docs...)
}

// TestReadmeCodeCompiles builds every Go block of README.md and of the
// pages of docs/ as its own program (see readmecheck.File for how a
// snippet is made a program). TestDocsGoBlocksChecked checks that every
// block of Go code is one it finds.
func TestReadmeCodeCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command; not in -short")
	}
	for _, path := range markdownFiles(t) {
		t.Run(path, func(t *testing.T) {
			blocks := readmecheck.Blocks(t, path)
			if path == "README.md" && len(blocks) < 3 {
				t.Fatalf("found %d Go blocks in README.md, want the quick start and more", len(blocks))
			}
			readmecheck.Compile(t, blocks, readmeImports)
		})
	}
}

// fence is a fenced code block of a Markdown page.
type fence struct {
	info string // what follows the opening backticks: go, sh, js, or nothing
	code string
	line int // of the opening fence, from 1
}

// fenceLine matches the opening or closing line of a fenced code block.
var fenceLine = regexp.MustCompile("^\\s*(```+)\\s*(.*?)\\s*$")

// splitMarkdown returns a Markdown text with the lines of its fenced code
// blocks blanked (so that line numbers still hold), and those blocks.
func splitMarkdown(text string) (prose string, fences []fence) {
	lines := strings.Split(text, "\n")
	var open *fence
	var ticks string
	for i, line := range lines {
		m := fenceLine.FindStringSubmatch(line)
		switch {
		case open == nil && m != nil:
			open, ticks = &fence{info: m[2], line: i + 1}, m[1]
			lines[i] = ""
		case open != nil && m != nil && m[2] == "" && len(m[1]) >= len(ticks):
			fences = append(fences, *open)
			open = nil
			lines[i] = ""
		case open != nil:
			open.code += line + "\n"
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n"), fences
}

// looksLikeGo reports whether code, a fenced block not marked go, parses
// as a Go file, as top-level declarations or as statements, and has a
// function, a short variable declaration or an import: code that the
// compile test would miss.
func looksLikeGo(code string) bool {
	if !strings.Contains(code, "func") && !strings.Contains(code, ":=") && !strings.Contains(code, "import") {
		return false
	}
	for _, file := range []string{code, "package p\n" + code, "package p\nfunc _() {\n" + code + "\n}\n"} {
		if _, err := parser.ParseFile(token.NewFileSet(), "block.go", file, parser.SkipObjectResolution); err == nil {
			return true
		}
	}
	return false
}

// TestDocsGoBlocksChecked: every block of Go code in README.md and docs/
// is one TestReadmeCodeCompiles compiles. A block opened otherwise than
// with ```go (```golang, ```Go, ```go with more after it), or Go code in a
// block marked as another language or none, would escape it.
func TestDocsGoBlocksChecked(t *testing.T) {
	for _, path := range markdownFiles(t) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, fences := splitMarkdown(string(text))
		goFences := 0
		for _, f := range fences {
			lang := strings.ToLower(strings.TrimSpace(strings.SplitN(f.info, " ", 2)[0]))
			switch {
			case f.info == "go":
				goFences++
			case lang == "go" || lang == "golang":
				t.Errorf("%s:%d: a Go block opened with ```%s, which the compile test does not read: open it with ```go", path, f.line, f.info)
			case looksLikeGo(f.code):
				t.Errorf("%s:%d: a ```%s block holds Go code, which no test compiles: open it with ```go", path, f.line, f.info)
			}
		}
		if blocks := readmecheck.Blocks(t, path); len(blocks) != goFences {
			t.Errorf("%s: %d blocks opened with ```go, but readmecheck.Blocks finds %d: the compile test misses some", path, goFences, len(blocks))
		}
	}
}

// TestReadmeShape: the README stays short, and its first 80 lines give the
// install command, the quick start and the two commands a newcomer runs
// first (the sample app, the tests).
func TestReadmeShape(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(readme), "\n"), "\n")
	if len(lines) > 400 {
		t.Errorf("README.md has %d lines, more than 400: move the detail to a page of docs/", len(lines))
	}
	top := strings.Join(lines[:min(80, len(lines))], "\n") + "\n"
	for _, want := range []struct{ what, re string }{
		{"the install command", "(?m)^go get github\\.com/mongostore/mongostore$"},
		{"the quick start (its heading and the opening of its program)", "(?m)^## Quick start\\n\\n```go\\npackage main\\n"},
		{"the command that runs the sample app", "(?m)^make run\\b"},
		{"the command that runs the tests", "(?m)^make test\\b"},
	} {
		if !regexp.MustCompile(want.re).MatchString(top) {
			t.Errorf("README.md's first 80 lines lack %s (%s)", want.what, want.re)
		}
	}
}

// mdLink matches an inline Markdown link or image: [text](target) or
// [text](target "title").
var mdLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeSpan matches inline code, which may wrap lines.
var codeSpan = regexp.MustCompile("`[^`]*`")

// anchors returns the anchors GitHub gives the headings of a Markdown text:
// the heading's text, lowercased, without its punctuation (hyphens and
// underscores stay), spaces made hyphens; -1, -2 … after repeats.
func anchors(text string) map[string]bool {
	prose, _ := splitMarkdown(text)
	heading := regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	linkText := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(prose, -1) {
		h := strings.ToLower(linkText.ReplaceAllString(m[1], "$1"))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// TestDocsLinks: every relative link of README.md and of docs/ names a file
// or directory of the repository, and every anchor a heading of the page
// it names.
func TestDocsLinks(t *testing.T) {
	scheme := regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	for _, path := range markdownFiles(t) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		prose, _ := splitMarkdown(string(text))
		prose = codeSpan.ReplaceAllStringFunc(prose, func(s string) string {
			return strings.Repeat("\n", strings.Count(s, "\n")) // keep the line numbers
		})
		for _, loc := range mdLink.FindAllStringSubmatchIndex(prose, -1) {
			target := prose[loc[2]:loc[3]]
			line := 1 + strings.Count(prose[:loc[0]], "\n")
			if scheme.MatchString(target) {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			resolved := path
			if file != "" {
				resolved = filepath.Join(filepath.Dir(path), file)
			}
			if _, err := os.Stat(resolved); err != nil {
				t.Errorf("%s:%d: the link %s names %s, which does not exist", path, line, target, resolved)
				continue
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(resolved, ".md") {
				t.Errorf("%s:%d: the link %s has an anchor on a page that is not Markdown", path, line, target)
				continue
			}
			page, err := os.ReadFile(resolved)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(page))[anchor] {
				t.Errorf("%s:%d: the link %s names the anchor #%s, which no heading of %s has", path, line, target, anchor, resolved)
			}
		}
	}
}
