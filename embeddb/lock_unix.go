//go:build unix

package embeddb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the lock of the data directory dir, so that no two servers
// share its files, and returns what releases it.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embeddb: data directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (stop that server first, or use another directory)", ErrDirInUse, dir)
		}
		return nil, fmt.Errorf("embeddb: data directory lock: %w", err)
	}
	return func() { f.Close() }, nil // closing the file releases its lock
}
