package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/review"
	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var statsCommand = command{
	name:    "stats",
	summary: "sessions live and expired, how far their deletion lags, indexes, document sizes",
	usage:   "[-sample n] [-exact] [-json] [-db name] [-collection name]",
	help: `
Counts the collection's sessions, live and expired but not yet deleted,
says how long ago the oldest expired one expired (how far the TTL monitor
or the GC lags), which expiry mode the indexes imply and whether they are
what the store expects, and the percentiles of the documents' BSON size,
from a random sample. Expired ones are counted on the expiresAt index, the
documents taken from the metadata, live is the difference (-exact counts
them: slower). With SESSION_KEY, it reads every live session to count those that
need each key pair (see rekey).`,
	flags: func(fs *flag.FlagSet) body {
		sample := fs.Int("sample", 1000, "documents to sample for sizes (0: none)")
		exact := fs.Bool("exact", false, "count live sessions and documents exactly, on the index (slower)")
		asJSON := fs.Bool("json", false, "print the report as JSON")
		return body{run: func(ctx context.Context, a *app, c *conn) error { return a.stats(ctx, c, *sample, *exact, *asJSON) }, validate: func() error {
			if *sample < 0 {
				return usagef("-sample %d: must be 0 or more", *sample)
			}
			return nil
		}}
	},
}

// statsReport is what stats prints.
type statsReport struct {
	Collection string     `json:"collection"`
	Server     serverInfo `json:"server"`
	Time       time.Time  `json:"time"`
	Documents  int64      `json:"documents"` // estimated from the collection's metadata unless Exact
	Live       int64      `json:"live"`      // Documents less Expired unless Exact
	Exact      bool       `json:"exact"`
	Expired    int64      `json:"expired"` // expired, not deleted yet
	// The expiresAt of the oldest expired document, and how long ago it was.
	OldestExpired *time.Time    `json:"oldestExpired,omitempty"`
	LagSeconds    float64       `json:"lagSeconds"`
	Indexes       review.Review `json:"indexes"`
	Sizes         *sizeReport   `json:"sizes,omitempty"`
	Keys          *keyReport    `json:"keys,omitempty"` // with SESSION_KEY: the live sessions that need each key pair
}

// keyReport is what stats says of the keys, from a dry run of Rekey: it changes nothing.
type keyReport struct {
	Live        int64   `json:"live"`
	ByKey       []int64 `json:"byKey"`       // the live sessions that need each key pair, in the order given
	WouldReseal int64   `json:"wouldReseal"` // those Rekey would re-seal under the first pair
	Unverified  int64   `json:"unverified"`  // opened by no key pair given
	Undecodable int64   `json:"undecodable"` // with values this command cannot decode
}

// sizeReport summarizes the BSON sizes, in bytes, of documents sampled by Method.
type sizeReport struct {
	Method string `json:"method"`
	Random bool   `json:"random"`
	Count  int    `json:"count"`
	P50    int64  `json:"p50"`
	P90    int64  `json:"p90"`
	P99    int64  `json:"p99"`
	Max    int64  `json:"max"`
	Mean   int64  `json:"mean"`
}

func (a *app) stats(ctx context.Context, c *conn, sample int, exact, asJSON bool) error {
	if _, err := a.sessionSample(ctx, c); err != nil {
		return err
	}
	info, err := getServerInfo(ctx, c.coll.Database())
	if err != nil {
		return err
	}
	indexes, err := listIndexes(ctx, c.coll)
	if err != nil {
		return err
	}
	now := time.Now().Truncate(time.Millisecond)
	r := statsReport{Collection: c.name(), Server: info, Time: now.UTC(), Exact: exact, Indexes: review.ReviewIndexes(indexes, info.Kind)}
	if err := a.count(ctx, c.coll, &r, now); err != nil {
		return err
	}
	if sample > 0 {
		done := step(a.stderr, a.progressAfter, "stats", fmt.Sprintf("sampling %d documents for their sizes", sample))
		r.Sizes, err = sampleSizes(ctx, c.coll, sample)
		if done(); err != nil {
			return err
		}
	}
	if err := a.keyCounts(ctx, c, &r); err != nil {
		return err
	}
	if asJSON {
		return printJSON(a.stdout, r)
	}
	r.print(a.stdout, c.server)
	return nil
}

// keyCounts counts, with SESSION_KEY set, the live sessions that need each key pair (all read) into r.
func (a *app) keyCounts(ctx context.Context, c *conn, r *statsReport) (err error) {
	if a.getenv("SESSION_KEY") == "" {
		return nil
	} else if c.keyPairs, err = parseKeys(a.getenv("SESSION_KEY"), a.getenv("SESSION_BLOCK_KEY")); err != nil {
		return err
	}
	return a.keyedStore(ctx, c, "unset SESSION_KEY for the other counts", false, func(store *mongostore.Store, _ string) error {
		defer step(a.stderr, a.progressAfter, "stats", "reading every live session to count what needs each key pair")()
		rc, err := store.Rekey(ctx, mongostore.RekeyOptions{DryRun: true, Decrypt: true}) // Decrypt: a dry run may count what decrypting would do
		r.Keys = &keyReport{rc.Live, rc.ByKey, rc.Changed, rc.Unverified, rc.Undecodable}
		return err
	})
}

