// Package readmecheck compiles the Go blocks of a README, for the README
// tests of mongostore's modules (the library, the gin adapter), so that no
// README shows code that does not compile as written.
//
// Each block is built as its own program in the module under test, with the
// go command and an overlay: nothing is written to the module's tree.
package readmecheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")
	comment = regexp.MustCompile(`(?m)(^|\s)//.*$`)
	topDecl = regexp.MustCompile(`(?m)^(func|type|var|const) `)
)

// Blocks returns the code of every ```go block of the Markdown file at
// path, in order.
func Blocks(t testing.TB, path string) []string {
	t.Helper()
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range goBlock.FindAllStringSubmatch(string(readme), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// Between returns the part of s after the first from and before the next
// to, and fails t when either is missing.
func Between(t testing.TB, s, from, to string) string {
	t.Helper()
	_, after, ok := strings.Cut(s, from)
	if !ok {
		t.Fatalf("marker %q not found", from)
	}
	before, _, ok := strings.Cut(after, to)
	if !ok {
		t.Fatalf("marker %q not found", to)
	}
	return before
}

// HoldsExample checks that shown, a README's program, holds every line of
// example, the code of a runnable Example between its markers, in order,
// with the README's own lines between them allowed. Two differences are
// expected: the README's run returns the errors the Example passes to
// log.Fatal, and it reads MONGODB_URI into uri first, to check it is set.
func HoldsExample(t testing.TB, shown, example string) {
	t.Helper()
	example = strings.NewReplacer(
		"log.Fatal(err)", "return err",
		`ApplyURI(os.Getenv("MONGODB_URI"))`, "ApplyURI(uri)",
	).Replace(example)
	lines := strings.Split(shown, "\n")
	for _, want := range strings.Split(example, "\n") {
		if strings.TrimSpace(want) == "" {
			continue
		}
		i := slices.Index(lines, want)
		if i < 0 {
			t.Fatalf("the README's program lacks the Example's line %q, or has it out of order (log.Fatal(err) stands for return err).\nREADME:\n%s\nExample:\n%s", want, shown, example)
		}
		lines = lines[i+1:]
	}
}

// File turns a README Go block into a compilable file of package main: a
// whole file (one that starts with its package clause) as it is; top-level
// declarations with the imports they use; statements inside a function.
// imports maps the names a block may use without an import block of its
// own to their import paths. Names the block neither declares nor imports
// (a ctx, an addr) are not supplied, so a snippet that uses one fails to
// compile, as it would for a reader who copies it.
func File(block string, imports map[string]string) string {
	if strings.HasPrefix(block, "package ") {
		return block
	}
	code := comment.ReplaceAllString(block, "") // comments import nothing
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for name, path := range imports {
		if regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\.`).MatchString(code) {
			fmt.Fprintf(&b, "\t%s %q\n", name, path)
		}
	}
	b.WriteString(")\n\nfunc main() {}\n\n")
	if topDecl.MatchString(block) {
		b.WriteString(block)
	} else {
		b.WriteString("func _() {\n" + block + "}\n")
	}
	return b.String()
}

// Compile builds every block, made a file by File, as its own program of
// the module in the current directory (a test's, at the module's root), and
// reports each block that does not compile as an error of t.
func Compile(t testing.TB, blocks []string, imports map[string]string) {
	t.Helper()
	files, pkgs, overlayFile := overlay(t, blocks, imports)
	for i, pkg := range pkgs {
		cmd := exec.Command("go", "build", "-overlay="+overlayFile, "-o", os.DevNull, pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README Go block %d does not compile: %v\n%s\n--- as compiled:\n%s", i+1, err, out, files[i])
		}
	}
}

// Build builds block, made a file by File, as a program of the module in
// the current directory, and returns the path of the executable, in a
// temporary directory of t. It fails t when the block does not compile.
func Build(t testing.TB, block string, imports map[string]string) string {
	t.Helper()
	files, pkgs, overlayFile := overlay(t, []string{block}, imports)
	bin := filepath.Join(t.TempDir(), "readme-program")
	cmd := exec.Command("go", "build", "-overlay="+overlayFile, "-o", bin, pkgs[0])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README Go block does not compile: %v\n%s\n--- as compiled:\n%s", err, out, files[0])
	}
	return bin
}

// overlay writes the files of blocks (see File) to a temporary directory
// of t and returns them, the packages they stand for in the module in the
// current directory (./internal/readmecheck/blockN, which exist only in
// the overlay), and the overlay file for go build -overlay.
func overlay(t testing.TB, blocks []string, imports map[string]string) (files, pkgs []string, overlayFile string) {
	t.Helper()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	replace := map[string]string{}
	files = make([]string, len(blocks))
	pkgs = make([]string, len(blocks))
	for i, block := range blocks {
		files[i] = File(block, imports)
		real := filepath.Join(dir, fmt.Sprintf("block%d.go", i+1))
		if err := os.WriteFile(real, []byte(files[i]), 0o600); err != nil {
			t.Fatal(err)
		}
		pkgs[i] = fmt.Sprintf("./internal/readmecheck/block%d", i+1)
		replace[filepath.Join(root, pkgs[i], "main.go")] = real
	}
	overlayJSON, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile = filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlayJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	return files, pkgs, overlayFile
}

// Output is a buffer that a child process's output goes to while a test
// reads it.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// VisitTwice visits the program at addr twice with one browser, once it
// answers, and returns what it said.
func VisitTwice(t testing.TB, addr string, output fmt.Stringer) [2]string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	visit := func() (string, error) {
		resp, err := browser.Get("http://" + addr + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(body)), err
	}
	var got [2]string
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if got[0], err = visit(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the program does not answer on %s: %v\n%s", addr, err, output)
	}
	if got[1], err = visit(); err != nil {
		t.Errorf("second visit: %v", err)
	}
	return got
}
