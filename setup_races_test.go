package mongostore

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongostore/mongostore/internal/faultproxy"
	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// indexNames returns the names of coll's indexes.
func indexNames(t *testing.T, coll *mongo.Collection) []string {
	t.Helper()
	specs, err := collection{c: coll}.indexSpecs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, spec := range specs {
		name, _ := spec.Lookup("name").StringValueOK()
		names = append(names, name)
	}
	return names
}

// TestInstancesStartTogether: instances of an application starting at once
// on one collection all start, whatever a start before left there (no
// index, GC mode's plain index, format 1's owner index), and leave the
// indexes of one store. On DocumentDB two instances dropping the same index
// get "deadlock detected" (InternalError), which NewStore once failed with.
func TestInstancesStartTogether(t *testing.T) {
	ttl := serverSupportsTTL(t)
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, coll *mongo.Collection)
	}{
		{"fresh", func(*testing.T, *mongo.Collection) {}},
		{"from GC mode", func(t *testing.T, coll *mongo.Collection) {
			if _, err := newExpiryStore(t, coll, ExpiryGC); err != nil {
				t.Fatal(err)
			}
		}},
		{"from format 1", func(t *testing.T, coll *mongo.Collection) {
			if _, err := newExpiryStore(t, coll, ExpiryGC); err != nil {
				t.Fatal(err)
			}
			err := coll.Indexes().DropOne(context.Background(), ownerIndexName)
			if err == nil {
				_, err = coll.Indexes().CreateOne(context.Background(), mongo.IndexModel{Keys: bson.D{{Key: fieldOwner, Value: 1}},
					Options: options.Index().SetName(setup.SparseOwnerIndexName).SetSparse(true)})
			}
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for round := range 6 {
				coll := testCollection(t, testClient(t, nil))
				tc.before(t, coll)
				var wg sync.WaitGroup
				stores, errs := make([]*Store, 4), make([]error, 4)
				for i := range errs {
					wg.Go(func() {
						stores[i], errs[i] = newExpiryStore(t, testClient(t, nil).Database(testDatabase).Collection(coll.Name()), ExpiryAuto)
					})
				}
				wg.Wait()
				for i, err := range errs {
					if want := map[bool]ExpiryMode{true: ExpiryTTL, false: ExpiryGC}[ttl]; err != nil || stores[i].Expiry() != want {
						t.Fatalf("round %d, instance %d: NewStore: %v; want %v", round, i, err, want)
					}
				}
				if idx := expiresAtIndexes(t, coll); len(idx) != 1 || idx[0].IsTTL() != ttl {
					t.Fatalf("round %d: indexes on expiresAt %+v; want one, TTL: %v", round, idx, ttl)
				}
				if names := indexNames(t, coll); slices.Contains(names, setup.SparseOwnerIndexName) || !slices.Contains(names, ownerIndexName) {
					t.Fatalf("round %d: indexes %q; want %s, not %s", round, names, ownerIndexName, setup.SparseOwnerIndexName)
				}
			}
		})
	}
}

// TestOwnerIndexOfTheApplicationStays: an index named owner_1 that is not
// format 1's (the default name of the application's own {owner: 1}:
// unique, or without options where the server reports sparse) is not the
// store's to drop; it serves listings, so the store makes no second index
// on owner (FerretDB v1 refuses one). FerretDB v1 does not report sparse,
// so there an owner_1 without options is taken for format 1's.
func TestOwnerIndexOfTheApplicationStays(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *options.IndexOptionsBuilder
	}{{"unique", options.Index().SetUnique(true)}, {"no options", options.Index()}} {
		t.Run(tc.name, func(t *testing.T) {
			coll := testCollection(t, testClient(t, nil))
			if _, err := coll.Indexes().CreateOne(context.Background(), mongo.IndexModel{Keys: bson.D{{Key: fieldOwner, Value: 1}}, Options: tc.opts}); err != nil {
				t.Fatal(err)
			}
			store, err := newExpiryStore(t, coll, ExpiryAuto)
			if err != nil {
				t.Fatal(err)
			}
			atomic, _ := store.coll.atomicWrites(context.Background())
			names := indexNames(t, coll)
			if want := tc.name == "unique" || atomic; slices.Contains(names, setup.SparseOwnerIndexName) != want || !want && !slices.Contains(names, ownerIndexName) {
				t.Fatalf("indexes %q: want the application's %s kept: %v", names, setup.SparseOwnerIndexName, want)
			}
		})
	}
}

// TestGCModeBesideAnotherIndexOnExpiresAt: in GC mode, an index on
// expiresAt that sweeps cannot use (hashed; partial, where the server has
// partial indexes) does not stand for the store's plain index, which is
// created beside it. A hashed index is not taken for the TTL one either.
func TestGCModeBesideAnotherIndexOnExpiresAt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model mongo.IndexModel
	}{
		{"hashed", mongo.IndexModel{Keys: bson.D{{Key: fieldExpiresAt, Value: "hashed"}}}},
		{"partial", mongo.IndexModel{Keys: bson.D{{Key: fieldExpiresAt, Value: 1}}, Options: options.Index().SetName("expiring_owned").
			SetPartialFilterExpression(bson.D{{Key: fieldOwner, Value: bson.D{{Key: "$exists", Value: true}}}})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coll := testCollection(t, testClient(t, nil))
			if _, err := coll.Indexes().CreateOne(context.Background(), tc.model); err != nil {
				var se mongo.ServerError
				if !errors.As(err, &se) {
					t.Fatal(err)
				}
				t.Logf("the server refuses such an index: %v", err) // FerretDB v1: nothing to stand for the store's
				return
			}
			if _, err := newExpiryStore(t, coll, ExpiryGC); err != nil {
				t.Fatal(err)
			}
			if names := indexNames(t, coll); !slices.Contains(names, expiresAtIndexName) {
				t.Fatalf("indexes %q: no %s for the sweeps", names, expiresAtIndexName)
			}
		})
	}
}

// TestPlainIndexPutBackAfterAFailedTTLIndex: where NewStore drops GC mode's
// plain index to create the TTL one (collMod cannot change it) and the
// create then fails (the connection cut here), it puts the plain index
// back: the sweeps of the instances still in GC mode need it. A server
// whose collMod changes the index, or without TTL, never drops it.
func TestPlainIndexPutBackAfterAFailedTTLIndex(t *testing.T) {
	coll := testCollection(t, testClient(t, nil))
	if _, err := newExpiryStore(t, coll, ExpiryGC); err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(uriHost(t, os.Getenv("MONGODB_URI")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	uri, err := proxy.MongoURI(os.Getenv("MONGODB_URI"))
	if err != nil {
		t.Fatal(err)
	}
	var cut atomic.Bool
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if _, err := e.Command.LookupErr("indexes", "0", "expireAfterSeconds"); e.CommandName == "createIndexes" && err == nil {
			cut.Store(true)
			proxy.Cut()
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(monitor).SetRetryWrites(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := NewStore(ctx, client.Database(testDatabase).Collection(coll.Name()), Config{Logger: testLogger(&syncBuffer{})}, testHashKey)
	if err == nil {
		store.Close()
	}
	if cut.Load() != (err != nil) {
		t.Fatalf("the TTL index's create was cut: %v; NewStore: %v", cut.Load(), err)
	}
	if names := indexNames(t, coll); !slices.Contains(names, expiresAtIndexName) {
		t.Fatalf("after a TTL index that failed (cut: %v), indexes %q: no %s", cut.Load(), names, expiresAtIndexName)
	}
}
