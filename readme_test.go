package mongostore

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeQuickStart checks that the README's quick start holds the code
// of the runnable Example, so the README never shows code that does not
// work.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	shown := between(t, string(readme), "## Quick start\n\n```go\n", "```")
	code := between(t, string(example), "\t// quick start begins\n", "\t// quick start ends")
	if !strings.Contains(shown, code) {
		t.Fatalf("README quick start does not contain the Example's code (example_test.go, between the quick-start markers).\nREADME:\n%s\nExample:\n%s", shown, code)
	}
}

func between(t *testing.T, s, from, to string) string {
	t.Helper()
	i := strings.Index(s, from)
	if i < 0 {
		t.Fatalf("marker %q not found", from)
	}
	s = s[i+len(from):]
	j := strings.Index(s, to)
	if j < 0 {
		t.Fatalf("marker %q not found", to)
	}
	return s[:j]
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
}

// readmeFile turns a README Go block into a compilable file: a whole file
// as it is; top-level declarations with the imports they use; statements
// inside a function. Names the block does not declare (a ctx, an addr) are
// not supplied, so a snippet that uses one fails to compile, as it would
// for a reader who copies it.
func readmeFile(block string) string {
	if strings.HasPrefix(block, "package ") {
		return block
	}
	code := regexp.MustCompile(`(?m)(^|\s)//.*$`).ReplaceAllString(block, "") // comments import nothing
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for name, path := range readmeImports {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(code) {
			fmt.Fprintf(&b, "\t%q\n", path)
		}
	}
	b.WriteString(")\n\nfunc main() {}\n\n")
	if regexp.MustCompile(`(?m)^(func|type|var|const) `).MatchString(block) {
		b.WriteString(block)
	} else {
		b.WriteString("func _() {\n" + block + "}\n")
	}
	return b.String()
}

// TestReadmeCodeCompiles builds every Go block of README.md as its own
// program, with the go command and an overlay (nothing is written to the
// module's tree).
func TestReadmeCodeCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command; not in -short")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d Go blocks in README.md, want the quick start and more", len(blocks))
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	for i, m := range blocks {
		real := filepath.Join(dir, fmt.Sprintf("block%d.go", i))
		if err := os.WriteFile(real, []byte(readmeFile(m[1])), 0o600); err != nil {
			t.Fatal(err)
		}
		pkg := fmt.Sprintf("./internal/readmecheck/block%d", i)
		overlay[filepath.Join(root, pkg, "main.go")] = real
		pkgs = append(pkgs, pkg)
	}
	overlayJSON, _ := json.Marshal(map[string]any{"Replace": overlay})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlayJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, pkg := range pkgs {
		cmd := exec.Command("go", "build", "-overlay="+overlayFile, "-o", os.DevNull, pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README Go block %d does not compile: %v\n%s\n--- as compiled:\n%s", i+1, err, out, readmeFile(blocks[i][1]))
		}
	}
}
