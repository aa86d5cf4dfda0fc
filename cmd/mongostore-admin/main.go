// Command mongostore-admin looks after a mongostore sessions collection:
// how many sessions it holds, how far behind their deletion is, what the
// server supports, and a user's sessions, which it lists or ends.
//
//	mongostore-admin stats                 counts, expiry lag, indexes, document sizes
//	mongostore-admin sessions -owner alice a user's live sessions (needs SESSION_KEY)
//	mongostore-admin end -owner alice      end all of a user's sessions (needs SESSION_KEY)
//	mongostore-admin check                 what the server supports, what the store does there
//	mongostore-admin -version              the module version it was built from
//
// It is configured like the sample app, from the environment:
//
//	MONGODB_URI         the server's connection string (required)
//	DB_NAME             the database (default mongostore_example); flag -db
//	SESSION_COLLECTION  the collection (default sessions); flag -collection
//	SESSION_KEY         the application's hash key, in hex, at least 32 bytes
//	                    (sessions and end); after a key rotation, the older
//	                    keys after it, comma-separated
//	SESSION_BLOCK_KEY   the application's block key, in hex, if it encrypts
//	                    session values (one per SESSION_KEY key, comma-separated)
//
// Exit codes: 0 done, 1 failure (the server, a command, or a problem check
// found), 2 usage (flags, arguments, configuration).
//
// Install it with
//
//	go install github.com/mongostore/mongostore/cmd/mongostore-admin@latest
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// Defaults, as the sample app has them.
const (
	defaultDBName     = "mongostore_example"
	defaultCollection = "sessions"
	minKeyBytes       = 32
	defaultTimeout    = time.Minute
	// selectTimeout bounds the wait for a reachable server, unless the URI
	// sets serverSelectionTimeoutMS: an unreachable server is an error
	// within seconds, not after the driver's 30.
	selectTimeout = 5 * time.Second
	// progressAfter is how long a step runs before progress is shown.
	progressAfter = 2 * time.Second
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns
// the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return (&app{getenv: os.Getenv, stdout: stdout, stderr: stderr, progressAfter: progressAfter}).run(ctx, args)
}

// app is one run of the command.
type app struct {
	getenv         func(string) string
	stdout, stderr io.Writer
	progressAfter  time.Duration // how long a step runs before it shows progress
}

// command is a subcommand.
type command struct {
	name, summary string
	usage         string // after the command's name
	help          string // what it does, printed by -h
	keys          bool   // needs SESSION_KEY
	// flags defines the command's own flags on fs and returns its body.
	flags func(fs *flag.FlagSet) body
}

// body is what a command does once its flags are parsed: validate checks
// them (nil: nothing to check) before anything connects, run runs.
type body struct {
	validate func() error
	run      func(ctx context.Context, a *app, c *conn) error
}

var commands = []command{statsCommand, sessionsCommand, endCommand, checkCommand}

// usageError is a mistake in the command line or the configuration: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// problemError is a finding that makes the run fail (exit 1) after its
// report is printed: the report says what is wrong.
type problemError struct{ msg string }

func (e problemError) Error() string { return e.msg }

func (a *app) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		a.usage(a.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-version", "--version":
		info, _ := debug.ReadBuildInfo()
		fmt.Fprintln(a.stdout, "mongostore-admin", moduleVersion(info))
		return exitOK
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return a.run(ctx, []string{args[1], "-h"})
		}
		a.usage(a.stdout)
		return exitOK
	}
	for _, cmd := range commands {
		if cmd.name == args[0] {
			return a.runCommand(ctx, cmd, args[1:])
		}
	}
	fmt.Fprintf(a.stderr, "mongostore-admin: unknown command %q\n\n", args[0])
	a.usage(a.stderr)
	return exitUsage
}

// moduleVersion returns the version of the module the command was built
// from, as info (nil if the binary has none) says: "v1.4.0" after go
// install …@v1.4.0, "(devel)" for a build in a working tree.
func moduleVersion(info *debug.BuildInfo) string {
	if info == nil || info.Main.Version == "" {
		return "(devel)"
	}
	return info.Main.Version
}

// usage prints the command's overview.
func (a *app) usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: mongostore-admin <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Looks after a mongostore sessions collection. Commands:")
	fmt.Fprintln(w)
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, envHelp)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'mongostore-admin <command> -h' for a command's flags, 'mongostore-admin -version' for its version.")
	fmt.Fprintln(w, "Exit codes: 0 done, 1 failure, 2 usage.")
}

