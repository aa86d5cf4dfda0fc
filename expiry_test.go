package mongostore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// serverSupportsTTL reports whether the test server accepts TTL indexes,
// by trying one on a scratch collection.
func serverSupportsTTL(t *testing.T) bool {
	t.Helper()
	coll := testCollection(t, testClient(t, nil))
	_, err := coll.Indexes().CreateOne(context.Background(), mongo.IndexModel{
		Keys: bson.D{{Key: "probe", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(60),
	})
	if err != nil && !unsupported(err) {
		t.Fatalf("probe TTL support: %v", err)
	}
	return err == nil
}

// expiresAtIndexes returns the single-field indexes on expiresAt.
func expiresAtIndexes(t *testing.T, coll *mongo.Collection) []*expiresAtIndex {
	t.Helper()
	cur, err := coll.Indexes().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []*expiresAtIndex
	for cur.Next(context.Background()) {
		if idx, ok := parseExpiresAtIndex(cur.Current); ok {
			out = append(out, idx)
		}
	}
	return out
}

// wantOneTTLIndex checks that coll has exactly one index on expiresAt, with
// expireAfterSeconds 0.
func wantOneTTLIndex(t *testing.T, coll *mongo.Collection) {
	t.Helper()
	idx := expiresAtIndexes(t, coll)
	if len(idx) != 1 || idx[0].ttl == nil || *idx[0].ttl != 0 {
		t.Fatalf("indexes on expiresAt = %+v, want one with expireAfterSeconds 0", idx)
	}
}

// wantCommand checks that cmds holds exactly one command named name and
// that it equals want (field order included), ignoring the driver's
// session and cluster fields ($db, lsid, $clusterTime, ...).
func wantCommand(t *testing.T, cmds *commandLog, name string, want bson.D) {
	t.Helper()
	got := cmds.named(name)
	if len(got) != 1 {
		t.Fatalf("%d %s commands sent, want 1", len(got), name)
	}
	elems, err := got[0].Elements()
	if err != nil {
		t.Fatal(err)
	}
	var trimmed bson.D
	for _, e := range elems {
		if strings.HasPrefix(e.Key(), "$") || e.Key() == "lsid" || e.Key() == "txnNumber" || e.Key() == "maxTimeMS" {
			continue
		}
		var v any
		if err := e.Value().Unmarshal(&v); err != nil {
			t.Fatal(err)
		}
		trimmed = append(trimmed, bson.E{Key: e.Key(), Value: v})
	}
	gotJSON, _ := bson.MarshalExtJSON(trimmed, false, false)
	wantJSON, _ := bson.MarshalExtJSON(want, false, false)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("%s command:\n got %s\nwant %s", name, gotJSON, wantJSON)
	}
}

func newExpiryStore(t *testing.T, coll *mongo.Collection, mode ExpiryMode) (*Store, error) {
	t.Helper()
	s, err := NewStore(context.Background(), coll, Config{Expiry: mode, Logger: testLogger(&syncBuffer{})}, testHashKey)
	if s != nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func TestTTLIndexCreation(t *testing.T) {
	ttl := serverSupportsTTL(t)
	cmds := &commandLog{}
	coll := testCollection(t, testClient(t, cmds))

	store, err := newExpiryStore(t, coll, ExpiryTTL)
	wantCommand(t, cmds, "createIndexes", bson.D{
		{Key: "createIndexes", Value: coll.Name()},
		{Key: "indexes", Value: bson.A{bson.D{
			{Key: "key", Value: bson.D{{Key: "expiresAt", Value: int32(1)}}},
			{Key: "expireAfterSeconds", Value: int32(0)},
			{Key: "name", Value: "expiresAt_1"},
		}}},
	})
	if !ttl {
		t.Logf("server without TTL indexes (%s): checking the refusal", testServerKind)
		if !errors.Is(err, ErrTTLUnsupported) || store != nil {
			t.Fatalf("NewStore = %v, %v; want ErrTTLUnsupported", store, err)
		}
		return
	}
	if err != nil || store.ExpiryMode() != ExpiryTTL {
		t.Fatalf("NewStore: %v", err)
	}
	wantOneTTLIndex(t, coll)
	// A second store on the same collection finds the index and sends nothing.
	cmds.reset()
	if _, err := newExpiryStore(t, coll, ExpiryTTL); err != nil {
		t.Fatal(err)
	}
	if n := len(cmds.named("createIndexes")) + len(cmds.named("collMod")); n != 0 {
		t.Fatalf("second start sent %d index commands, want 0", n)
	}
}

func TestExistingIndexIsBroughtInLineWithCollMod(t *testing.T) {
	ttl := serverSupportsTTL(t)
	for _, tt := range []struct {
		name     string
		existing *int32 // expireAfterSeconds of the existing index; nil: plain index
	}{
		{"plain index", nil},
		{"TTL index of one hour", ptr(int32(3600))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.existing != nil && !ttl {
				t.Skipf("the %s server cannot hold a TTL index to start from; covered against MongoDB (MONGODB_URI)", testServerKind)
			}
			cmds := &commandLog{}
			coll := testCollection(t, testClient(t, cmds))
			opts := options.Index()
			if tt.existing != nil {
				opts.SetExpireAfterSeconds(*tt.existing)
			}
			if _, err := coll.Indexes().CreateOne(context.Background(), mongo.IndexModel{
				Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: opts,
			}); err != nil {
				t.Fatal(err)
			}
			cmds.reset()
			store, err := newExpiryStore(t, coll, ExpiryTTL)
			wantCommand(t, cmds, "collMod", bson.D{
				{Key: "collMod", Value: coll.Name()},
				{Key: "index", Value: bson.D{
					{Key: "name", Value: "expiresAt_1"},
					{Key: "expireAfterSeconds", Value: int64(0)},
				}},
			})
			if n := len(cmds.named("createIndexes")) + len(cmds.named("dropIndexes")); n != 0 {
				t.Fatalf("%d createIndexes/dropIndexes commands, want none: the index is changed in place", n)
			}
			if !ttl {
				t.Logf("server without collMod (%s): checking the refusal", testServerKind)
				if !errors.Is(err, ErrTTLUnsupported) {
					t.Fatalf("NewStore error = %v, want ErrTTLUnsupported", err)
				}
				return
			}
			if err != nil || store.ExpiryMode() != ExpiryTTL {
				t.Fatalf("NewStore: %v", err)
			}
			wantOneTTLIndex(t, coll)
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestExpiryModeSetup(t *testing.T) {
	ttl := serverSupportsTTL(t)
	for _, tt := range []struct {
		mode      ExpiryMode
		wantMode  ExpiryMode // on a server with TTL; without, see below
		wantIndex bool
		wantTTL   bool
		wantGC    bool
	}{
		{ExpiryAuto, ExpiryTTL, true, true, false},
		{ExpiryGC, ExpiryGC, true, false, true},
		{ExpiryTTLAndGC, ExpiryTTLAndGC, true, true, true},
		{ExpiryNone, ExpiryNone, false, false, false},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			cmds := &commandLog{}
			coll := testCollection(t, testClient(t, cmds))
			store, err := newExpiryStore(t, coll, tt.mode)
			if !ttl {
				switch tt.mode {
				case ExpiryAuto:
					tt.wantMode, tt.wantTTL, tt.wantGC = ExpiryGC, false, true
				case ExpiryTTLAndGC:
					if !errors.Is(err, ErrTTLUnsupported) {
						t.Fatalf("NewStore error = %v, want ErrTTLUnsupported", err)
					}
					return
				}
			}
			if err != nil {
				t.Fatalf("NewStore: %v", err)
			}
			if store.ExpiryMode() != tt.wantMode {
				t.Fatalf("ExpiryMode() = %v, want %v", store.ExpiryMode(), tt.wantMode)
			}
			if gc := store.gcDone != nil; gc != tt.wantGC {
				t.Fatalf("GC goroutine running = %v, want %v", gc, tt.wantGC)
			}
			if tt.mode == ExpiryNone && cmds.count.Load() != 0 {
				t.Fatalf("ExpiryNone sent %d commands, want 0", cmds.count.Load())
			}
			// Create the collection, in case no index command did.
			if _, err := coll.InsertOne(context.Background(), bson.D{{Key: "x", Value: 1}}); err != nil {
				t.Fatal(err)
			}
			idx := expiresAtIndexes(t, coll)
			if (len(idx) == 1) != tt.wantIndex || len(idx) > 1 {
				t.Fatalf("indexes on expiresAt: %+v, want index=%v", idx, tt.wantIndex)
			}
			if tt.wantIndex && (idx[0].ttl != nil) != tt.wantTTL {
				t.Fatalf("index TTL = %v, want TTL=%v", idx[0].ttl, tt.wantTTL)
			}
			// Starting again over the existing index works too.
			if _, err := newExpiryStore(t, coll, tt.mode); err != nil {
				t.Fatalf("second NewStore: %v", err)
			}
		})
	}
}

func TestIndexConflictError(t *testing.T) {
	store := &Store{coll: testCollection(t, testClient(t, nil)), cfg: Config{Logger: testLogger(&syncBuffer{})}}
	idx := &expiresAtIndex{name: "by_expiry", ttl: ptr(int64(3600))}
	err := store.collModError(idx, mongo.CommandError{Code: 72, Name: "InvalidOptions", Message: "cannot"})
	if !errors.Is(err, ErrIndexConflict) {
		t.Fatalf("error = %v, want ErrIndexConflict", err)
	}
	for _, want := range []string{`"by_expiry"`, "expireAfterSeconds 3600", "dropIndex", "InvalidOptions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if err := store.collModError(idx, mongo.CommandError{Code: 238, Name: "NotImplemented"}); !errors.Is(err, ErrTTLUnsupported) {
		t.Fatalf("NotImplemented gave %v, want ErrTTLUnsupported", err)
	}
}

func TestTTLMonitorDeletesExpiredSessions(t *testing.T) {
	if !serverSupportsTTL(t) {
		t.Skipf("the %s server has no TTL monitor; ExpiryGC covers it (TestGC*); run with MONGODB_URI against MongoDB", testServerKind)
	}
	if testing.Short() {
		t.Skip("waits up to two minutes for the TTL monitor; not in -short")
	}
	t.Parallel()
	f := newFixture(t, Config{Expiry: ExpiryTTL})
	f.store.MaxAge(1)
	saveNew(t, f, map[any]any{"k": "v"})
	deadline := time.Now().Add(2 * time.Minute) // the monitor runs every 60s
	for f.count(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the TTL monitor did not delete the expired session within two minutes")
		}
		time.Sleep(time.Second)
	}
}
