// Package embeddb runs an embedded MongoDB-compatible server (FerretDB v1
// with its SQLite backend) inside the current process.
//
// It exists so that mongostore's tests and its sample app need no database
// installation. It lives in its own module so that FerretDB and its
// dependencies never reach the go.mod of applications that import mongostore.
//
// FerretDB v1 speaks the MongoDB wire protocol but does not implement TTL
// indexes: createIndexes with expireAfterSeconds answers code 238
// (NotImplemented). Use mongostore's GC expiry mode with it.
package embeddb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// Config configures an embedded server.
type Config struct {
	// Dir is the directory that holds the SQLite files, one per database.
	// It is created if missing. Required; its path must not hold #, ? or %,
	// which FerretDB's SQLite URL cannot carry.
	Dir string

	// Addr is the TCP address to listen on. The default, "127.0.0.1:0",
	// picks a free loopback port.
	Addr string

	// Logger receives FerretDB's own logs. FerretDB is verbose, so the
	// default discards everything below slog.LevelError.
	Logger *slog.Logger
}

// ErrDirInUse is the error of Start when another server, in this process or
// another, has the data directory: two would corrupt its files. The lock
// is flock(2)'s, on Linux, macOS and the BSDs: on NFS it holds between
// processes only.
var ErrDirInUse = errors.New("embeddb: the data directory is in use by another embedded server")

// lockFileName is the file in the data directory that a server locks.
const lockFileName = "embeddb.lock"

// Server is a running embedded server.
type Server struct {
	uri    string
	cancel context.CancelFunc
	done   chan error
	closed sync.Once
	err    error // Run's, once closed
}

// Start starts a server and returns once it accepts connections.
// The server stops when ctx is cancelled or Close is called. A data
// directory another server has gives ErrDirInUse (on Unix systems).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	dir, err := dataDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embeddb: %w", err)
	}
	unlock, err := lockDir(dir, cfg.Logger)
	if err != nil {
		return nil, err
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: cfg.Addr},
		Logger:    cfg.Logger,
		Handler:   "sqlite",
		SQLiteURL: "file:" + dir + "/",
	})
	if err != nil {
		unlock()
		return nil, fmt.Errorf("embeddb: %w", err)
	}
	return serve(ctx, f, unlock)
}

// serve runs f until ctx is done or the server is closed, then unlocks its
// data directory; it returns once f listens.
func serve(ctx context.Context, f *ferretdb.FerretDB, unlock func()) (*Server, error) {
	runCtx, cancel := context.WithCancel(ctx)
	s := &Server{cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := f.Run(runCtx)
		unlock() // the files are released
		s.done <- err
	}()
	// ferretdb.New has bound the listener: MongoDBURI answers at once, and
	// Run returns only once runCtx is done (not yet: ctx was checked).
	uriCh := make(chan string, 1)
	go func() { uriCh <- f.MongoDBURI() }()
	select {
	case s.uri = <-uriCh:
		return s, nil
	case err := <-s.done:
		cancel()
		if err == nil {
			err = errors.New("server stopped before it listened")
		}
		return nil, fmt.Errorf("embeddb: %w", err)
	}
}

// dataDir returns dir, absolute, created if missing.
func dataDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("embeddb: Config.Dir is required")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("embeddb: data directory: %w", err)
	}
	if strings.ContainsAny(dir, "#?%") { // FerretDB's SQLite URL would cut or unescape them
		return "", fmt.Errorf("embeddb: data directory %q: FerretDB cannot use a path holding #, ? or %%", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("embeddb: data directory: %w", err)
	}
	return dir, nil
}

// URI returns the MongoDB connection string of the server,
// for example "mongodb://127.0.0.1:40123/".
func (s *Server) URI() string { return s.uri }

// Close stops the server and waits until it has released its files; a
// second Close returns what the first did.
func (s *Server) Close() error {
	s.closed.Do(func() {
		s.cancel()
		s.err = <-s.done
	})
	return s.err
}