const envHelp = `Environment:
  MONGODB_URI         the server's connection string (required)
  DB_NAME             the database (default ` + defaultDBName + `; flag -db)
  SESSION_COLLECTION  the collection (default ` + defaultCollection + `; flag -collection)
  SESSION_KEY         the application's hash key in hex, at least 32 bytes (sessions, end);
                      after a key rotation, the older keys after it, comma-separated
  SESSION_BLOCK_KEY   the application's block key in hex, if it encrypts session values
                      (one per SESSION_KEY key, comma-separated)
`

// runCommand parses cmd's flags and runs it.
func (a *app) runCommand(ctx context.Context, cmd command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var common commonFlags
	fs.StringVar(&common.db, "db", "", "the database (default $DB_NAME, or "+defaultDBName+")")
	fs.StringVar(&common.collection, "collection", "", "the sessions collection (default $SESSION_COLLECTION, or "+defaultCollection+")")
	fs.DurationVar(&common.timeout, "timeout", defaultTimeout, "bound on the whole command")
	b := cmd.flags(fs)
	printUsage := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprintf(w, "Usage: mongostore-admin %s %s\n\n%s\n\nFlags:\n", cmd.name, cmd.usage, strings.TrimSpace(cmd.help))
		fs.PrintDefaults()
		fmt.Fprintln(w)
		fmt.Fprint(w, envHelp)
		fs.SetOutput(io.Discard)
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(a.stdout)
		return exitOK
	case err != nil:
		fmt.Fprintf(a.stderr, "mongostore-admin %s: %v\n\n", cmd.name, err)
		printUsage(a.stderr)
		return exitUsage
	case fs.NArg() > 0:
		fmt.Fprintf(a.stderr, "mongostore-admin %s: unexpected argument %q\n\n", cmd.name, fs.Arg(0))
		printUsage(a.stderr)
		return exitUsage
	}

	err = a.start(ctx, cmd, common, b)
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(a.stderr, "mongostore-admin %s: %v\n", cmd.name, err)
		fmt.Fprintf(a.stderr, "Run 'mongostore-admin %s -h' for help.\n", cmd.name)
		return exitUsage
	default:
		fmt.Fprintf(a.stderr, "mongostore-admin %s: %v\n", cmd.name, err)
		return exitFailure
	}
}

// commonFlags are the flags every command has.
type commonFlags struct {
	db, collection string
	timeout        time.Duration
}

// conn is what a command works on.
type conn struct {
	client   *mongo.Client
	coll     *mongo.Collection
	opts     *options.ClientOptions // as the URI sets them
	server   string                 // the URI's hosts, without credentials
	keyPairs [][]byte               // for NewStore; nil unless the command needs keys
}

// name returns the collection's full name, db.collection.
func (c *conn) name() string { return c.coll.Database().Name() + "." + c.coll.Name() }

// start reads the configuration, connects, and runs the command body.
func (a *app) start(ctx context.Context, cmd command, common commonFlags, b body) (err error) {
	if b.validate != nil {
		if err := b.validate(); err != nil {
			return err
		}
	}
	uri := a.getenv("MONGODB_URI")
	if uri == "" {
		return usagef("MONGODB_URI is not set: give the connection string of the server that holds the sessions, e.g. MONGODB_URI=mongodb://localhost:27017/")
	}
	if common.timeout <= 0 {
		return usagef("-timeout %v: must be positive", common.timeout)
	}
	dbName := cmpOr(common.db, a.getenv("DB_NAME"), defaultDBName)
	collName := cmpOr(common.collection, a.getenv("SESSION_COLLECTION"), defaultCollection)
	var keys [][]byte
	if cmd.keys {
		if keys, err = parseKeys(a.getenv("SESSION_KEY"), a.getenv("SESSION_BLOCK_KEY")); err != nil {
			return err
		}
	}

	opts := options.Client().SetServerSelectionTimeout(selectTimeout).ApplyURI(uri)
	if err := opts.Validate(); err != nil {
		return usagef("MONGODB_URI: not a valid connection string: %s", maskParseError(err.Error(), uri))
	}
	uriOpts := options.Client().ApplyURI(uri) // what the URI alone sets, for check
	if opts.AppName == nil {
		opts.SetAppName("mongostore-admin")
	}
	// Read what the store reads: it reads from the primary, whatever the
	// URI's read preference.
	opts.SetReadPreference(readpref.Primary())
	server := describeServer(uri)

	ctx, cancel := context.WithTimeout(ctx, common.timeout)
	defer cancel()
	client, err := mongo.Connect(opts)
	if err != nil {
		return fmt.Errorf("connect to %s: %s", server, redact(err.Error(), uri))
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer dcancel()
		_ = client.Disconnect(dctx)
	}()
	if err := client.Ping(ctx, readpref.Primary()); err != nil {
		return fmt.Errorf("cannot reach %s (the server in MONGODB_URI): %s", server, redact(err.Error(), uri))
	}
	c := &conn{client: client, coll: client.Database(dbName).Collection(collName), opts: uriOpts, server: server, keyPairs: keys}
	if err := b.run(ctx, a, c); err != nil {
		if ctx.Err() != nil && !errors.As(err, new(problemError)) {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s (the -timeout of %v ran out)", redact(err.Error(), uri), common.timeout)
			}
			return fmt.Errorf("interrupted: %s", redact(err.Error(), uri))
		}
		return errors.New(redact(err.Error(), uri))
	}
	return nil
}

