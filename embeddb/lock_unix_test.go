//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package embeddb

import (
	"context"
	"errors"
	"testing"
)

// TestStartRefusesADirInUse: a second server on the data directory of a
// running one (another app instance, say) would share its SQLite files:
// Start refuses it, until the first has closed.
func TestStartRefusesADirInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := Start(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if second, err := Start(context.Background(), Config{Dir: dir}); !errors.Is(err, ErrDirInUse) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("a second server on the directory: %v, want ErrDirInUse", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Start(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	again.Close()
}
