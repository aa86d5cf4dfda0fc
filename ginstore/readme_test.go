package ginstore_test

import (
	"os"
	"strings"
	"testing"

	"github.com/mongostore/mongostore/internal/readmecheck"
)

// TestReadmeExample checks that the README's gin example holds the code of
// the runnable Example, so the README never shows code that does not work.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	gin := readmecheck.Between(t, string(readme), "## gin\n", "## ")
	shown := readmecheck.Between(t, gin, "```go\n", "```")
	code := readmecheck.Between(t, string(example), "\t// gin example begins\n", "\t// gin example ends")
	if !strings.Contains(shown, code) {
		t.Fatalf("README gin example does not contain the Example's code.\nREADME:\n%s\nExample:\n%s", shown, code)
	}
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
