// Command scale answers one question about mongostore: does the store stay
// fast at 10k, 100k and 1M sessions, while expired sessions are removed?
//
// For each collection size N it
//
//  1. creates a fresh collection in database mongostore_scale and a Store
//     on it (mongostore.NewStore with the -expiry mode);
//  2. creates -sessions real sessions through the store (New, a few values,
//     Save) and keeps their cookies, then fills the rest of N with filler
//     documents inserted through the driver, shaped like the documents the
//     store wrote (same fields, types and sizes, random bytes); 10% of all
//     documents are expired filler (expiresAt 1 to 60 minutes ago);
//  3. measures Store.New on the real sessions' cookies (the store's Load)
//     against the bare driver floor, FindOne({_id}) on filler documents, in
//     interleaved rounds at the same concurrency;
//  4. removes the expired documents while loads go on: in GC mode (or when
//     the server refuses TTL indexes) with one timed Store.DeleteExpired
//     sweep; in TTL mode by waiting for the server's TTL job, measured from
//     the end of the fill (the idle measurement then comes after it);
//  5. checks that no live session was lost: every real session still loads
//     and every live filler document is still there;
//  6. for each owner of real sessions (5 sessions each, tied with
//     mongostore.SetOwner; filler documents carry owners of their own, so
//     the owner index holds N entries), times Store.ListSessions and the
//     Store.EndOtherSessions that ends four of them, and asks the server
//     (explain) whether a listing uses the owner index.
//
// It prints what it does, a line per N and a markdown table at the end, and
// drops each collection after its run (unless -keep). Latencies are in
// milliseconds; "ratio" is the store's p50 over the bare driver's; "expiry s"
// is the sweep's duration, or in TTL mode the time from the end of the fill
// until the expired documents were gone (the TTL job starts deleting during
// the fill); "deleted/s" is the sweep's rate, or in TTL mode the documents
// still there when the fill ended over the time they took to go, a lower
// bound set by the TTL job's period.
//
// Usage:
//
//	MONGODB_URI=mongodb://127.0.0.1:27017/ go run ./cmd/scale [flags]
//	make scale SCALE_FLAGS='-n 10000,100000,1000000'
//
// With no URI, it starts the embedded FerretDB server (embeddb, through
// internal/testserver) with its data in a temporary directory, and stops it
// at the end. The flags:
//
//	-uri            MongoDB URI (default $MONGODB_URI; empty: an embedded server)
//	-n              collection sizes, comma-separated; k and m suffixes allowed (default 10000,100000)
//	-expiry         auto, gc or ttl (default auto: TTL where the server supports it)
//	-sessions       real sessions created through the store (default 1000)
//	-loads          loads per measurement, store and bare each (default 2000)
//	-workers        concurrent loads (default 4)
//	-rounds         interleaved store/bare rounds of the idle measurement (default 4)
//	-ttl-period     period of the server's TTL job (default 1s, as on the test server; MongoDB: 60s)
//	-phase-timeout  longest a latency measurement or TTL wait may take (default 2m)
//	-timeout        total time budget; the run stops when it is spent (default 20m)
//	-db             database (default mongostore_scale)
//	-keep           keep the collections instead of dropping them
//
// The exit status is 0 when every size ran and nothing was lost, 1 when a
// live session was lost or a run failed, 2 on bad flags.
//
// The tool uses only mongostore's public API and the driver, and learns the
// document shape from the documents the store writes, so that it measures
// whatever version of the store it is built with.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mongostore/mongostore/internal/serverinfo"
	"github.com/mongostore/mongostore/internal/testserver"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongostore/mongostore"
)

// settings are the command's parsed flags.
type settings struct {
	uri          string
	sizes        []int
	expiry       mongostore.ExpiryMode
	sessions     int
	loads        int
	workers      int
	rounds       int
	ttlPeriod    time.Duration
	phaseTimeout time.Duration
	timeout      time.Duration
	db           string
	keep         bool
	collPrefix   string // collection name prefix (tests use their own)
}

