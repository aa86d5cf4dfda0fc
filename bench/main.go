// Command bench measures mongostore against the bare driver sending the
// same commands, in interleaved rounds (the machine is shared and noisy):
//
//	bench scale [flags]    # make scale: loads, expiry and per-user listings at 10k to 1M sessions (scale.go)
//	bench http [flags]     # make bench-http: req/s through HTTP handlers, beside laziness-coders/mongostore (http.go)
//	bench conc [flags]     # make bench-conc: lost updates of one client's overlapping requests (conc.go)
//	bench rekey [flags]    # Store.Rekey's throughput over -n stored sessions (rekey.go)
//	bench filters [flags]  # what each condition of a save's filter costs the server (filters.go)
//	bench table            # the Go benchmarks' output (stdin) as the store-against-driver table (table.go)
//
// on $MONGODB_URI, -uri, or else an embedded FerretDB v1 server in process.
// Exit status 1: the run failed; 2: bad usage. Every call to mongostore is
// in internal/lib/store.go; make bench runs the Go benchmarks of bench_test.go.
package main

import (
	"context"
	"encoding/gob"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gorilla/sessions"

	"github.com/mongostore/mongostore/bench/internal/db"
)

// errUsage marks errors in the command line.
var errUsage = errors.New("usage")

// common are the flags of every subcommand, and their logger.
type common struct {
	uri, db string
	timeout time.Duration
	logger  *slog.Logger
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(map[bool]int{false: 1, true: 2}[errors.Is(err, errUsage)])
	}
}

// run runs the subcommand of args, printing to out (flag errors to stderr). A
// subcommand registers its flags, returns their check ("" if right) and run.
func run(ctx context.Context, args []string, out, stderr io.Writer) (err error) {
	if len(args) > 0 && args[0] == "table" {
		return table(os.Stdin, out)
	}
	cmds := map[string]func(*flag.FlagSet, *common) (func() string, func(context.Context, io.Writer) error){"scale": scale, "http": httpBench, "conc": conc, "rekey": rekeyBench, "filters": filtersBench}
	if len(args) == 0 || cmds[args[0]] == nil {
		return fmt.Errorf("%w: bench scale|http|conc|rekey|filters [flags]", errUsage)
	}
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &common{logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	fs.StringVar(&c.uri, "uri", os.Getenv("MONGODB_URI"), "MongoDB URI (default $MONGODB_URI)")
	fs.StringVar(&c.db, "db", "mongostore_"+args[0], "database")
	fs.DurationVar(&c.timeout, "timeout", map[string]time.Duration{"scale": 20 * time.Minute, "http": 5 * time.Minute, "conc": 5 * time.Minute, "rekey": 30 * time.Minute, "filters": 10 * time.Minute}[args[0]],
		"total time budget; the run stops when it is spent")
	check, do := cmds[args[0]](fs, c)
	err = fs.Parse(args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := check()
	switch {
	case err != nil:
		msg = err.Error()
	case fs.NArg() > 0:
		msg = fmt.Sprintf("unexpected arguments: %q", fs.Args())
	case c.db == "" || c.timeout <= 0:
		msg = "-db must not be empty, -timeout must be positive"
	}
	if msg != "" {
		return fmt.Errorf("%w: %s", errUsage, msg)
	}
	gob.Register(time.Time{}) // loginAt, for gob codecs
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, fmt.Errorf("time budget (-timeout %v) spent", c.timeout))
	defer cancel()
	if c.uri == "" {
		fmt.Fprintln(out, "no MONGODB_URI: running the embedded FerretDB v1 server in process")
		uri, stop, serr := db.StartEmbedded(ctx)
		if serr != nil {
			return fmt.Errorf("embedded server: %w", serr)
		}
		defer func() { err = errors.Join(err, stop()) }()
		c.uri = uri
	}
	return do(ctx, out)
}

// fill gives a session the values of user i, as a login would.
func fill(session *sessions.Session, i int) {
	session.Values["uid"] = 100_000 + i
	session.Values["name"] = []string{"Alice Martin", "Bob Okafor", "Chloé Nguyen", "Dmitri Schmidt"}[i%4]
	session.Values["roles"] = []string{"member", "editor"}
	session.Values["loginAt"] = time.Now().UTC().Truncate(time.Second)
	session.Values["counter"] = 0
	session.AddFlash("Welcome back!")
}
