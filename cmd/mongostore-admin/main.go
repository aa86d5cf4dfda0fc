// Command mongostore-admin looks after a mongostore sessions collection:
// its counts, expiry lag and indexes (stats), a user's sessions, which it
// lists (sessions) or ends (end), re-sealing every session under a new key
// (rekey), and what the server supports and the store does there (check).
// It reads the sample app's settings from the environment (MONGODB_URI,
// DB_NAME, SESSION_COLLECTION, SESSION_KEY, SESSION_BLOCK_KEY); see -h and
// docs/operator.md. Exit codes: 0 done, 1 failure, 2 usage. Install it with
//
//	go install github.com/mongostore/mongostore/cmd/mongostore-admin@latest
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mongostore/mongostore/internal/connstr"
	"github.com/mongostore/mongostore/internal/keyenv"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// Defaults (the sample app's), and exit codes.
const (
	defaultDBName     = "mongostore_example"
	defaultCollection = "sessions"
	defaultTimeout    = time.Minute
	selectTimeout     = 5 * time.Second // for a reachable server, unless the URI sets serverSelectionTimeoutMS (the driver's: 30 s)
	progressAfter     = 2 * time.Second // before a step shows its progress

	exitOK, exitFailure, exitUsage = 0, 1, 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // a second Ctrl-C kills, as by default
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args (no program name); it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return (&app{getenv: os.Getenv, stdout: stdout, stderr: stderr, progressAfter: progressAfter}).run(ctx, args)
}

// app is one run of the command.
type app struct {
	getenv         func(string) string
	stdout, stderr io.Writer
	progressAfter  time.Duration // how long a step runs before it shows progress
}

// command is a subcommand: usage follows its name, help says what it does,
// keys that it needs SESSION_KEY; flags defines its flags and returns its body.
type command struct {
	name, summary, usage, help string
	keys                       bool
	flags                      func(fs *flag.FlagSet) body
}

// body runs a command (run) once validate, if any, has checked its flags.
type body struct {
	validate func() error
	run      func(ctx context.Context, a *app, c *conn) error
}

var commands = []command{statsCommand, sessionsCommand, endCommand, rekeyCommand, checkCommand}

// usageError is a mistake in the command line or the configuration (exit
// 2); problemError a finding that fails the run (exit 1) after its report.
type (
	usageError   struct{ error }
	problemError struct{ error }
)

func usagef(format string, args ...any) error   { return usageError{fmt.Errorf(format, args...)} }
func problemf(format string, args ...any) error { return problemError{fmt.Errorf(format, args...)} }

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
	if i := slices.IndexFunc(commands, func(cmd command) bool { return cmd.name == args[0] }); i >= 0 {
		return a.runCommand(ctx, commands[i], args[1:])
	}
	fmt.Fprintf(a.stderr, "mongostore-admin: unknown command %q\n\n", args[0])
	a.usage(a.stderr)
	return exitUsage
}

// moduleVersion returns info's module version: "v1.4.0" after go install …@v1.4.0, else "(devel)".
func moduleVersion(info *debug.BuildInfo) string {
	if info == nil || info.Main.Version == "" {
		return "(devel)"
	}
	return info.Main.Version
}

// usage prints the command's overview.
func (a *app) usage(w io.Writer) {
	fmt.Fprint(w, "Usage: mongostore-admin <command> [flags]\n\nLooks after a mongostore sessions collection. Commands:\n\n")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, "\n"+envHelp+"\nRun 'mongostore-admin <command> -h' for a command's flags, 'mongostore-admin -version' for its version.\n"+
		"Exit codes: 0 done, 1 failure, 2 usage.\n")
}

const envHelp = `Environment:
  MONGODB_URI         the server's connection string (required)
  DB_NAME             the database (default ` + defaultDBName + `; flag -db)
  SESSION_COLLECTION  the collection (default ` + defaultCollection + `; flag -collection)
  SESSION_KEY         the application's hash key in hex, at least 32 bytes (sessions, end, rekey,
                      stats); after a key rotation, the older keys after it, comma-separated
  SESSION_BLOCK_KEY   the application's block key in hex, if it encrypts session values
                      (one per SESSION_KEY key, comma-separated)
`

// runCommand parses cmd's flags and runs it.
func (a *app) runCommand(ctx context.Context, cmd command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &conn{}
	fs.StringVar(&c.db, "db", "", "the database (default $DB_NAME, or "+defaultDBName+")")
	fs.StringVar(&c.collection, "collection", "", "the sessions collection (default $SESSION_COLLECTION, or "+defaultCollection+")")
	fs.DurationVar(&c.timeout, "timeout", defaultTimeout, "bound on the whole command")
	b := cmd.flags(fs)
	err := fs.Parse(args)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		cmd.printUsage(a.stdout, fs)
		return exitOK
	case err != nil:
		fmt.Fprintf(a.stderr, "mongostore-admin %s: %v\n\n", cmd.name, err)
		cmd.printUsage(a.stderr, fs)
		return exitUsage
	}
	if err = a.start(ctx, cmd, c, b); err == nil {
		return exitOK
	}
	fmt.Fprintf(a.stderr, "mongostore-admin %s: %v\n", cmd.name, err)
	if errors.As(err, new(usageError)) {
		fmt.Fprintf(a.stderr, "Run 'mongostore-admin %s -h' for help.\n", cmd.name)
		return exitUsage
	}
	return exitFailure
}

// printUsage prints the command's help, with its flags fs.
func (cmd command) printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: mongostore-admin %s %s\n\n%s\n\nFlags:\n", cmd.name, cmd.usage, strings.TrimSpace(cmd.help))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprint(w, "\n"+envHelp)
}

