// Command loadbench answers one question about mongostore: how close is an
// HTTP request through the store to a request that sends the same database
// commands with the bare driver?
//
// It starts an http.Server on a loopback port, in process, with three
// handler variants, each in a read-write (rw) and a read-only (ro) mode:
//
//   - floor: the bare driver. It reads the cookie and finds the document by
//     _id (FindOne(ctx, {_id}).Raw()); in rw mode it also updates it with
//     FindOneAndUpdate({_id}, {$set: …}, ReturnDocument Before) and sets the
//     cookie again. Its documents and its $set are shaped like the store's:
//     the tool records, with a command monitor on a separate client, the
//     commands one store session sends (insert, find, findAndModify) and
//     copies the fields, types and sizes of the $set it sends; and it copies
//     the documents the store wrote (fields, types, binary sizes) for the
//     floor's own documents. So the floor stays right when the format
//     changes, and the tool warns when the store's commands no longer are
//     the floor's.
//   - store: store.Get, and in rw mode a change to a counter and
//     session.Save.
//   - middleware: store.Middleware(name, mongostore.MiddlewareOptions{})
//     around a handler that reads the session (ro) or changes the counter
//     (rw).
//
// -users concurrent clients, each with its own cookie jar and session per
// variant (created through the store, or inserted for the floor) loop
// requests over HTTP keep-alive. For each mode the variants run in
// interleaved rounds, the order rotated every round, because the machine is
// shared and noisy. The tool prints a line per round and, at the end, a
// markdown table: per mode and variant the requests, req/s, p50 and p99
// latency (client side, in milliseconds), and the ratio of the variant's
// req/s to the floor's in the same mode (the key number; goals: store at
// least 0.95, middleware at least 0.93), over all rounds, then the median
// and range of the rounds' own ratios (on a busy machine, trust the median
// of many short rounds: -rounds 9 -round 2s).
//
// Usage:
//
//	MONGODB_URI=mongodb://127.0.0.1:27017/ go run ./cmd/loadbench [flags]
//	MONGODB_URI=$(../shared/docdb/docdb.sh start | tail -1) go run ./cmd/loadbench
//	make bench-http BENCH_HTTP_FLAGS='-users 16 -rounds 5'
//
// make bench-http uses MONGODB_URI, or when it is empty the FerretDB v2 +
// DocumentDB server that ../shared/docdb/docdb.sh starts. The flags:
//
//	-uri         MongoDB URI (default $MONGODB_URI)
//	-users       concurrent users (default 8)
//	-rounds      interleaved rounds per mode (default 3)
//	-round       length of one variant's turn in a round (default 3s)
//	-warmup      unmeasured requests per variant before a mode's rounds (default 1s)
//	-modes       modes, comma-separated: rw, ro (default rw,ro)
//	-variants    variants, comma-separated: floor, store, middleware (default all three)
//	-encrypt     give the store a block key too (AES-encrypted cookies)
//	-db          database (default mongostore_loadbench)
//	-timeout     total time budget; the run stops when it is spent (default 5m)
//	-cpuprofile  write a CPU profile of the whole run to this file
//
// Find the store's hot spots in a profile with, for example:
//
//	go tool pprof -top -cum -show '^github.com/mongostore/mongostore\.' cpu.pprof
//
// The benchmark's collection (a fresh one per run, in -db) is dropped at the
// end. The exit status is 0 when every request succeeded, 1 when a request
// or the run failed (the table is printed all the same), 2 on bad flags or
// no server.
//
// The tool uses only mongostore's public API and the driver.
package main