func main() {
	s, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, s, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s settings
	var sizes, expiry string
	fs.StringVar(&s.uri, "uri", os.Getenv("MONGODB_URI"), "MongoDB URI (default $MONGODB_URI; empty: an embedded server)")
	fs.StringVar(&sizes, "n", "10000,100000", "collection sizes, comma-separated (k and m suffixes allowed)")
	fs.StringVar(&expiry, "expiry", "auto", "expiry mode: auto, gc or ttl")
	fs.IntVar(&s.sessions, "sessions", 1000, "real sessions created through the store")
	fs.IntVar(&s.loads, "loads", 2000, "loads per measurement (store and bare each)")
	fs.IntVar(&s.workers, "workers", 4, "concurrent loads")
	fs.IntVar(&s.rounds, "rounds", 4, "interleaved store/bare rounds of the idle measurement")
	fs.DurationVar(&s.ttlPeriod, "ttl-period", time.Second, "period of the server's TTL job")
	fs.DurationVar(&s.phaseTimeout, "phase-timeout", 2*time.Minute, "longest a latency measurement or TTL wait may take")
	fs.DurationVar(&s.timeout, "timeout", 20*time.Minute, "total time budget")
	fs.StringVar(&s.db, "db", "mongostore_scale", "database")
	fs.BoolVar(&s.keep, "keep", false, "keep the collections instead of dropping them")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var err error
	if s.sizes, err = parseSizes(sizes); err != nil {
		return s, err
	}
	if s.expiry, err = parseExpiry(expiry); err != nil {
		return s, err
	}
	switch {
	case s.sessions < 1:
		return s, errors.New("-sessions must be at least 1")
	case s.loads < 1:
		return s, errors.New("-loads must be at least 1")
	case s.workers < 1:
		return s, errors.New("-workers must be at least 1")
	case s.rounds < 1:
		return s, errors.New("-rounds must be at least 1")
	case s.ttlPeriod <= 0 || s.phaseTimeout <= 0 || s.timeout <= 0:
		return s, errors.New("-ttl-period, -phase-timeout and -timeout must be positive")
	case s.db == "":
		return s, errors.New("-db must not be empty")
	}
	return s, nil
}

// parseSizes parses a comma-separated list of collection sizes such as
// "10000,100k,1m".
func parseSizes(list string) ([]int, error) {
	var sizes []int
	for f := range strings.SplitSeq(list, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"):
			f, mult = strings.TrimSuffix(f, "k"), 1000
		case strings.HasSuffix(f, "m"):
			f, mult = strings.TrimSuffix(f, "m"), 1000_000
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 100_000_000/mult {
			return nil, fmt.Errorf("-n: bad size %q", f)
		}
		sizes = append(sizes, n*mult)
	}
	if len(sizes) == 0 {
		return nil, errors.New("-n: no sizes")
	}
	return sizes, nil
}

func parseExpiry(name string) (mongostore.ExpiryMode, error) {
	switch name {
	case "auto":
		return mongostore.ExpiryAuto, nil
	case "gc":
		return mongostore.ExpiryGC, nil
	case "ttl":
		return mongostore.ExpiryTTL, nil
	}
	return 0, fmt.Errorf("-expiry: %q is not auto, gc or ttl", name)
}

// run benchmarks every size in turn and prints the results to out. It
// returns an error if a size failed or lost sessions.
func run(ctx context.Context, s settings, out io.Writer) (err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, fmt.Errorf("time budget (-timeout %v) spent", s.timeout))
	defer cancel()
	registerGob()

	if s.uri == "" {
		fmt.Fprintln(out, "no MONGODB_URI: starting the embedded FerretDB server (the first build takes minutes)")
		uri, stop, serr := testserver.Run()
		if serr != nil {
			return fmt.Errorf("embedded server: %w", serr)
		}
		defer func() {
			if serr := stop(); serr != nil && err == nil {
				err = fmt.Errorf("stop the embedded server: %w", serr)
			}
		}()
		s.uri = uri
	}
	client, err := mongo.Connect(options.Client().ApplyURI(s.uri))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer dcancel()
		_ = client.Disconnect(dctx)
	}()
	server, err := serverinfo.Describe(ctx, client)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "server: %s\n", server)

	var results []result
	var failed error
	for _, n := range s.sizes {
		if ctx.Err() != nil {
			failed = errors.Join(failed, fmt.Errorf("N=%d not run: %w", n, context.Cause(ctx)))
			continue
		}
		fmt.Fprintf(out, "\n== N=%d\n", n)
		res := runSize(ctx, client.Database(s.db), s, n, out)
		res.server = server.Short()
		fmt.Fprintln(out, res.line())
		results = append(results, res)
		switch {
		case res.err != nil:
			failed = errors.Join(failed, fmt.Errorf("N=%d: %w", n, res.err))
		case res.lost != 0:
			failed = errors.Join(failed, fmt.Errorf("N=%d: %d live sessions lost", n, res.lost))
		}
	}
	fmt.Fprintln(out)
	writeTable(out, results)
	return failed
}

// registerGob registers the types of the real sessions' values that gob
// does not know by default.
func registerGob() {
	gob.Register(time.Time{})
}