// cmpOr returns the first of values that is not empty.
func cmpOr(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// parseKeys reads SESSION_KEY and SESSION_BLOCK_KEY into NewStore's key
// pairs. SESSION_KEY is what the sample app takes (hex, at least 32 bytes),
// or several such keys, comma-separated, the current one first.
func parseKeys(hashKeys, blockKeys string) ([][]byte, error) {
	if strings.TrimSpace(hashKeys) == "" {
		return nil, usagef("SESSION_KEY is not set: this command needs the application's session key " +
			"(hex, as the sample app takes it; the sample app keeps a generated one in DATA_DIR/session.key: " +
			"SESSION_KEY=$(cat .data/session.key))")
	}
	hashes := strings.Split(hashKeys, ",")
	var blocks []string
	if strings.TrimSpace(blockKeys) != "" {
		blocks = strings.Split(blockKeys, ",")
		if len(blocks) > len(hashes) {
			return nil, usagef("SESSION_BLOCK_KEY: %d keys for %d in SESSION_KEY", len(blocks), len(hashes))
		}
	}
	var pairs [][]byte
	for i, h := range hashes {
		name := "SESSION_KEY"
		if len(hashes) > 1 {
			name = fmt.Sprintf("SESSION_KEY (key %d)", i+1)
		}
		key, err := hex.DecodeString(strings.TrimSpace(h))
		if err != nil {
			return nil, usagef("%s: not hexadecimal: %v", name, err)
		}
		if len(key) < minKeyBytes {
			return nil, usagef("%s: %d bytes, want at least %d (%d hex digits)", name, len(key), minKeyBytes, 2*minKeyBytes)
		}
		var block []byte
		if i < len(blocks) && strings.TrimSpace(blocks[i]) != "" {
			name := strings.Replace(name, "SESSION_KEY", "SESSION_BLOCK_KEY", 1)
			block, err = hex.DecodeString(strings.TrimSpace(blocks[i]))
			if err != nil {
				return nil, usagef("%s: not hexadecimal: %v", name, err)
			}
			if n := len(block); n != 16 && n != 24 && n != 32 {
				return nil, usagef("%s: %d bytes, want 16, 24 or 32", name, n)
			}
		}
		pairs = append(pairs, key, block)
	}
	return pairs, nil
}

// report writes lines of a label, in a column of width, and a value.
type report struct {
	w     io.Writer
	width int
}

func (r report) line(label, format string, args ...any) {
	fmt.Fprintf(r.w, "%-*s %s\n", r.width, label, fmt.Sprintf(format, args...))
}

// more writes a line with no label.
func (r report) more(format string, args ...any) { r.line("", format, args...) }

// requireCollection returns an error unless c's collection exists; the
// error names the database's collections.
func (c *conn) requireCollection(ctx context.Context) error {
	db := c.coll.Database()
	names, err := db.ListCollectionNames(ctx, bson.D{{Key: "name", Value: c.coll.Name()}})
	if err != nil {
		return fmt.Errorf("list collections of %s: %w", db.Name(), err)
	}
	if len(names) > 0 {
		return nil
	}
	all, err := db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return fmt.Errorf("list collections of %s: %w", db.Name(), err)
	}
	have := "it has no collections"
	slices.Sort(all)
	if len(all) > 0 {
		if len(all) > 10 {
			all = append(all[:10], "…")
		}
		have = "it has " + strings.Join(all, ", ")
	}
	return fmt.Errorf("collection %s does not exist on %s (%s): check DB_NAME or -db, and SESSION_COLLECTION or -collection",
		c.name(), c.server, have)
}
