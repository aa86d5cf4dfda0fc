package ginstore_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeExample checks that the README's gin example is the code of the
// runnable Example, so the README never shows code that does not compile or
// does not work.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	gin := between(t, string(readme), "## gin\n", "## ")
	shown := between(t, gin, "```go\n", "```")
	code := between(t, string(example), "\t// gin example begins\n", "\t// gin example ends")
	var lines []string
	for _, l := range strings.SplitAfter(code, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	if got := strings.Join(lines, ""); got != shown {
		t.Fatalf("README gin example differs from Example in example_test.go.\nREADME:\n%s\nExample:\n%s", shown, got)
	}
}

// between returns the part of s after the first from and before the next to.
func between(t *testing.T, s, from, to string) string {
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
