//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package embeddb

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the lock of the data directory dir, so that no two servers
// share its files, and returns what releases it. A file system that has no
// such locks (some network or FUSE mounts) is logged, and not locked.
func lockDir(dir string, logger *slog.Logger) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embeddb: data directory lock: %w", err)
	}
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case err == nil:
		return func() { f.Close() }, nil // closing the file releases its lock
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, fmt.Errorf("%w: %s (stop that server first, or use another directory)", ErrDirInUse, dir)
	default:
		f.Close()
		logger.Warn("embeddb: the data directory cannot be locked: a second server on it would not be refused", "dir", dir, "error", err)
		return func() {}, nil
	}
}
