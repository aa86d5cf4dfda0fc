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
	"strings"
	"time"

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
Counts the collection's sessions, live and expired but not yet deleted, and
says how long ago the oldest expired one expired: how far the TTL monitor or
the GC lags. Says which expiry mode the indexes imply (TTL, GC, none) and
whether they are what the store expects, and the percentiles of the
documents' BSON size, from a random sample.

It reads indexes and metadata, not every document: the number of documents
comes from the collection's metadata, the expired ones are counted on the
expiresAt index, and live is the difference. -exact counts the live ones
too, on the index (each live session is read: slower on a large
collection). Needs no SESSION_KEY.`,
	flags: func(fs *flag.FlagSet) body {
		var o statsOptions
		fs.IntVar(&o.sample, "sample", 1000, "documents to sample for sizes (0: none)")
		fs.BoolVar(&o.exact, "exact", false, "count live sessions and documents exactly, on the index (slower)")
		fs.BoolVar(&o.json, "json", false, "print the report as JSON")
		return body{
			validate: func() error {
				if o.sample < 0 {
					return usagef("-sample %d: must be 0 or more", o.sample)
				}
				return nil
			},
			run: func(ctx context.Context, a *app, c *conn) error { return a.stats(ctx, c, o) },
		}
	},
}

type statsOptions struct {
	sample int
	exact  bool
	json   bool
}

// statsReport is what stats prints.
type statsReport struct {
	Collection string     `json:"collection"`
	Server     serverInfo `json:"server"`
	Time       time.Time  `json:"time"`
	// Documents is the number of documents: estimated from the
	// collection's metadata unless Exact.
	Documents int64 `json:"documents"`
	// Live is the number of live sessions: Documents less Expired unless
	// Exact.
	Live  int64 `json:"live"`
	Exact bool  `json:"exact"`
	// Expired counts the documents expired but not deleted yet.
	Expired int64 `json:"expired"`
	// OldestExpired is the expiresAt of the oldest of them, and Lag how
	// long ago that was.
	OldestExpired *time.Time  `json:"oldestExpired,omitempty"`
	LagSeconds    float64     `json:"lagSeconds"`
	Indexes       indexReport `json:"indexes"`
	Sizes         *sizeReport `json:"sizes,omitempty"`
}

// sizeReport summarizes the BSON sizes of sampled documents, in bytes.
type sizeReport struct {
	// Method says how the documents were sampled.
	Method string `json:"method"`
	// Random says the sample is random.
	Random bool  `json:"random"`
	Count  int   `json:"count"`
	P50    int64 `json:"p50"`
	P90    int64 `json:"p90"`
	P99    int64 `json:"p99"`
	Max    int64 `json:"max"`
	Mean   int64 `json:"mean"`
}

func (a *app) stats(ctx context.Context, c *conn, o statsOptions) error {
	if err := c.requireCollection(ctx); err != nil {
		return err
	}
	if _, err := a.sessionSample(ctx, c); err != nil {
		return err
	}
	r := statsReport{Collection: c.name(), Exact: o.exact}
	var err error
	if r.Server, err = getServerInfo(ctx, c.coll.Database()); err != nil {
		return err
	}
	indexes, err := listIndexes(ctx, c.coll)
	if err != nil {
		return err
	}
	r.Indexes = analyzeIndexes(indexes, r.Server.Kind)
	now := time.Now().Truncate(time.Millisecond)
	r.Time = now.UTC()
	withIndex := func(what string) string {
		if r.Indexes.ExpiresAt == nil {
			return what + " (no index on expiresAt: a collection scan)"
		}
		return what + " (on " + r.Indexes.ExpiresAt.Name + ")"
	}

	done := step(a.stderr, a.progressAfter, "stats", withIndex("counting expired sessions"))
	r.Expired, r.OldestExpired, err = countExpired(ctx, c.coll, now)
	done()
	if err != nil {
		return err
	}
	if r.OldestExpired != nil {
		r.LagSeconds = now.Sub(*r.OldestExpired).Seconds()
	}

	if o.exact {
		done = step(a.stderr, a.progressAfter, "stats", withIndex("counting live sessions"))
		r.Live, err = c.coll.CountDocuments(ctx, liveFilter(now))
		done()
		if err != nil {
			return fmt.Errorf("count live sessions: %w", err)
		}
		done = step(a.stderr, a.progressAfter, "stats", "counting documents")
		r.Documents, err = c.coll.CountDocuments(ctx, bson.D{})
		done()
		if err != nil {
			return fmt.Errorf("count documents: %w", err)
		}
	} else {
		r.Documents, err = c.coll.EstimatedDocumentCount(ctx)
		if err != nil {
			return fmt.Errorf("estimated document count: %w", err)
		}
		r.Live = max(0, r.Documents-r.Expired)
	}

	if o.sample > 0 {
		done = step(a.stderr, a.progressAfter, "stats", fmt.Sprintf("sampling %d documents for their sizes", o.sample))
		r.Sizes, err = sampleSizes(ctx, c.coll, o.sample)
		done()
		if err != nil {
			return err
		}
	}

	if o.json {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	r.print(a.stdout, c.server)
	return nil
}

func liveFilter(now time.Time) bson.D {
	return bson.D{{Key: setup.FieldExpiresAt, Value: bson.D{{Key: "$gt", Value: bson.NewDateTimeFromTime(now)}}}}
}

func expiredFilter(now time.Time) bson.D {
	return bson.D{{Key: setup.FieldExpiresAt, Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(now)}}}}
}

// countExpired counts the documents expired at now (the filter of a GC
// sweep: a range of the expiresAt index) and finds the oldest expiresAt
// among them, in one aggregation; or, where the server refuses it, a count
// and a sorted find.
func countExpired(ctx context.Context, coll *mongo.Collection, now time.Time) (int64, *time.Time, error) {
	pipeline := mongo.Pipeline{
		{{Key: "$match", Value: expiredFilter(now)}},
		{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: nil},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
			{Key: "oldest", Value: bson.D{{Key: "$min", Value: "$" + setup.FieldExpiresAt}}},
		}}},
	}
	cur, err := coll.Aggregate(ctx, pipeline)
	if err == nil {
		var out []bson.Raw
		if err = cur.All(ctx, &out); err == nil {
			if len(out) == 0 {
				return 0, nil, nil
			}
			n, _ := out[0].Lookup("n").AsInt64OK()
			if ms, ok := out[0].Lookup("oldest").DateTimeOK(); ok {
				t := time.UnixMilli(ms).UTC()
				return n, &t, nil
			}
			return n, nil, nil
		}
	}
	if !setup.IsAnswer(err) {
		return 0, nil, fmt.Errorf("count expired sessions: %w", err)
	}
	// A server without $group or $min: two queries.
	n, err := coll.CountDocuments(ctx, expiredFilter(now))
	if err != nil {
		return 0, nil, fmt.Errorf("count expired sessions: %w", err)
	}
	if n == 0 {
		return 0, nil, nil
	}
	raw, err := coll.FindOne(ctx, expiredFilter(now), options.FindOne().
		SetSort(bson.D{{Key: setup.FieldExpiresAt, Value: 1}}).
		SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: setup.FieldExpiresAt, Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return n, nil, nil
	}
	if err != nil {
		return n, nil, fmt.Errorf("find the oldest expired session: %w", err)
	}
	if ms, ok := raw.Lookup(setup.FieldExpiresAt).DateTimeOK(); ok {
		t := time.UnixMilli(ms).UTC()
		return n, &t, nil
	}
	return n, nil, nil
}

// sampleSizes measures the BSON size of n documents: a random sample
// ($sample) whose sizes the server computes ($bsonSize, MongoDB 4.4+), or
// measured here where it has no $bsonSize; where it has no $sample either
// (FerretDB v1), the first n documents in natural order, which is no
// random sample.
func sampleSizes(ctx context.Context, coll *mongo.Collection, n int) (*sizeReport, error) {
	sample := bson.D{{Key: "$sample", Value: bson.D{{Key: "size", Value: n}}}}
	tries := []struct {
		method string
		random bool
		read   func() (*mongo.Cursor, error)
		size   func(bson.Raw) (int64, bool)
	}{
		{"$sample, sizes by $bsonSize", true, func() (*mongo.Cursor, error) {
			return coll.Aggregate(ctx, mongo.Pipeline{sample, {{Key: "$project", Value: bson.D{
				{Key: "_id", Value: 0}, {Key: "s", Value: bson.D{{Key: "$bsonSize", Value: "$$ROOT"}}}}}}})
		}, func(doc bson.Raw) (int64, bool) { return doc.Lookup("s").AsInt64OK() }},
		{"$sample, sizes measured here", true, func() (*mongo.Cursor, error) {
			return coll.Aggregate(ctx, mongo.Pipeline{sample})
		}, func(doc bson.Raw) (int64, bool) { return int64(len(doc)), true }},
		{"the first documents in natural order (the server has no $sample): not a random sample", false, func() (*mongo.Cursor, error) {
			return coll.Find(ctx, bson.D{}, options.Find().SetLimit(int64(n)))
		}, func(doc bson.Raw) (int64, bool) { return int64(len(doc)), true }},
	}
	var errs []error
	for _, try := range tries {
		sizes, err := readSizes(ctx, try.read, try.size)
		if err == nil {
			return summarizeSizes(sizes, try.method, try.random), nil
		}
		errs = append(errs, err)
		if !setup.IsAnswer(err) {
			break
		}
	}
	return nil, fmt.Errorf("sample document sizes: %w", errors.Join(errs...))
}

func readSizes(ctx context.Context, read func() (*mongo.Cursor, error), size func(bson.Raw) (int64, bool)) ([]int64, error) {
	cur, err := read()
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	var sizes []int64
	for cur.Next(ctx) {
		s, ok := size(cur.Current)
		if !ok {
			return nil, errors.New("a sampled document has no size")
		}
		sizes = append(sizes, s)
	}
	return sizes, cur.Err()
}

// summarizeSizes returns the percentiles of sizes (nearest rank).
func summarizeSizes(sizes []int64, method string, random bool) *sizeReport {
	r := &sizeReport{Method: method, Random: random, Count: len(sizes)}
	if len(sizes) == 0 {
		return r
	}
	slices.Sort(sizes)
	rank := func(p float64) int64 {
		i := int(math.Ceil(p*float64(len(sizes)))) - 1
		return sizes[min(max(i, 0), len(sizes)-1)]
	}
	var sum int64
	for _, s := range sizes {
		sum += s
	}
	r.P50, r.P90, r.P99, r.Max, r.Mean = rank(0.50), rank(0.90), rank(0.99), sizes[len(sizes)-1], sum/int64(len(sizes))
	return r
}

// print writes the report for people.
func (r *statsReport) print(w io.Writer, server string) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-11s %s\n", label, fmt.Sprintf(format, args...))
	}
	more := func(format string, args ...any) { line("", format, args...) }
	line("collection", "%s on %s", r.Collection, server)
	line("server", "%s", r.Server)
	line("time", "%s", r.Time.Format(time.RFC3339))
	onIndex := "counted on the expiresAt index"
	if r.Indexes.ExpiresAt == nil {
		onIndex = "counted by a collection scan: no index on expiresAt"
	}
	if r.Exact {
		line("documents", "%s", count(r.Documents))
		line("live", "%s (%s)", count(r.Live), onIndex)
	} else {
		line("documents", "%s (estimated, from the collection's metadata)", count(r.Documents))
		line("live", "about %s (documents less expired; -exact counts them)", count(r.Live))
	}
	line("expired", "%s not deleted yet (%s)", count(r.Expired), onIndex)
	if r.OldestExpired != nil {
		more("the oldest expired %s ago, at %s", age(time.Duration(r.LagSeconds*float64(time.Second))), r.OldestExpired.Format(time.RFC3339))
		more("%s", r.lagVerdict())
	}
	line("expiry", "%s", modeName(r.Indexes.Mode))
	for _, n := range r.Indexes.Notes {
		more("%s", n)
	}
	for i, idx := range r.Indexes.Indexes {
		label := ""
		if i == 0 {
			label = "indexes"
		}
		line(label, "%s %s", idx.Name, describeIndex(idx))
	}
	if len(r.Indexes.Problems) == 0 {
		more("as the store expects")
	}
	for _, p := range r.Indexes.Problems {
		more("warning: %s", p)
	}
	if s := r.Sizes; s != nil {
		if s.Count == 0 {
			line("sizes", "no documents to sample")
		} else {
			kind := "a random sample"
			if !s.Random {
				kind = "a sample"
			}
			line("sizes", "BSON document size, %s of %s documents (%s):", kind, count(int64(s.Count)), s.Method)
			more("p50 %s, p90 %s, p99 %s, max %s, mean %s", bytesize(s.P50), bytesize(s.P90), bytesize(s.P99), bytesize(s.Max), bytesize(s.Mean))
		}
	}
}

// lagVerdict says what the age of the oldest expired session means in the
// expiry mode the indexes imply.
func (r *statsReport) lagVerdict() string {
	lag := time.Duration(r.LagSeconds * float64(time.Second))
	switch r.Indexes.Mode {
	case modeTTL:
		if lag <= 3*time.Minute {
			return "the TTL monitor runs about once a minute: it is keeping up"
		}
		return "the TTL monitor runs about once a minute: its deletes are behind (a busy server, or TTL disabled: ttlMonitorEnabled)"
	case modeGC:
		if lag <= 3*time.Minute {
			return "the GC sweeps (every GCInterval, 1 minute by default) are keeping up"
		}
		return "no GC sweep has deleted them: is a store running in GC mode (or a DeleteExpired job)? Sweeps run every GCInterval, 1 minute by default"
	}
	return "nothing deletes them but a DeleteExpired job, and without an index on expiresAt each of its runs scans the collection"
}

// modeName describes an expiry mode.
func modeName(mode string) string {
	switch mode {
	case modeTTL:
		return "TTL (a TTL index on expiresAt)"
	case modeGC:
		return "GC (a plain index on expiresAt: the store's GC goroutine or a DeleteExpired job deletes expired sessions)"
	}
	return "none (no index on expiresAt)"
}

// count formats n with thousands separators: 1,000,000.
func count(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
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
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
