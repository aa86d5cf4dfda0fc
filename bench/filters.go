package main

// bench filters: what each condition of a save's filter costs the server.
// -users workers update -docs documents, each worker its own share in
// turn, with the bare driver, in interleaved rounds of three filters:
// {_id} (the floor's), {_id, rev} (the store's where the server plans
// queries) and {_id, rev, expiresAt > now} (the store's before it knew the
// loaded version's expiry). The collection has the store's indexes.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongostore/mongostore/bench/internal/db"
	"github.com/mongostore/mongostore/bench/internal/lib"
	"github.com/mongostore/mongostore/bench/internal/load"
)

type filtersRun struct {
	*common
	users, docs, rounds int
	round               time.Duration
}

func filtersBench(fs *flag.FlagSet, c *common) (func() string, func(context.Context, io.Writer) error) {
	r := &filtersRun{common: c}
	fs.IntVar(&r.users, "users", 1, "concurrent workers, each with its own share of the documents")
	fs.IntVar(&r.docs, "docs", 2000, "documents")
	fs.IntVar(&r.rounds, "rounds", 12, "rounds; each runs every filter in turn, in balanced orders (a multiple of 3 balances them)")
	fs.DurationVar(&r.round, "round", 3*time.Second, "how long each filter runs in a round")
	check := func() string {
		if r.users < 1 || r.docs < r.users || r.rounds < 1 || r.round <= 0 {
			return "-users, -rounds and -round must be positive, -docs at least -users"
		}
		return ""
	}
	return check, r.run
}

// saveFilters are the filters compared, the floor's first.
var saveFilters = []struct {
	name   string
	filter func(id string, rev int64, now time.Time) bson.D
}{
	{"{_id}", func(id string, _ int64, _ time.Time) bson.D { return bson.D{{Key: "_id", Value: id}} }},
	{"{_id, rev}", func(id string, rev int64, _ time.Time) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "rev", Value: rev}}
	}},
	{"{_id, rev, expiresAt > now}", func(id string, rev int64, now time.Time) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "rev", Value: rev}, {Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}}}
	}},
}

func (r *filtersRun) run(ctx context.Context, out io.Writer) error {
	client, server, disconnect, err := db.Connect(ctx, r.uri, nil)
	if err != nil {
		return err
	}
	defer disconnect(context.WithoutCancel(ctx))
	fmt.Fprintf(out, "bench filters on %s: %d users, %d documents, %d rounds of %v\n", server, r.users, r.docs, r.rounds, r.round)
	coll := client.Database(r.db).Collection("filters")
	if err := coll.Drop(ctx); err != nil {
		return err
	}
	// Left behind, its TTL index would be visited every second by the server's TTL job.
	defer coll.Drop(context.WithoutCancel(ctx))
	store, err := lib.Open(ctx, coll, lib.Options{Expiry: "auto", Logger: r.logger}, db.RandomBytes(32)) // its indexes
	if err != nil {
		return err
	}
	store.Close()
	ids, revs, data := make([]string, r.docs), make([]int64, r.docs), db.RandomBytes(200)
	docs := make([]any, r.docs)
	for i := range ids {
		ids[i], revs[i] = db.RandomHex(64), 1
		docs[i] = bson.D{{Key: "_id", Value: ids[i]}, {Key: "rev", Value: revs[i]}, {Key: "data", Value: data},
			{Key: "expiresAt", Value: time.Now().Add(time.Hour)}}
	}
	next := make([]int, r.users) // the document worker w updates next: w, w+users, …, then w again
	for w := range next {
		next[w] = w
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		return err
	}
	names := make([]string, len(saveFilters))
	byName := map[string]int{}
	for i, f := range saveFilters {
		names[i], byName[f.name] = f.name, i
	}
	turn := func(name string) load.Batch {
		filter := saveFilters[byName[name]].filter
		return load.Run(ctx, r.users, 0, r.round, nil, func(ctx context.Context, w, _ int) error {
			i := next[w]
			if next[w] += r.users; next[w] >= r.docs {
				next[w] = w
			}
			return update(ctx, coll, ids[i], &revs[i], data, filter)
		})
	}
	total, err := load.Rounds(ctx, r.rounds, names, turn, nil)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "| filter | updates | per s | p50 ms | p99 ms | ratio to {_id} | per round | errors |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, n := range names {
		b, base := total[n], total[names[0]]
		fmt.Fprintf(out, "| %s | %d | %.0f | %.2f | %.2f | %.3f | %s | %d |\n", n, b.N(), b.Rate(), load.Ms(b.Percentile(0.5)),
			load.Ms(b.Percentile(0.99)), b.Rate()/base.Rate(), load.PerRound(b, base), b.Errors)
		if b.Errors > 0 {
			err = errors.Join(err, fmt.Errorf("%s: %d errors, the first: %w", n, b.Errors, b.First))
		}
	}
	return err
}

// update updates the document id under filter, which must match it (one
// worker owns it: rev is its revision), with data.
func update(ctx context.Context, coll *mongo.Collection, id string, rev *int64, data []byte,
	filter func(string, int64, time.Time) bson.D) error {
	now := time.Now()
	res, err := coll.UpdateOne(ctx, filter(id, *rev, now), bson.D{{Key: "$set", Value: bson.D{{Key: "rev", Value: *rev + 1},
		{Key: "updatedAt", Value: now}, {Key: "expiresAt", Value: now.Add(time.Hour)}, {Key: "data", Value: data}}}})
	switch {
	case err != nil:
		return err
	case res.MatchedCount != 1:
		return errors.New("the filter matched no document")
	}
	*rev++
	return nil
}
