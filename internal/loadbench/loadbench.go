// Package loadbench is the HTTP load benchmark of cmd/loadbench (whose
// documentation says what it measures and how): the store and its
// middleware against the bare driver, and against other session stores
// (Peer) that a module of its own, cmd/loadbench/peers, plugs in, so that
// this module's go.mod does not need their drivers.
package loadbench

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

	"github.com/gorilla/sessions"
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
	allModes        = []string{modeRW, modeRO}
	builtinVariants = []string{variantFloor, variantStore, variantMiddleware}
)

// goals are the req/s ratios to the floor each variant should reach.
var goals = map[string]float64{variantStore: 0.95, variantMiddleware: 0.93}

// Peer is another session store, measured as one more variant beside the
// built-in ones, in the same rounds, through the same handlers as the
// store's Get + Save variant (see getSave), against the same server.
type Peer struct {
	// Name is the variant's name in -variants, the URLs and the table.
	Name string
	// About says what the peer is (module, version, driver), for the
	// output.
	About string
	// StoreGoal, when positive, is the ratio of the store's req/s to the
	// peer's that the store should reach.
	StoreGoal float64
	// Open returns the peer's store, on a client of its own, with its
	// sessions in the collection cfg names (which the benchmark drops at
	// the end), and the function that releases it.
	Open func(ctx context.Context, cfg PeerConfig) (sessions.Store, func(context.Context) error, error)
}

// PeerConfig is what a peer's store is opened with: the store's server,
// database, keys and lifetime, and a collection of its own.
type PeerConfig struct {
	URI        string
	DB         string
	Collection string
	Keys       [][]byte  // hash key, and block key with -encrypt: the store's
	MaxAge     int       // the store's cookie MaxAge, in seconds
	Out        io.Writer // for notes on how the peer was opened
}

// settings are the command's parsed flags.
type settings struct {
	uri        string
	users      int
	rounds     int
	round      time.Duration
	warmup     time.Duration
	modes      []string
	variants   []string
	peers      []Peer // those of variants
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

// Main is the command: it measures the built-in variants and the peers
// with the flags of os.Args, and exits.
func Main(peers ...Peer) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr, peers...)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errNoServer):
		fmt.Fprintln(os.Stderr, noServerHelp)
		os.Exit(2)
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

// errUsage marks errors in the flags.
var errUsage = errors.New("usage")

// Run parses args, measures and prints the results to out (flag errors to
// stderr). It returns an error wrapping flag.ErrHelp, errNoServer or
// errUsage if the flags are wrong, or if the run or a request failed.
func Run(ctx context.Context, args []string, out, stderr io.Writer, peers ...Peer) error {
	s, err := parseFlags(args, stderr, peers)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) || errors.Is(err, errNoServer) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return run(ctx, s, out)
}

func parseFlags(args []string, stderr io.Writer, peers []Peer) (settings, error) {
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s settings
	var modes, variants string
	known := slices.Clone(builtinVariants)
	for _, p := range peers {
		if p.Name == "" || slices.Contains(known, p.Name) || p.Open == nil {
			return s, fmt.Errorf("peer %q: no name, a name taken, or no Open", p.Name)
		}
		known = append(known, p.Name)
	}
	fs.StringVar(&s.uri, "uri", os.Getenv("MONGODB_URI"), "MongoDB URI (default $MONGODB_URI)")
	fs.IntVar(&s.users, "users", 8, "concurrent users")
	fs.IntVar(&s.rounds, "rounds", 3, "interleaved rounds per mode")
	fs.DurationVar(&s.round, "round", 3*time.Second, "length of one variant's turn in a round")
	fs.DurationVar(&s.warmup, "warmup", time.Second, "unmeasured requests per variant before a mode's rounds")
	fs.StringVar(&modes, "modes", strings.Join(allModes, ","), "modes, comma-separated: rw, ro")
	fs.StringVar(&variants, "variants", strings.Join(known, ","), "variants, comma-separated: "+strings.Join(known, ", "))
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
	if s.variants, err = parseList("-variants", variants, known); err != nil {
		return s, err
	}
	for _, p := range peers {
		if slices.Contains(s.variants, p.Name) {
			s.peers = append(s.peers, p)
		}
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
	writePeerTable(out, results, s.peers)
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