// conn is what a command works on: the flags every command has, the collection, the URI, its
// options as the URI alone sets them, its hosts (no credentials), and the key pairs (or nil).
type conn struct {
	db, collection string
	timeout        time.Duration
	client         *mongo.Client
	coll           *mongo.Collection
	uri, server    string
	opts           *options.ClientOptions
	keyPairs       [][]byte
}

// name returns the collection's full name, db.collection.
func (c *conn) name() string { return c.coll.Database().Name() + "." + c.coll.Name() }

// start checks the configuration (c's flags, then the environment), connects, and runs b.
func (a *app) start(ctx context.Context, cmd command, c *conn, b body) (err error) {
	if c.uri = a.getenv("MONGODB_URI"); b.validate != nil {
		err = b.validate()
	}
	switch {
	case err != nil:
		return err
	case c.uri == "":
		return usagef("MONGODB_URI is not set: give the connection string of the server that holds the sessions, e.g. MONGODB_URI=mongodb://localhost:27017/")
	case c.timeout <= 0:
		return usagef("-timeout %v: must be positive", c.timeout)
	}
	if cmd.keys {
		if c.keyPairs, err = parseKeys(a.getenv("SESSION_KEY"), a.getenv("SESSION_BLOCK_KEY")); err != nil {
			return err
		}
	}
	if err := c.parseURI(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	disconnect, err := c.connect(ctx, cmp.Or(c.db, a.getenv("DB_NAME"), defaultDBName),
		cmp.Or(c.collection, a.getenv("SESSION_COLLECTION"), defaultCollection))
	if err == nil {
		defer disconnect()
		err = b.run(ctx, a, c)
	}
	switch {
	case err == nil, errors.As(err, new(usageError)): // stats reads SESSION_KEY late, only if set
		return err
	case ctx.Err() == nil || errors.As(err, new(problemError)):
		return errors.New(connstr.Redact(err.Error(), c.uri))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s (the -timeout of %v ran out)", connstr.Redact(err.Error(), c.uri), c.timeout)
	}
	return fmt.Errorf("interrupted: %s", connstr.Redact(err.Error(), c.uri))
}

// parseURI reads c.uri: what it alone sets (for check), and the server it names.
func (c *conn) parseURI() error {
	c.opts = options.Client().ApplyURI(c.uri)
	c.server = cmp.Or(connstr.Describe(c.uri), "the server in MONGODB_URI")
	err := c.opts.Validate()
	if dns := new(net.DNSError); errors.As(err, &dns) { // mongodb+srv: the servers' lookup failed, not the URI
		return fmt.Errorf("cannot look up the servers of %s (the server in MONGODB_URI): %v; check the host name and this machine's DNS", c.server, dns.Err)
	}
	if err != nil {
		return usagef("MONGODB_URI: not a valid connection string: %s", connstr.MaskParseError(err.Error(), c.uri))
	}
	return nil
}

// connect connects as the URI says, but reading from the primary as the store does, to db.coll.
func (c *conn) connect(ctx context.Context, db, coll string) (disconnect func(), err error) {
	opts := options.Client().SetAppName("mongostore-admin").SetServerSelectionTimeout(selectTimeout).ApplyURI(c.uri).SetReadPreference(readpref.Primary())
	if c.client, err = mongo.Connect(opts); err != nil {
		return nil, fmt.Errorf("connect to %s: %s", c.server, connstr.Redact(err.Error(), c.uri))
	}
	disconnect = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = c.client.Disconnect(ctx)
	}
	if err := c.client.Ping(ctx, readpref.Primary()); err != nil {
		disconnect()
		wait := selectTimeout
		if ctx.Err() != nil { // start adds whether -timeout ran out or the command was interrupted
			wait = c.timeout
		}
		return nil, fmt.Errorf("cannot reach %s (the server in MONGODB_URI): %s; check that it runs there and that this "+
			"machine can reach it (host, port, firewall, TLS, credentials)", c.server, connstr.Unreachable(err, wait))
	}
	c.coll = c.client.Database(db).Collection(coll)
	return disconnect, nil
}

// parseKeys reads SESSION_KEY (the sample app's: hex, at least 32 bytes; or
// several, comma-separated, the current first) and SESSION_BLOCK_KEY.
func parseKeys(hashKeys, blockKeys string) ([][]byte, error) {
	if strings.TrimSpace(hashKeys) == "" {
		return nil, usagef("SESSION_KEY is not set: this command needs the application's session key " +
			"(hex, as the sample app takes it; the sample app keeps a generated one in DATA_DIR/session.key: " +
			"SESSION_KEY=$(cat .data/session.key))")
	}
	pairs, err := keyenv.Pairs(hashKeys, blockKeys)
	if err != nil {
		return nil, usageError{err}
	}
	return pairs, nil
}

// report writes lines of a label, in a column of width, and a value (more: no label).
type report struct {
	w     io.Writer
	width int
}

func (r report) line(label, format string, args ...any) {
	fmt.Fprintf(r.w, "%-*s %s\n", r.width, label, fmt.Sprintf(format, args...))
}
func (r report) more(format string, args ...any) { r.line("", format, args...) }

// requireCollection fails unless c's collection exists, naming the database's collections.
func (c *conn) requireCollection(ctx context.Context) error {
	db := c.coll.Database()
	all, err := db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return fmt.Errorf("list collections of %s: %w", db.Name(), err)
	}
	if slices.Contains(all, c.coll.Name()) {
		return nil
	}
	if slices.Sort(all); len(all) > 10 {
		all = append(all[:10], "…")
	}
	return fmt.Errorf("collection %s does not exist on %s (it has %s): check DB_NAME or -db, and SESSION_COLLECTION or -collection",
		c.name(), c.server, cmp.Or(strings.Join(all, ", "), "no collections"))
}
