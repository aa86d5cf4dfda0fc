package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/mongostore/mongostore"
)

var rekeyCommand = command{
	name:    "rekey",
	summary: "re-seal every live session under the first key pair (needs SESSION_KEY)",
	usage:   "[-dry-run] [-decrypt] [-offline] [-db name] [-collection name]",
	keys:    true,
	help: `
Re-seals every live session under the first key pair of SESSION_KEY (and
SESSION_BLOCK_KEY), owner digest included (Store.Rekey), so that the older
pairs can go without signing anybody out: give the new pair first, the
old ones after it. With a block key in the first pair only, it encrypts
the sessions stored plain; a first pair without a block key, before one
with, would store them plain: it refuses that without -decrypt. On
FerretDB v1, whose writes are not atomic across processes, it refuses to
write unless -offline says the application is stopped. It never deletes,
and can run again after a cut; -dry-run counts only. Progress goes to
standard error; it exits 1 if some sessions open with none of the keys,
or hold values of types it cannot decode (Store.Rekey re-seals those).`,
	flags: func(fs *flag.FlagSet) body {
		var opts mongostore.RekeyOptions
		fs.BoolVar(&opts.DryRun, "dry-run", false, "count what would change, change nothing")
		fs.BoolVar(&opts.Decrypt, "decrypt", false, "allow storing encrypted sessions plain (the first key pair has no block key)")
		fs.BoolVar(&opts.SingleProcess, "offline", false, "the application is stopped (needed to write on FerretDB v1)")
		return body{run: func(ctx context.Context, a *app, c *conn) error {
			return a.keyedStore(ctx, c, "nothing was changed", false, func(s *mongostore.Store, none string) error { return a.rekey(ctx, s, none, opts) })
		}}
	},
}

func (a *app) rekey(ctx context.Context, store *mongostore.Store, none string, opts mongostore.RekeyOptions) error {
	start, verb := time.Now(), map[bool]string{true: "to re-seal", false: "re-sealed"}[opts.DryRun]
	opts.Progress = func(rc mongostore.RekeyCounts) {
		fmt.Fprintf(a.stderr, "rekey: %d sessions read, %d %s, %d unverified, %d undecodable (%.0f/s)\n",
			rc.Live, rc.Changed, verb, rc.Unverified, rc.Undecodable, float64(rc.Live)/max(time.Since(start).Seconds(), 1e-3))
	}
	rc, err := store.Rekey(ctx, opts)
	if errors.Is(err, mongostore.ErrInvalidConfig) { // refused before reading anything
		return fmt.Errorf("%w (Decrypt is -decrypt here, SingleProcess -offline)", err)
	}
	stopped := map[bool]string{true: "until it stopped: "}[err != nil]
	fmt.Fprintf(a.stdout, "%s%s%s: %d %s under the first key pair (%d encrypted, %d decrypted), %d opened by none of the keys, %d with values this command cannot decode (left alone)\n",
		stopped, plural(int(rc.Live), "live session"), none, rc.Changed, verb, rc.Encrypted, rc.Decrypted, rc.Unverified, rc.Undecodable)
	fmt.Fprintf(a.stdout, "before: %s\n", byKey(rc.ByKey))
	switch {
	case err != nil:
		return fmt.Errorf("%w (what was re-sealed stays so, and the write under way may have landed: run rekey again to finish)", err)
	case rc.Unverified > 0:
		return problemf("%s: none of the keys given opens them (give every key pair the application has, first the new one)", plural(int(rc.Unverified), "session"))
	case rc.Undecodable > 0:
		return problemf("%s hold values of types this command cannot decode (registered by the application with gob): re-seal them with Store.Rekey in the application", plural(int(rc.Undecodable), "session"))
	}
	return nil
}

// byKey says how many sessions need each key pair.
func byKey(counts []int64) string {
	parts := make([]string, len(counts))
	for i, n := range counts {
		parts[i] = fmt.Sprintf("key pair %d: %d", i+1, n)
	}
	return strings.Join(parts, ", ")
}
