package mongostore

import (
	"os"
	"strings"
	"testing"

	"github.com/mongostore/mongostore/internal/readmecheck"
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
	shown := readmecheck.Between(t, string(readme), "## Quick start\n\n```go\n", "```")
	code := readmecheck.Between(t, string(example), "\t// quick start begins\n", "\t// quick start ends")
	if !strings.Contains(shown, code) {
		t.Fatalf("README quick start does not contain the Example's code (example_test.go, between the quick-start markers).\nREADME:\n%s\nExample:\n%s", shown, code)
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

// TestReadmeCodeCompiles builds every Go block of README.md as its own
// program (see readmecheck.File for how a snippet is made a program).
func TestReadmeCodeCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command; not in -short")
	}
	blocks := readmecheck.Blocks(t, "README.md")
	if len(blocks) < 3 {
		t.Fatalf("found %d Go blocks in README.md, want the quick start and more", len(blocks))
	}
	readmecheck.Compile(t, blocks, readmeImports)
}