import (
	"context"
	"encoding/gob"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Modes of the handlers.
const (
	modeRW = "rw" // the request changes the session
	modeRO = "ro" // the request only reads it
)

// Variants of the handlers.
const (
	variantFloor      = "floor"
	variantStore      = "store"
	variantMiddleware = "middleware"
)

var (
	allModes    = []string{modeRW, modeRO}
	allVariants = []string{variantFloor, variantStore, variantMiddleware}
)

// goals are the req/s ratios to the floor each variant should reach.
var goals = map[string]float64{variantStore: 0.95, variantMiddleware: 0.93}

// settings are the command's parsed flags.
type settings struct {
	uri        string
	users      int
	rounds     int
	round      time.Duration
	warmup     time.Duration
	modes      []string
	variants   []string
	encrypt    bool
	db         string
	timeout    time.Duration
	cpuProfile string
	collPrefix string // collection name prefix (tests use their own)
}

// errNoServer is parseFlags' answer when no URI is given.
var errNoServer = errors.New("no server: set MONGODB_URI or -uri")

// noServerHelp says how to get a server.
const noServerHelp = `loadbench: no server: set MONGODB_URI or -uri. For the shared FerretDB v2 + DocumentDB server:
	MONGODB_URI=$(../shared/docdb/docdb.sh start | tail -1) go run ./cmd/loadbench
(make bench-http does that by itself.)`

func main() {
	s, err := parseFlags(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errNoServer):
		fmt.Fprintln(os.Stderr, noServerHelp)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, s, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s settings
	var modes, variants string
	fs.StringVar(&s.uri, "uri", os.Getenv("MONGODB_URI"), "MongoDB URI (default $MONGODB_URI)")
	fs.IntVar(&s.users, "users", 8, "concurrent users")
	fs.IntVar(&s.rounds, "rounds", 3, "interleaved rounds per mode")
	fs.DurationVar(&s.round, "round", 3*time.Second, "length of one variant's turn in a round")
	fs.DurationVar(&s.warmup, "warmup", time.Second, "unmeasured requests per variant before a mode's rounds")
	fs.StringVar(&modes, "modes", strings.Join(allModes, ","), "modes, comma-separated: rw, ro")
	fs.StringVar(&variants, "variants", strings.Join(allVariants, ","), "variants, comma-separated: floor, store, middleware")
	fs.BoolVar(&s.encrypt, "encrypt", false, "give the store a block key too (AES-encrypted cookies)")
	fs.StringVar(&s.db, "db", "mongostore_loadbench", "database")
	fs.DurationVar(&s.timeout, "timeout", 5*time.Minute, "total time budget; the run stops when it is spent")
	fs.StringVar(&s.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var err error
	if s.modes, err = parseList("-modes", modes, allModes); err != nil {
		return s, err
	}
	if s.variants, err = parseList("-variants", variants, allVariants); err != nil {
		return s, err
	}
	switch {
	case s.uri == "":
		return s, errNoServer
	case s.users < 1 || s.users > 10_000:
		return s, errors.New("-users must be between 1 and 10000")
	case s.rounds < 1:
		return s, errors.New("-rounds must be at least 1")
	case s.round <= 0 || s.timeout <= 0:
		return s, errors.New("-round and -timeout must be positive")
	case s.warmup < 0:
		return s, errors.New("-warmup must not be negative")
	case s.db == "":
		return s, errors.New("-db must not be empty")
	}
	if planned := s.planned(); planned >= s.timeout {
		return s, fmt.Errorf("-timeout %v is spent before the rounds end (they take %v): raise it or shorten -round", s.timeout, planned)
	}
	return s, nil
}

// planned is how long the warm-ups and rounds take, without the set-up.
func (s settings) planned() time.Duration {
	perMode := time.Duration(len(s.variants)) * (s.warmup + time.Duration(s.rounds)*s.round)
	return time.Duration(len(s.modes)) * perMode
}

// parseList parses a comma-separated list of names out of known, keeping
// the order given and dropping repeats.
func parseList(flagName, list string, known []string) ([]string, error) {
	var names []string
	for f := range strings.SplitSeq(list, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if !slices.Contains(known, f) {
			return nil, fmt.Errorf("%s: %q is not one of %s", flagName, f, strings.Join(known, ", "))
		}
		if !slices.Contains(names, f) {
			names = append(names, f)
		}
	}
	return names, nil
}

// run sets up the store, the server and the users, measures every mode and
// prints the results to out. It returns an error if the run or a request
// failed.
func run(ctx context.Context, s settings, out io.Writer) (err error) {
	if s.cpuProfile != "" {
		stop, err := startCPUProfile(s.cpuProfile)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, fmt.Errorf("time budget (-timeout %v) spent", s.timeout))
	defer cancel()
	registerGob()

	b, err := setUp(ctx, s, out)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		return errors.Join(err, b.close(ctx))
	}
	results, measured := b.measure(ctx, out)
	fmt.Fprintln(out)
	writeTable(out, b.describe(), results)
	failed := measured
	for _, r := range results {
		if r.errors > 0 {
			failed = errors.Join(failed, fmt.Errorf("%s %s: %d of %d requests failed; first: %w", r.mode, r.variant, r.errors, r.requests(), r.first))
		}
	}
	return errors.Join(failed, b.close(ctx))
}

// startCPUProfile starts profiling the CPU into file and returns the
// function that stops it.
func startCPUProfile(file string) (func() error, error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("-cpuprofile: %w", err), f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// registerGob registers the types of the session values that gob does not
// know by default.
func registerGob() {
	gob.Register(time.Time{})
}
