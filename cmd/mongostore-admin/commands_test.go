package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mongostore/mongostore"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestStats(t *testing.T) {
	f := newFixture(t)
	col := map[string]string{"SESSION_COLLECTION": f.name}

	r := runCmd(t, col, "stats", "-exact")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustContain(t, "stdout", r.stdout,
		"collection  "+testDatabase+"."+f.name+" on ",
		"documents   7\n",
		"live        5 (counted on the expiresAt index)",
		"expired     2 not deleted yet (counted on the expiresAt index)",
		"no GC sweep has deleted them",
		"expiry      GC (a plain index on expiresAt",
		"expiresAt_1 {expiresAt: 1}\n",
		"as the store expects",
		"BSON document size",
		"of 7 documents")
	mustMatch(t, "stdout", r.stdout,
		`the oldest expired 2[34]h\d\dm ago`, // a day ago, give or take the test's duration
		`p50 \d+ B, p90 \d+ B, p99 \d+ B, max \d+ B, mean \d+ B`)
	if testServer(t).Kind == kindFerretDB1 {
		mustContain(t, "stdout", r.stdout, "the first documents in natural order (the server has no $sample): not a random sample",
			"owner_1 {owner: 1}\n", "owner_1 is not sparse: FerretDB v1 ignores the option")
	} else {
		mustContain(t, "stdout", r.stdout, "a random sample of 7 documents ($sample", "owner_1 {owner: 1}, sparse\n")
	}

	r = runCmd(t, col, "stats")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	mustMatch(t, "stdout", r.stdout, `documents   \d+ \(estimated, from the collection's metadata\)`, `live        about \d+ \(documents less expired`)
	mustContain(t, "stdout", r.stdout, "expired     2 not deleted yet")

	r = runCmd(t, col, "stats", "-exact", "-json", "-sample", "3")
	if r.code != 0 {
		t.Fatalf("exit code %d", r.code)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Documents != 7 || rep.Live != 5 || rep.Expired != 2 || rep.Other != 0 || !rep.Exact {
		t.Errorf("documents %d, live %d, expired %d, other %d, exact %v; want 7, 5, 2, 0, true", rep.Documents, rep.Live, rep.Expired, rep.Other, rep.Exact)
	}
	if rep.OldestExpired == nil || rep.LagSeconds < 23*3600 || rep.LagSeconds > 25*3600 {
		t.Errorf("oldest expired %v, %v seconds ago; want a day ago", rep.OldestExpired, rep.LagSeconds)
	}
	if rep.Indexes.Mode != modeGC || len(rep.Indexes.Problems) != 0 {
		t.Errorf("mode %q, problems %q; want GC, none", rep.Indexes.Mode, rep.Indexes.Problems)
	}
	if rep.Sizes == nil || rep.Sizes.Count != 3 || rep.Sizes.P50 < 100 || rep.Sizes.Max < rep.Sizes.P50 {
		t.Errorf("sizes %+v; want 3 documents of some hundred bytes", rep.Sizes)
	}
}

// TestStatsModes checks the expiry mode stats reads from the indexes of a
// store in each mode, and its warnings about missing indexes.
func TestStatsModes(t *testing.T) {
	t.Run("auto", func(t *testing.T) {
		name, coll := testCollection(t)
		store := newStore(t, coll, mongostore.Config{}, time.Time{})
		login(t, store, "alice", "Firefox")
		r := runCmd(t, map[string]string{"SESSION_COLLECTION": name}, "stats")
		if r.code != 0 {
			t.Fatalf("exit code %d", r.code)
		}
		if testServer(t).Kind == kindFerretDB1 { // no TTL indexes: the GC goroutine
			mustContain(t, "stdout", r.stdout, "expiry      GC", "as the store expects")
		} else {
			mustContain(t, "stdout", r.stdout, "expiry      TTL (a TTL index on expiresAt)",
				"expiresAt_1 is a TTL index with expireAfterSeconds 0", "expiresAt_1 {expiresAt: 1}, TTL expireAfterSeconds 0", "as the store expects")
		}
	})
	t.Run("none", func(t *testing.T) {
		name, coll := testCollection(t)
		store := newStore(t, coll, mongostore.Config{Expiry: mongostore.ExpiryNone}, time.Time{})
		login(t, store, "", "")
		r := runCmd(t, map[string]string{"SESSION_COLLECTION": name}, "stats")
		if r.code != 0 {
			t.Fatalf("exit code %d", r.code)
		}
		mustContain(t, "stdout", r.stdout, "expiry      none (no index on expiresAt)",
			"warning: no index on expiresAt: every sweep (DeleteExpired) scans the collection",
			"warning: no owner_1 index", "counted by a collection scan")
	})
	t.Run("other TTL", func(t *testing.T) {
		if testServer(t).Kind == kindFerretDB1 {
			t.Skip("FerretDB v1 has no TTL indexes") // the CI leg on DocumentDB runs it
		}
		name, coll := testCollection(t)
		ctx := context.Background()
		_, err := coll.Indexes().CreateMany(ctx, []mongo.IndexModel{
			{Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("expires").SetExpireAfterSeconds(3600)},
			{Keys: bson.D{{Key: "owner", Value: 1}}, Options: options.Index().SetName("owner_1")},
		})
		if err != nil {
			t.Fatal(err)
		}
		r := runCmd(t, map[string]string{"SESSION_COLLECTION": name}, "stats")
		if r.code != 0 {
			t.Fatalf("exit code %d", r.code)
		}
		mustContain(t, "stdout", r.stdout, "expiry      TTL",
			"warning: expires is a TTL index with expireAfterSeconds 3600, not 0",
			"the index on expiresAt is called expires, not expiresAt_1",
			"warning: owner_1 is not sparse")
	})
}

func TestStatsMissingCollection(t *testing.T) {
	name, coll := testCollection(t)
	createIndexes(t, coll) // the database exists, with this collection in it
	r := runCmd(t, map[string]string{"SESSION_COLLECTION": name + "_typo"}, "stats")
	if r.code != 1 {
		t.Errorf("exit code %d, want 1", r.code)
	}
	mustContain(t, "stderr", r.stderr, "collection "+testDatabase+"."+name+"_typo does not exist", name, "check DB_NAME or -db")
}
