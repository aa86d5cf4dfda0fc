package ginstore_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeExample checks that the README's gin example is a whole program
// that holds the code of the runnable Example, and that it compiles, so the
// README never shows code that does not work.
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
	if !strings.Contains(shown, code) {
		t.Fatalf("README gin example does not contain the Example's code.\nREADME:\n%s\nExample:\n%s", shown, code)
	}
	if testing.Short() {
		return
	}
	// Build it as its own program, through an overlay: nothing is written to
	// the module's tree.
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(shown), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(root, "internal", "readmecheck", "main.go"): src,
	}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay="+overlayFile, "-o", os.DevNull, "./internal/readmecheck")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's gin program does not compile: %v\n%s", err, out)
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
