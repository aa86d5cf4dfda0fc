package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mongostore/mongostore/embeddb"
	"github.com/mongostore/mongostore/internal/connstr"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// The embedded database's address, when EMBEDDED_DB_ADDR is not set.
const (
	// defaultEmbeddedAddr is where the embedded database listens at the
	// first start with a data directory, if the port is free.
	defaultEmbeddedAddr = "127.0.0.1:27018"
	// embeddedAddrFileName is the file in DATA_DIR that keeps the address
	// the embedded database listened on, for the next starts.
	embeddedAddrFileName = "embedded-db.addr"
)

// database is the app's connection to its database, and the embedded
// server, if it started one.
type database struct {
	client *mongo.Client
	// server describes the server for people, without credentials.
	server string
	// embedded is the embedded server, or nil.
	embedded *embeddb.Server
}

// openDatabase connects to the database of MONGODB_URI or, when it is not
// set, starts the embedded server (see startEmbedded) and connects to it;
// then it checks that the server answers. The embedded server outlives
// ctx: it stops in close, once the HTTP server has finished its requests.
func openDatabase(ctx, startCtx context.Context, cfg config, logger *slog.Logger, stdout io.Writer) (_ *database, err error) {
	db := &database{server: describeServer(cfg.MongoURI)}
	uri := cfg.MongoURI
	if uri == "" {
		if db.embedded, db.server, err = startEmbedded(context.WithoutCancel(ctx), cfg, logger, stdout); err != nil {
			return nil, err
		}
		uri = db.embedded.URI()
	} else {
		logger.Info("using the database in MONGODB_URI", "server", db.server)
	}
	defer func() {
		if err != nil {
			err = joinErr(err, "", db.close(ctx))
		}
	}()
	opts := options.Client().ApplyURI(uri).SetAppName("mongostore-example").SetTimeout(dbTimeout)
	if err := opts.Validate(); err != nil { // the driver's reason may quote the password
		return nil, fmt.Errorf("MONGODB_URI: not a valid connection string: %s", connstr.MaskParseError(err.Error(), uri))
	}
	if db.client, err = mongo.Connect(opts, cfg.ClientOptions); err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := db.client.Ping(startCtx, readpref.Primary()); err != nil {
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return db, nil
}

// close disconnects from the database and stops the embedded server, if
// any, within closeTimeout each, even once ctx is cancelled.
func (db *database) close(ctx context.Context) error {
	var errs []error
	if db.client != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := db.client.Disconnect(dctx); err != nil {
			errs = append(errs, fmt.Errorf("disconnect from database: %w", err))
		}
	}
	if db.embedded != nil {
		if err := closeWithin(closeTimeout, db.embedded.Close); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("stop embedded database: %w", err))
		}
	}
	return errors.Join(errs...)
}

// startEmbedded starts the embedded server (FerretDB with SQLite) with its
// files in cfg.DataDir, at the address embeddedAddr chooses, and prints its
// URI with a mongosh command. It returns the server and its description.
func startEmbedded(ctx context.Context, cfg config, logger *slog.Logger, stdout io.Writer) (*embeddb.Server, string, error) {
	addr, save, err := embeddedAddr(cfg, defaultEmbeddedAddr, logger)
	if err != nil {
		return nil, "", err
	}
	srv, err := embeddb.Start(ctx, embeddb.Config{
		Dir:  cfg.DataDir,
		Addr: addr,
		// FerretDB is verbose (it logs failed commands as warnings): keep its errors only.
		Logger: slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: slog.LevelError})).With("component", "embeddb"),
	})
	if err != nil {
		return nil, "", fmt.Errorf("start embedded database: %w", err)
	}
	if err := save(); err != nil { // once it runs: not over the address of the server that has the directory
		logger.Warn("the embedded database's address is not saved: the next start may choose another", "error", err)
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		dir = cfg.DataDir
	}
	uri := srv.URI()
	logger.Info("started embedded database (FerretDB, SQLite)", "dir", dir, "uri", uri)
	fmt.Fprintf(stdout, "embedded database: %s (try: mongosh %s%s --eval 'db.%s.find()')\n",
		uri, strings.TrimSuffix(uri, "/")+"/", cfg.DBName, collectionName)
	return srv, "embedded FerretDB (SQLite) in " + dir, nil
}

// embeddedAddr returns the address for the embedded server, and what
// saves it once the server runs. With EMBEDDED_DB_ADDR set, it is that
// address, which must be free. Otherwise it is the address saved in the
// data directory by an earlier start, or def at the first start; if that
// port is taken, a free port of the same host, which the log announces.
// Either is saved for the next starts, so that the server keeps one
// address across restarts with the same data directory (and a mongosh
// command or a MONGODB_URI copied from the log keeps working).
func embeddedAddr(cfg config, def string, logger *slog.Logger) (addr string, save func() error, err error) {
	if cfg.EmbeddedAddr != "" {
		if err := checkFree(cfg.EmbeddedAddr); err != nil {
			return "", nil, listenError("embedded database", "EMBEDDED_DB_ADDR", cfg.EmbeddedAddr, err)
		}
		return cfg.EmbeddedAddr, func() error { return nil }, nil
	}
	file := filepath.Join(cfg.DataDir, embeddedAddrFileName)
	addr = savedAddr(file, def, logger)
	switch err := checkFree(addr); {
	case errors.Is(err, syscall.EADDRINUSE):
		free, err := freePort(addr)
		if err != nil {
			return "", nil, fmt.Errorf("embedded database: %s is in use, and no other port is free: %w", addr, err)
		}
		taken := addr
		addr = free
		return addr, func() error { // said once it runs: a second app on the directory gets no further
			logger.Warn(fmt.Sprintf("%s is in use: the embedded database listens on %s instead, and will at the next starts with this DATA_DIR (set EMBEDDED_DB_ADDR to choose the address)", taken, free),
				"taken", taken, "addr", free)
			return saveAddr(file, addr)
		}, nil
	case err != nil:
		return "", nil, listenError("embedded database", "EMBEDDED_DB_ADDR", addr, err)
	}
	return addr, func() error { return saveAddr(file, addr) }, nil
}

// savedAddr returns the address that file keeps, or def if there is no
// file. A file that holds no address is logged and def used: the next
// save replaces it.
func savedAddr(file, def string, logger *slog.Logger) string {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return def
	}
	addr := strings.TrimSpace(string(data))
	if err == nil {
		_, err = net.ResolveTCPAddr("tcp", addr)
	}
	if err != nil || addr == "" {
		logger.Warn("the embedded database's saved address is unreadable: using the default", "file", file, "default", def)
		return def
	}
	return addr
}

// saveAddr writes addr to file, unless the file holds it already.
func saveAddr(file, addr string) error {
	if data, err := os.ReadFile(file); err == nil && strings.TrimSpace(string(data)) == addr {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("save the embedded database's address: %w", err)
	}
	if err := os.WriteFile(file, []byte(addr+"\n"), 0o600); err != nil {
		return fmt.Errorf("save the embedded database's address: %w", err)
	}
	return nil
}

// checkFree reports whether a TCP listener can be bound to addr, by
// binding one and closing it.
func checkFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

// freePort returns the host of addr with a port the system picks as free.
func freePort(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
