package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// keyFileName is the file in DATA_DIR that keeps the session key when
// SESSION_KEY is not set.
const keyFileName = "session.key"

// loadOrCreateKey returns the session key kept in dir/session.key (hex, one
// line), creating dir and the file, with a new random key, if the file does
// not exist. So sessions survive restarts without any set-up. It reuses an
// existing file as is and refuses one that does not hold a valid key
// rather than replacing it. It logs which it did and where, never the key.
func loadOrCreateKey(logger *slog.Logger, dir string) ([]byte, error) {
	path, err := filepath.Abs(filepath.Join(dir, keyFileName))
	if err != nil {
		return nil, fmt.Errorf("session key file: %w", err)
	}
	key, err := readKeyFile(path)
	if err == nil {
		logger.Info("using the session key saved in "+path, "file", path)
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
			logger.Warn("the session key file is readable by others: chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("session key file: %w", err)
	}
	key = make([]byte, minKeyBytes)
	_, _ = rand.Read(key) // never fails (see crypto/rand.Read)
	switch err := writeKeyFile(path, key); {
	case errors.Is(err, fs.ErrExist):
		// Another instance sharing DATA_DIR created it first: use its key.
		key, err = readKeyFile(path)
		if err != nil {
			return nil, err
		}
		logger.Info("using the session key saved in "+path, "file", path)
		return key, nil
	case err != nil:
		return nil, err
	}
	logger.Info("SESSION_KEY is not set: generated a session key and saved it in "+path+"; later starts reuse it", "file", path)
	return key, nil
}

// readKeyFile reads a key written by writeKeyFile (or by hand: hex digits,
// surrounding white space allowed). A missing file gives an error wrapping
// fs.ErrNotExist.
func readKeyFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("session key file: %w", err)
	}
	key, err := hex.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil {
		return nil, fmt.Errorf("session key file %s: not hexadecimal (an even number of the digits 0-9 and a-f); delete it to have a new key made (sessions signed with the old one end)", path) // err would quote the key
	}
	if len(key) < minKeyBytes {
		return nil, fmt.Errorf("session key file %s: %d bytes, want at least %d; delete it to have a new key made (sessions signed with the old one end)",
			path, len(key), minKeyBytes)
	}
	return key, nil
}

// writeKeyFile creates path, readable by its owner only, and writes key to
// it in hex. It never overwrites a file: if path exists, the error wraps
// fs.ErrExist. A file it could not write completely is removed.
func writeKeyFile(path string, key []byte) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("session key file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("session key file: %w", cerr)
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		return fmt.Errorf("session key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("session key file: %w", err)
	}
	return nil
}
