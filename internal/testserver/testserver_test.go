package testserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestSweepRemovesTheDirectoriesOfExitedRuns: a run killed before its stop
// leaves its directory (the server's executable and data); the next Run
// removes it, and leaves those of runs still going and of runs just begun.
func TestSweepRemovesTheDirectoriesOfExitedRuns(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Skip("no true command:", err)
	}
	dirs := map[string]string{ // directory: its owner file's contents, "" for none
		"mongostore-testserver-exited":  strconv.Itoa(exited.Process.Pid),
		"mongostore-testserver-running": strconv.Itoa(os.Getpid()),
		"mongostore-testserver-begun":   "",
		"someone-elses-exited":          strconv.Itoa(exited.Process.Pid),
	}
	for dir, owner := range dirs {
		if err := os.MkdirAll(filepath.Join(tmp, dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(tmp, dir, ownerFile), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	sweep()
	for dir := range dirs {
		_, err := os.Stat(filepath.Join(tmp, dir))
		if gone, want := os.IsNotExist(err), dir == "mongostore-testserver-exited"; gone != want {
			t.Errorf("%s: removed %v, want %v (stat: %v)", dir, gone, want, err)
		}
	}
}
