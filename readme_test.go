package mongostore

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickStart checks that the README's quick start is the code of
// the runnable Example, so the README never shows code that does not compile
// or does not work.
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
	var lines []string
	for _, l := range strings.SplitAfter(code, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	if got := strings.Join(lines, ""); got != shown {
		t.Fatalf("README quick start differs from Example in example_test.go.\nREADME:\n%s\nExample:\n%s", shown, got)
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
