package main

// bench rekey: how fast Store.Rekey re-seals a collection. It stores -n
// sessions under an old key (through the store, -workers at a time), then
// times, with the new key first and the old one after it: a dry run, the
// rekey, and a second run (nothing left to change).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/sessions"

	"github.com/mongostore/mongostore/bench/internal/db"
	"github.com/mongostore/mongostore/bench/internal/lib"
)

type rekeyRun struct {
	*common
	n, workers int
}

func rekeyBench(fs *flag.FlagSet, c *common) (func() string, func(context.Context, io.Writer) error) {
	r := &rekeyRun{common: c}
	fs.IntVar(&r.n, "n", 100_000, "sessions to store, then rekey")
	fs.IntVar(&r.workers, "workers", 8, "concurrent saves while filling")
	check := func() string {
		if r.n < 1 || r.workers < 1 {
			return "-n and -workers must be positive"
		}
		return ""
	}
	return check, r.run
}

func (r *rekeyRun) run(ctx context.Context, out io.Writer) error {
	client, server, disconnect, err := db.Connect(ctx, r.uri, nil)
	if err != nil {
		return err
	}
	defer disconnect(context.WithoutCancel(ctx))
	fmt.Fprintf(out, "bench rekey on %s\n", server)
	coll := client.Database(r.db).Collection("rekey")
	if err := coll.Drop(ctx); err != nil {
		return err
	}
	oldKey, newKey := []byte("the old hash key, of 32 bytes or more"), []byte("the new hash key, of 32 bytes or more")
	old, err := lib.Open(ctx, coll, lib.Options{Expiry: "none", Logger: r.logger}, oldKey)
	if err != nil {
		return err
	}
	defer old.Close()
	start := time.Now()
	if err := r.fill(ctx, old); err != nil {
		return err
	}
	fmt.Fprintf(out, "stored %d sessions under the old key in %.1fs\n", r.n, time.Since(start).Seconds())
	rotated, err := lib.Open(ctx, coll, lib.Options{Expiry: "none", Logger: r.logger}, newKey, nil, oldKey, nil)
	if err != nil {
		return err
	}
	defer rotated.Close()
	fmt.Fprintln(out, "| run | live | changed | unverified | seconds | sessions/s |\n| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, step := range []struct {
		name string
		dry  bool
		want int64
	}{{"dry run", true, int64(r.n)}, {"rekey", false, int64(r.n)}, {"again", false, 0}} {
		start := time.Now()
		c, err := rotated.Rekey(ctx, step.dry)
		secs := time.Since(start).Seconds()
		if err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		fmt.Fprintf(out, "| %s | %d | %d | %d | %.1f | %.0f |\n", step.name, c.Live, c.Changed, c.Unverified, secs, float64(c.Live)/secs)
		if c.Changed != step.want || c.Live != int64(r.n) || c.Unverified != 0 {
			return errors.New(step.name + ": unexpected counts")
		}
	}
	return nil
}

// fill stores r.n sessions through store, r.workers at a time.
func (r *rekeyRun) fill(ctx context.Context, store *lib.Store) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, r.workers)
	for w := range r.workers {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= r.n && errs[w] == nil; i = int(next.Add(1)) {
				_, errs[w] = store.Create(ctx, cookieName, func(s *sessions.Session) { fill(s, i) }, owner(i), "bench", nil)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