// printJSON writes v to w as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// step shows on w that label is under way after it has run for after, and every
// after, until done (which returns once nothing more is written).
func step(w io.Writer, after time.Duration, command, label string) (done func()) {
	start, stop, shown := time.Now(), make(chan struct{}), make(chan bool)
	go func() {
		tick := time.Tick(after)
		for ticked := false; ; ticked = true {
			select {
			case <-stop:
				shown <- ticked
				return
			case <-tick:
				fmt.Fprintf(w, "mongostore-admin %s: %s… %s\n", command, label, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() {
		if close(stop); <-shown {
			fmt.Fprintf(w, "mongostore-admin %s: %s: done in %s\n", command, label, time.Since(start).Round(100*time.Millisecond))
		}
	}
}

// count counts the documents of coll, live and expired at now, into r.
func (a *app) count(ctx context.Context, coll *mongo.Collection, r *statsReport, now time.Time) (err error) {
	on := " (no index on expiresAt: a collection scan)"
	if r.Indexes.ExpiresAt != nil {
		on = " (on " + r.Indexes.ExpiresAt.Name + ")"
	}
	defer step(a.stderr, a.progressAfter, "stats", "counting sessions"+on)()
	if r.Expired, r.OldestExpired, err = countExpired(ctx, coll, now); err != nil {
		return err
	}
	if r.OldestExpired != nil {
		r.LagSeconds = now.Sub(*r.OldestExpired).Seconds()
	}
	if !r.Exact {
		r.Documents, err = coll.EstimatedDocumentCount(ctx)
		r.Live = max(0, r.Documents-r.Expired)
		return wrap("estimated document count", err)
	}
	if r.Live, err = coll.CountDocuments(ctx, expiresAt("$gt", now)); err != nil {
		return fmt.Errorf("count live sessions: %w", err)
	}
	r.Documents, err = coll.CountDocuments(ctx, bson.D{})
	return wrap("count documents", err)
}

// wrap returns err, if not nil, after what was done.
func wrap(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// expiresAt returns the filter {expiresAt: {op: t}}.
func expiresAt(op string, t time.Time) bson.D {
	return bson.D{{Key: setup.FieldExpiresAt, Value: bson.D{{Key: op, Value: bson.NewDateTimeFromTime(t)}}}}
}

// countExpired counts the documents expired at now, on the expiresAt index as a GC sweep, and finds the oldest.
func countExpired(ctx context.Context, coll *mongo.Collection, now time.Time) (int64, *time.Time, error) {
	n, err := coll.CountDocuments(ctx, expiresAt("$lte", now))
	if err != nil || n == 0 {
		return 0, nil, wrap("count expired sessions", err)
	}
	raw, err := coll.FindOne(ctx, expiresAt("$lte", now), options.FindOne().SetSort(bson.D{{Key: setup.FieldExpiresAt, Value: 1}}).
		SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: setup.FieldExpiresAt, Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) { // deleted meanwhile
		return n, nil, nil
	}
	ms, ok := raw.Lookup(setup.FieldExpiresAt).DateTimeOK()
	if err != nil || !ok {
		return n, nil, wrap("find the oldest expired session", err)
	}
	t := time.UnixMilli(ms).UTC()
	return n, &t, nil
}

// sampleSizes measures the BSON size of n documents: a $sample, or the first n (FerretDB v1).
func sampleSizes(ctx context.Context, coll *mongo.Collection, n int) (*sizeReport, error) {
	r := &sizeReport{Method: "$sample", Random: true}
	cur, err := coll.Aggregate(ctx, mongo.Pipeline{{{Key: "$sample", Value: bson.D{{Key: "size", Value: n}}}}})
	if setup.IsAnswer(err) {
		r.Method, r.Random = "the first documents in natural order (the server has no $sample): not a random sample", false
		cur, err = coll.Find(ctx, bson.D{}, options.Find().SetLimit(int64(n)))
	}
	if err != nil {
		return nil, fmt.Errorf("sample document sizes: %w", err)
	}
	defer cur.Close(ctx)
	var sizes []int64
	for cur.Next(ctx) {
		sizes = append(sizes, int64(len(cur.Current)))
	}
	r.summarize(sizes)
	return r, wrap("sample document sizes", cur.Err())
}

// summarize sets the count and percentiles (nearest rank) of sizes.
func (r *sizeReport) summarize(sizes []int64) {
	if r.Count = len(sizes); r.Count == 0 {
		return
	}
	slices.Sort(sizes)
	rank := func(p float64) int64 { return sizes[max(int(math.Ceil(p*float64(len(sizes))))-1, 0)] }
	var sum int64
	for _, s := range sizes {
		sum += s
	}
	r.P50, r.P90, r.P99, r.Max, r.Mean = rank(0.50), rank(0.90), rank(0.99), sizes[len(sizes)-1], sum/int64(len(sizes))
}

// print writes the report for people.
func (r *statsReport) print(w io.Writer, server string) {
	p := report{w, 11}
	p.line("collection", "%s on %s", r.Collection, server)
	p.line("server", "%s", r.Server)
	p.line("time", "%s", r.Time.Format(time.RFC3339))
	onIndex := map[bool]string{true: "counted on the expiresAt index", false: "counted by a collection scan: no index on expiresAt"}[r.Indexes.ExpiresAt != nil]
	if r.Exact {
		p.line("documents", "%s", count(r.Documents))
		p.line("live", "%s (%s)", count(r.Live), onIndex)
	} else {
		p.line("documents", "%s (estimated, from the collection's metadata)", count(r.Documents))
		p.line("live", "about %s (documents less expired; -exact counts them)", count(r.Live))
	}
	p.line("expired", "%s not deleted yet (%s)", count(r.Expired), onIndex)
	if r.OldestExpired != nil {
		p.more("the oldest expired %s ago, at %s", age(time.Duration(r.LagSeconds*float64(time.Second))), r.OldestExpired.Format(time.RFC3339))
		p.more("%s", r.lagVerdict())
	}
	printIndexes(p, r.Indexes)
	if k := r.Keys; k != nil {
		p.line("keys", "%s (of %s; %d opened by none, %d with values this command cannot decode)", byKey(k.ByKey), plural(int(k.Live), "live session"), k.Unverified, k.Undecodable)
	}
	if s := r.Sizes; s != nil && s.Count == 0 {
		p.line("sizes", "no documents to sample")
	} else if s != nil {
		kind := map[bool]string{true: "a random sample", false: "a sample"}[s.Random]
		p.line("sizes", "BSON document size, %s of %s documents (%s):", kind, count(int64(s.Count)), s.Method)
		p.more("p50 %s, p90 %s, p99 %s, max %s, mean %s", bytesize(s.P50), bytesize(s.P90), bytesize(s.P99), bytesize(s.Max), bytesize(s.Mean))
	}
}

// lagVerdict says what the oldest expired session's age means in the indexes' expiry mode.
func (r *statsReport) lagVerdict() string {
	switch late := r.LagSeconds > 3*60; {
	case r.Indexes.Mode == review.ModeTTL && late:
		return "the TTL monitor runs about once a minute: its deletes are behind (a busy server, or TTL disabled: ttlMonitorEnabled)"
	case r.Indexes.Mode == review.ModeTTL:
		return "the TTL monitor runs about once a minute: it is keeping up"
	case r.Indexes.Mode == review.ModeGC && late:
		return "no GC sweep has deleted them: is a store running in GC mode (or a DeleteExpired job)? Sweeps run every GCInterval, 1 minute by default"
	case r.Indexes.Mode == review.ModeGC:
		return "the GC sweeps (every GCInterval, 1 minute by default) are keeping up"
	}
	return "nothing deletes them but a DeleteExpired job, and without an index on expiresAt each of its runs scans the collection"
}

// count formats n with thousands separators: 1,000,000.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// bytesize formats a size in bytes: 312 B, 4.1 KiB, 1.5 MiB.
func bytesize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1024*1024))
}

// age formats a duration for people: 42s, 5m12s, 3h04m, 2d05h.
func age(d time.Duration) string {
	switch d = d.Round(time.Second); {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// listIndexes returns the collection's indexes; none if it does not exist.
func listIndexes(ctx context.Context, coll *mongo.Collection) ([]setup.Index, error) {
	cur, err := coll.Indexes().List(ctx)
	if setup.HasCode(err, setup.CodeNamespaceNotFound) {
		return nil, nil
	}
	var specs []bson.Raw
	if err == nil {
		err = cur.All(ctx, &specs)
	}
	return setup.ParseIndexes(specs), wrap("list the indexes of "+coll.Name(), err)
}

// printIndexes writes what r says of the mode and the indexes.
func printIndexes(p report, r review.Review) {
	p.line("expiry", "%s", map[string]string{
		review.ModeTTL:  "TTL (a TTL index on expiresAt)",
		review.ModeGC:   "GC (a plain index on expiresAt: the store's GC goroutine or a DeleteExpired job deletes expired sessions)",
		review.ModeNone: "none (no index on expiresAt)",
	}[r.Mode])
	for _, n := range r.Notes {
		p.more("%s", n)
	}
	for i, idx := range r.Indexes {
		p.line(map[bool]string{true: "indexes"}[i == 0], "%s %s", idx.Name, describeIndex(idx))
	}
	for _, problem := range r.Problems {
		p.more("warning: %s", problem)
	}
	p.more("%s", map[bool]string{true: "as the store expects", false: "'mongostore-admin check' says what NewStore would do about them"}[len(r.Problems) == 0])
}

// describeIndex says in a few words what idx is.
func describeIndex(idx setup.Index) string {
	s := idx.Key
	if idx.TTL != nil {
		s += fmt.Sprintf(", TTL expireAfterSeconds %d", *idx.TTL)
	}
	return s + map[bool]string{true: ", partial"}[idx.Partial] + map[bool]string{true: ", sparse"}[idx.Sparse]
}
