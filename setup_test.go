package mongostore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"
	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// serverSupportsTTL reports whether the test server accepts TTL indexes,
// by trying one on a scratch collection.
func serverSupportsTTL(t *testing.T) bool {
	t.Helper()
	coll := testCollection(t, testClient(t, nil))
	_, err := coll.Indexes().CreateOne(context.Background(), mongo.IndexModel{
		Keys: bson.D{{Key: "probe", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(60),
	})
	if err != nil && !setup.Unsupported(err) {
		t.Fatalf("probe TTL support: %v", err)
	}
	return err == nil
}

// expiresAtIndexes returns the single-field indexes on expiresAt.
func expiresAtIndexes(t *testing.T, coll *mongo.Collection) []*setup.Index {
	t.Helper()
	cur, err := coll.Indexes().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []*setup.Index
	for cur.Next(context.Background()) {
		if idx := setup.FindExpiresAt([]setup.Index{setup.ParseIndex(cur.Current)}); idx != nil {
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
	if len(idx) != 1 || !idx[0].IsTTL() {
		t.Fatalf("indexes on expiresAt = %+v, want one with expireAfterSeconds 0", idx)
	}
}

// wantCommand checks that cmds holds exactly one command named name and
// that it equals want (field order included), ignoring the driver's
// session and cluster fields ($db, lsid, $clusterTime, ...).
func wantCommand(t *testing.T, cmds *commandLog, name string, want bson.D) {
	t.Helper()
	got := slices.DeleteFunc(cmds.named(name), isOwnerIndexCommand)
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

// wantMentions checks that err's message holds each of wants.
func wantMentions(t *testing.T, err error, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// ttlRefusalHint is what the error of ExpiryTTL on a server without TTL
// indexes says (it was ErrTTLUnsupported): the refusal, and what to do.
var ttlRefusalHint = []string{"refuses TTL indexes", "ExpiryTTL", "ExpiryAuto", "ExpiryGC"}

func newExpiryStore(t *testing.T, coll *mongo.Collection, mode ExpiryMode) (*Store, error) {
	t.Helper()
	return newCountingStore(t, coll, Config{Expiry: mode}, nil)
}

// newCountingStore calls NewStore with cfg, counting the GC sweeps in
// sweeps if it is not nil.
func newCountingStore(t *testing.T, coll *mongo.Collection, cfg Config, sweeps *atomic.Int64) (*Store, error) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(&syncBuffer{})
	}
	if sweeps != nil {
		cfg.afterSweep = func() { sweeps.Add(1) }
	}
	s, err := NewStore(context.Background(), coll, cfg, testHashKey)
	if s != nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// gcRan closes store and reports whether its GC goroutine ran, from the
// sweeps counted: the goroutine sweeps once before it first looks whether
// Close stopped it, and Close waits for it.
func gcRan(t *testing.T, store *Store, sweeps *atomic.Int64) bool {
	t.Helper()
	store.Close()
	if gcGoroutines(t) != 0 {
		t.Fatal("Close returned before the GC goroutine stopped")
	}
	return sweeps.Load() > 0
}

// TestTTLIndexCreation also holds TestExplicitTTLErrorSaysWhatToDo: the
// message of the refusal, which is no longer built by a function of its own
// (explainTTLRefusal), is checked with the server's own error where the
// server refuses TTL indexes.
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
		if !errors.Is(err, ErrInvalidConfig) || store != nil {
			t.Fatalf("NewStore = %v, %v; want ErrInvalidConfig (the server refuses TTL indexes)", store, err)
		}
		wantMentions(t, err, append(ttlRefusalHint, "NotImplemented")...)
		return
	}
	if err != nil || store.expiry != ExpiryTTL {
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

// isOwnerIndexCommand reports whether cmd creates the owner or the lineage
// index, which the expiry tests leave to owners_test.go.
func isOwnerIndexCommand(cmd bson.Raw) bool {
	indexes, ok := cmd.Lookup("indexes").ArrayOK()
	if !ok {
		return false
	}
	first, err := indexes.IndexErr(0)
	if err != nil {
		return false
	}
	doc, _ := first.DocumentOK()
	name, _ := doc.Lookup("name").StringValueOK()
	return name == ownerIndexName || name == lineageIndexName
}

// indexCommands returns the names of the index commands in cmds, excluding
// the owner index's, in order.
func indexCommands(cmds *commandLog) []string {
	cmds.mu.Lock()
	defer cmds.mu.Unlock()
	var out []string
	for _, c := range cmds.commands {
		elems, err := c.Elements()
		if err != nil || len(elems) == 0 {
			continue
		}
		switch name := elems[0].Key(); name {
		case "createIndexes", "collMod", "dropIndexes":
			if !isOwnerIndexCommand(c) {
				out = append(out, name)
			}
		}
	}
	return out
}

func TestExistingIndexIsBroughtInLine(t *testing.T) {
	ttl := serverSupportsTTL(t)
	collMod := bson.D{{Key: "collMod", Value: ""}, {Key: "index", Value: bson.D{
		{Key: "name", Value: "expiresAt_1"},
		{Key: "expireAfterSeconds", Value: int64(0)},
	}}}
	for _, mode := range []ExpiryMode{ExpiryAuto, ExpiryTTL} {
		// The store's own plain index, left by an earlier start in GC mode.
		// collMod turns it into a TTL index where the server can (MongoDB
		// 5.1+); elsewhere (DocumentDB, MongoDB before 5.1: code 72) the
		// store drops it and creates the TTL index.
		t.Run("plain index from GC mode/"+modeName(mode), func(t *testing.T) {
			cmds := &commandLog{}
			coll := testCollection(t, testClient(t, cmds))
			if _, err := newExpiryStore(t, coll, ExpiryGC); err != nil {
				t.Fatal(err)
			}
			cmds.reset()
			store, err := newExpiryStore(t, coll, mode)
			collMod[0].Value = coll.Name()
			wantCommand(t, cmds, "collMod", collMod)
			if !ttl {
				t.Logf("server without TTL indexes (%s): checking the fallback", testServerKind)
				if mode == ExpiryTTL {
					if !errors.Is(err, ErrInvalidConfig) {
						t.Fatalf("NewStore error = %v, want ErrInvalidConfig (the server refuses TTL indexes)", err)
					}
					wantMentions(t, err, append(ttlRefusalHint, `collMod of index "expiresAt_1"`)...)
					return
				}
				if err != nil || store.expiry != ExpiryGC {
					t.Fatalf("NewStore = %v, %v; want the GC fallback", store, err)
				}
				if idx := expiresAtIndexes(t, coll); len(idx) != 1 || idx[0].TTL != nil {
					t.Fatalf("indexes on expiresAt = %+v, want the plain one kept", idx)
				}
				return
			}
			if err != nil || store.expiry != ExpiryTTL {
				t.Fatalf("NewStore: %v", err)
			}
			wantOneTTLIndex(t, coll)
			got := strings.Join(indexCommands(cmds), ",")
			if got != "collMod" && got != "collMod,dropIndexes,createIndexes" {
				t.Fatalf("index commands %s, want collMod alone or collMod,dropIndexes,createIndexes", got)
			}
			t.Logf("index commands: %s", got)
		})
	}
	t.Run("foreign plain index", func(t *testing.T) {
		cmds := &commandLog{}
		coll := testCollection(t, testClient(t, cmds))
		if _, err := coll.Indexes().CreateOne(context.Background(), mongo.IndexModel{
			Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("by_expiry"),
		}); err != nil {
			t.Fatal(err)
		}
		cmds.reset()
		store, err := newExpiryStore(t, coll, ExpiryTTL)
		if n := len(cmds.named("dropIndexes")) + len(slices.DeleteFunc(cmds.named("createIndexes"), isOwnerIndexCommand)); n != 0 {
			t.Fatalf("%d dropIndexes/createIndexes commands: an index the store did not create must be left alone", n)
		}
		switch {
		case !ttl:
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewStore error = %v, want ErrInvalidConfig (the server refuses TTL indexes)", err)
			}
			wantMentions(t, err, append(ttlRefusalHint, `collMod of index "by_expiry"`)...)
		case err == nil: // collMod converted it in place (MongoDB 5.1+)
			if store.expiry != ExpiryTTL {
				t.Fatalf("mode %v", modeName(store.expiry))
			}
			wantOneTTLIndex(t, coll)
		default:
			// Was ErrIndexConflict.
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewStore error = %v, want ErrInvalidConfig (a conflicting index)", err)
			}
			wantMentions(t, err, `"by_expiry"`, fmt.Sprintf(`db.getCollection(%q).dropIndex("by_expiry")`, coll.Name()))
			if idx := expiresAtIndexes(t, coll); len(idx) != 1 || idx[0].Name != "by_expiry" || idx[0].TTL != nil {
				t.Fatalf("indexes on expiresAt = %+v, want by_expiry untouched", idx)
			}
		}
	})
	t.Run("TTL index of one hour", func(t *testing.T) {
		cmds := &commandLog{}
		coll := testCollection(t, testClient(t, cmds))
		_, err := coll.Indexes().CreateOne(context.Background(), mongo.IndexModel{
			Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(3600),
		})
		if !ttl {
			// No such index can exist on this server: nothing to bring in line.
			if !setup.Unsupported(err) {
				t.Fatalf("the %s server, without TTL indexes, created one of an hour: %v", testServerKind, err)
			}
			t.Logf("the %s server refuses a TTL index of an hour too; the DocumentDB leg runs the rest", testServerKind)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		cmds.reset()
		store, err := newExpiryStore(t, coll, ExpiryTTL)
		collMod[0].Value = coll.Name()
		wantCommand(t, cmds, "collMod", collMod)
		if got := strings.Join(indexCommands(cmds), ","); got != "collMod" {
			t.Fatalf("index commands %s, want collMod alone: the index is changed in place", got)
		}
		if err != nil || store.expiry != ExpiryTTL {
			t.Fatalf("NewStore: %v", err)
		}
		wantOneTTLIndex(t, coll)
	})
}

// TestSetupWithinContextDeadline: NewStore's set-up has all of its
// context's deadline (an index build may need it), even past
// Config.Timeout, which bounds it only when the context has none.
func TestSetupWithinContextDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	coll := testCollection(t, testClient(t, nil))
	store, err := NewStore(ctx, coll, Config{Timeout: time.Millisecond, Logger: testLogger(&syncBuffer{})}, testHashKey)
	if err != nil {
		t.Fatalf("NewStore with a minute's deadline and a Timeout of 1ms: %v", err)
	}
	store.Close()
	for _, c := range []struct {
		parent context.Context
		want   time.Time
	}{{ctx, mustDeadline(t, ctx)}, {context.Background(), time.Now().Add(time.Hour)}} {
		setupCtx, cancelSetup := setupContext(c.parent, time.Hour)
		got := mustDeadline(t, setupCtx)
		cancelSetup()
		if d := got.Sub(c.want).Abs(); d > time.Second {
			t.Errorf("set-up deadline %v, want %v", got, c.want)
		}
	}
}

func mustDeadline(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	d, ok := ctx.Deadline()
	if !ok {
		t.Fatal("no deadline")
	}
	return d
}

// TestZeroConfigStartsEverywhere checks that Config{} works on every server:
// the TTL index where the server has TTL, the GC goroutine where it has not,
// and one log line saying which.
func TestZeroConfigStartsEverywhere(t *testing.T) {
	ttl := serverSupportsTTL(t)
	coll := testCollection(t, testClient(t, nil))
	logs := &syncBuffer{}
	slogger := testLogger(logs)
	var sweeps atomic.Int64
	store, err := newCountingStore(t, coll, Config{Logger: slogger}, &sweeps)
	if err != nil {
		t.Fatalf("NewStore(Config{}) on the %s server: %v", testServerKind, err)
	}
	want, line := ExpiryTTL, "the server's TTL index deletes expired sessions"
	if !ttl {
		want, line = ExpiryGC, "the GC goroutine deletes expired sessions"
	}
	defer func() {
		if gc := gcRan(t, store, &sweeps); gc != !ttl {
			t.Fatalf("GC goroutine ran = %v, want %v", gc, !ttl)
		}
	}()
	if store.expiry != want {
		t.Fatalf("expiry = %v, want %v", modeName(store.expiry), modeName(want))
	}
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Fatalf("%d log lines saying %q, want 1:\n%s", n, line, logs)
	}
	// One calm line at INFO: what the store does, with no server error in it.
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"INFO"`) && (strings.Contains(l, "error") || strings.Contains(l, "NotImplemented")) {
			t.Fatalf("an INFO line reads like a failure: %s", l)
		}
	}
	b, _ := saveNewSession(t, &storeFixture{store: store}, map[any]any{"k": "v"})
	b.do(func(w http.ResponseWriter, r *http.Request) {
		if s, err := store.Get(r, testSessionName); err != nil || s.Values["k"] != "v" {
			t.Fatalf("reload: %v, %v", s.Values, err)
		}
	})
}

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
		{ExpiryTTL, ExpiryTTL, true, true, false},
		{ExpiryGC, ExpiryGC, true, false, true},
		{ExpiryNone, ExpiryNone, false, false, false},
	} {
		t.Run(modeName(tt.mode), func(t *testing.T) {
			cmds := &commandLog{}
			coll := testCollection(t, testClient(t, cmds))
			var sweeps atomic.Int64
			store, err := newCountingStore(t, coll, Config{Expiry: tt.mode}, &sweeps)
			if !ttl {
				switch tt.mode {
				case ExpiryAuto:
					tt.wantMode, tt.wantTTL, tt.wantGC = ExpiryGC, false, true
				case ExpiryTTL:
					if !errors.Is(err, ErrInvalidConfig) {
						t.Fatalf("NewStore error = %v, want ErrInvalidConfig (the server refuses TTL indexes)", err)
					}
					wantMentions(t, err, ttlRefusalHint...)
					return
				}
			}
			if err != nil {
				t.Fatalf("NewStore: %v", err)
			}
			if store.expiry != tt.wantMode {
				t.Fatalf("expiry = %v, want %v", modeName(store.expiry), modeName(tt.wantMode))
			}
			if gc := gcRan(t, store, &sweeps); gc != tt.wantGC {
				t.Fatalf("GC goroutine ran = %v, want %v", gc, tt.wantGC)
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
			if tt.wantIndex && (idx[0].TTL != nil) != tt.wantTTL {
				t.Fatalf("index TTL = %v, want TTL=%v", idx[0].TTL, tt.wantTTL)
			}
			// Starting again over the existing index works too.
			if _, err := newExpiryStore(t, coll, tt.mode); err != nil {
				t.Fatalf("second NewStore: %v", err)
			}
		})
	}
}

// TestExpiryGCOverATTLIndex: ExpiryGC over a collection that keeps a TTL
// index on expiresAt (from an earlier ExpiryAuto) warns that the index
// deletes expired sessions unreported, and leaves it (the store drops no
// index). Given the index list (every server), then on the server's own
// index where it has TTL indexes.
func TestExpiryGCOverATTLIndex(t *testing.T) {
	const warning = "Config.Expiry is ExpiryGC, but a TTL index deletes expired sessions too"
	f := newFixture(t, Config{Expiry: ExpiryGC})
	zero, hour := int64(0), int64(3600)
	for _, tc := range []struct {
		index setup.Index
		warns bool
	}{
		{setup.Index{Name: "expiresAt_1", TTL: &zero}, true},
		{setup.Index{Name: "byExpiry", TTL: &hour}, true},
		{setup.Index{Name: "expiresAt_1"}, false},
	} {
		tc.index.Key, tc.index.Fields, tc.index.Ascending, tc.index.Ordered = `{"expiresAt": 1}`, []string{fieldExpiresAt}, true, true
		before := strings.Count(f.logs.String(), warning)
		if err := f.store.setupExpiry(context.Background(), []setup.Index{tc.index}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(f.logs.String(), warning) > before; got != tc.warns {
			t.Errorf("index %+v: warned %v, want %v:\n%s", tc.index, got, tc.warns, f.logs)
		}
	}
	coll := testCollection(t, testClient(t, nil))
	if first, err := newExpiryStore(t, coll, ExpiryAuto); err != nil || first.Expiry() != ExpiryTTL {
		return // no TTL index on this server: the cases above are all there is
	}
	logs := &syncBuffer{}
	if _, err := newCountingStore(t, coll, Config{Expiry: ExpiryGC, Logger: testLogger(logs)}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), warning) || len(expiresAtIndexes(t, coll)) != 1 {
		t.Fatalf("ExpiryGC over the TTL index: indexes %+v, logs:\n%s", expiresAtIndexes(t, coll), logs)
	}
}

// TestIndexConflictError checks the message of the error for an index on
// expiresAt that is not the store's and that collMod cannot change (it was
// ErrIndexConflict), and that a server without collMod gets the refusal of
// TTL indexes instead (it was ErrTTLUnsupported). collModError is gone: the
// test gives ensureTTLIndex the spec of a TTL index of an hour that the
// collection does not hold, so that collMod fails on every server, with
// the server's own error.
func TestIndexConflictError(t *testing.T) {
	coll := testCollection(t, testClient(t, nil))
	if _, err := coll.InsertOne(context.Background(), bson.D{{Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	store := &Store{coll: newCollection(coll), cfg: Config{Logger: testLogger(&syncBuffer{})}}
	spec, err := bson.Marshal(bson.D{{Key: "v", Value: 2}, {Key: "key", Value: bson.D{{Key: fieldExpiresAt, Value: 1}}},
		{Key: "name", Value: "by_expiry"}, {Key: "expireAfterSeconds", Value: int32(3600)}})
	if err != nil {
		t.Fatal(err)
	}
	err = store.ensureTTLIndex(context.Background(), []setup.Index{setup.ParseIndex(spec)})
	var ce mongo.CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("ensureTTLIndex = %v, want an error with the server's", err)
	}
	if setup.Unsupported(ce) {
		// The server has no collMod (FerretDB v1): the TTL refusal.
		if !errors.Is(err, errNoTTL) || errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%s gave %v, want the refusal of TTL indexes", ce.Name, err)
		}
		wantMentions(t, err, `collMod of index "by_expiry"`, ce.Name)
		t.Logf("the %s server has no collMod: %s", testServerKind, ce.Name)
		return
	}
	if !errors.Is(err, ErrInvalidConfig) || errors.Is(err, errNoTTL) {
		t.Fatalf("error = %v, want ErrInvalidConfig (a conflicting index)", err)
	}
	wantMentions(t, err, `"by_expiry"`, "expireAfterSeconds 3600",
		fmt.Sprintf(`db.getCollection(%q).dropIndex("by_expiry")`, coll.Name()), ce.Name)
}

// TestTTLMonitorDeletesExpiredSessions checks that an expired session's
// document goes: by the server's TTL monitor where the server has TTL
// indexes, by the GC goroutine that ExpiryAuto falls back to where it has
// not (FerretDB v1, which has no TTL monitor).
func TestTTLMonitorDeletesExpiredSessions(t *testing.T) {
	ttl := serverSupportsTTL(t)
	t.Parallel()
	f := newFixture(t, Config{GCInterval: 100 * time.Millisecond})
	want := ExpiryTTL
	if !ttl {
		want = ExpiryGC
	}
	if f.store.expiry != want {
		t.Fatalf("expiry = %v, want %v", modeName(f.store.expiry), modeName(want))
	}
	f.store.MaxAge(1)
	saveNewSession(t, f, map[any]any{"k": "v"})
	start := time.Now()
	deadline := start.Add(2 * time.Minute) // the monitor runs every 60s
	for f.count(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not delete the expired session within two minutes", modeName(want))
		}
		time.Sleep(time.Second)
	}
	t.Logf("%s deleted the expired session after %v", modeName(want), time.Since(start).Round(time.Second))
}

func TestExpiredSessionIsNotLoaded(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, id := saveNewSession(t, f, map[any]any{"user": "ada"})

	clock.Advance(59 * time.Second)
	if s, err := loadSession(t, f, b); err != nil || s.IsNew {
		t.Fatalf("before expiry: IsNew=%v err=%v, want the stored session", s.IsNew, err)
	}
	clock.Advance(2 * time.Second)
	s, err := loadSession(t, f, b)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !s.IsNew || len(s.Values) != 0 || s.ID == id {
		t.Fatalf("expired session loaded: IsNew=%v values=%v", s.IsNew, s.Values)
	}
	// Nothing deleted it: the store's check of expiresAt alone kept it out.
	if n := f.count(t); n != 1 {
		t.Fatalf("%d documents, want the expired one still there", n)
	}
}

func TestExpiryWithRealClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.store.MaxAge(1)
	b, _ := saveNewSession(t, f, map[any]any{"user": "ada"})
	if s, err := loadSession(t, f, b); err != nil || s.IsNew {
		t.Fatalf("fresh session not loaded: IsNew=%v err=%v", s.IsNew, err)
	}
	time.Sleep(2100 * time.Millisecond) // securecookie timestamps have one-second resolution
	s, err := loadSession(t, f, b)
	if !s.IsNew || len(s.Values) != 0 {
		t.Fatalf("session loaded after its max age: values=%v err=%v", s.Values, err)
	}
}

func TestIdleAndAbsoluteTimeouts(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	f := newFixture(t, Config{Now: clock.Now, AbsoluteTimeout: 150 * time.Second, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	b, id := saveNewSession(t, f, map[any]any{"n": 0})

	// touch loads the session, saves it and returns its expiry and the
	// response cookie's Max-Age.
	touch := func() (time.Time, int, error) {
		t.Helper()
		var exp time.Time
		var saveErr error
		rec := b.do(func(w http.ResponseWriter, r *http.Request) {
			s, err := f.store.Get(r, testSessionName)
			if err != nil || s.IsNew {
				saveErr = fmt.Errorf("load: IsNew=%v err=%v", s.IsNew, err)
				return
			}
			s.Values["n"] = s.Values["n"].(int) + 1
			if saveErr = s.Save(r, w); saveErr == nil {
				times, _ := f.store.Times(s)
				exp = times.ExpiresAt
			}
		})
		maxAge := 0
		for _, c := range (&http.Response{Header: rec.Header()}).Cookies() {
			maxAge = c.MaxAge
		}
		return exp, maxAge, saveErr
	}

	clock.Advance(50 * time.Second)
	exp, maxAge, err := touch()
	if err != nil || !exp.Equal(start.Add(110*time.Second)) || maxAge != 60 {
		t.Fatalf("at +50s: expiresAt=+%v maxAge=%d err=%v; want +110s (sliding), 60", exp.Sub(start), maxAge, err)
	}
	clock.Advance(50 * time.Second)
	exp, maxAge, err = touch()
	if err != nil || !exp.Equal(start.Add(150*time.Second)) || maxAge != 50 {
		t.Fatalf("at +100s: expiresAt=+%v maxAge=%d err=%v; want +150s (absolute cap), cookie 50", exp.Sub(start), maxAge, err)
	}
	stored := storedDocument(t, f, id)
	if got := stored.Lookup(fieldExpiresAt).Time(); !got.Equal(start.Add(150 * time.Second)) {
		t.Fatalf("document expiresAt = +%v, want +150s", got.Sub(start))
	}
	clock.Advance(49 * time.Second)
	if _, _, err := touch(); err != nil {
		t.Fatalf("at +149s: %v", err)
	}
	clock.Advance(2 * time.Second)
	if s, _ := loadSession(t, f, b); !s.IsNew {
		t.Fatal("session loaded past its absolute timeout")
	}

	// Idle timeout: a session left alone for longer than MaxAge is gone.
	b2, _ := saveNewSession(t, f, map[any]any{"n": 0})
	clock.Advance(61 * time.Second)
	if s, _ := loadSession(t, f, b2); !s.IsNew {
		t.Fatal("session loaded after its idle timeout")
	}
}

func TestBrowserSessionCookieStillExpiresOnServer(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	f := newFixture(t, Config{Now: clock.Now, IdleTimeout: time.Hour, Expiry: ExpiryNone})
	f.store.MaxAge(0)
	b := newBrowser()
	rec := b.do(func(w http.ResponseWriter, r *http.Request) {
		s, _ := f.store.Get(r, testSessionName)
		s.Values["k"] = "v"
		if err := s.Save(r, w); err != nil {
			t.Fatal(err)
		}
		if times, _ := f.store.Times(s); !times.ExpiresAt.Equal(start.Add(time.Hour)) {
			t.Fatalf("expiresAt = +%v, want +1h", times.ExpiresAt.Sub(start))
		}
	})
	if c := rec.Result().Cookies()[0]; c.MaxAge != 0 || !c.Expires.IsZero() {
		t.Fatalf("cookie MaxAge=%d Expires=%v, want a browser-session cookie", c.MaxAge, c.Expires)
	}
	clock.Advance(time.Hour + time.Second)
	if s, _ := loadSession(t, f, b); !s.IsNew {
		t.Fatal("browser-session cookie kept the session past IdleTimeout")
	}
}

// TestLifetimesAreHonoured checks the ways gorilla users set a session's
// lifetime: each gives a week, and a client back after two idle days (its
// cookie's signed timestamp two days old) still has its session.
func TestLifetimesAreHonoured(t *testing.T) {
	const week = 7 * 24 * 60 * 60
	for _, tt := range []struct {
		name  string
		store func(s *Store)
		sess  func(s *sessions.Session)
	}{
		{"store.MaxAge", func(s *Store) { s.MaxAge(week) }, nil},
		{"store.Options replaced", func(s *Store) { s.Options = &sessions.Options{Path: "/", MaxAge: week} }, nil},
		{"session.Options replaced", nil, func(s *sessions.Session) { s.Options = &sessions.Options{Path: "/", MaxAge: week} }},
		{"per-session remember me", nil, func(s *sessions.Session) { s.Options.MaxAge = week }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
			if tt.store != nil {
				tt.store(f.store)
			}
			b := newBrowser()
			var id string
			rec := b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				if tt.sess != nil {
					tt.sess(s)
				}
				s.Values["user"] = "ada"
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
				id = s.ID
			})
			if c := responseCookie(rec.Header(), testSessionName); c == nil || c.MaxAge != week {
				t.Fatalf("cookie %v, want Max-Age %d", rec.Header().Values("Set-Cookie"), week)
			}
			clock.Advance(48 * time.Hour)
			b.cookies[testSessionName].Value = agedCookie(testSessionName, id, testHashKey, 48*time.Hour)
			s, err := loadSession(t, f, b)
			if err != nil || s.IsNew || s.Values["user"] != "ada" {
				t.Fatalf("after two idle days: IsNew=%v values=%v err=%v; want the session", s.IsNew, s.Values, err)
			}
			// The server still ends it: a week after the last save.
			clock.Advance(5*24*time.Hour + time.Second)
			if s, _ := loadSession(t, f, b); !s.IsNew {
				t.Fatal("the session outlived its week")
			}
		})
	}
}

// TestExplicitLifetimeAndAbsoluteTimeout checks how an explicit MaxAge and
// the absolute timeout interact: the default absolute timeout never cuts an
// explicit lifetime short, an explicit one does. SessionTimes no longer has
// AbsoluteExpiresAt: the absolute limit is checked with absoluteLimit, which
// computed it.
func TestExplicitLifetimeAndAbsoluteTimeout(t *testing.T) {
	const day = 24 * time.Hour
	for _, tt := range []struct {
		name       string
		absolute   time.Duration
		maxAge     time.Duration
		wantExpiry time.Duration // from creation
		wantAbs    time.Duration // 0: none
	}{
		{"30 days, default absolute", 0, 30 * day, 30 * day, 30 * day},
		{"1 day, default absolute", 0, day, day, 7 * day},
		{"30 days, explicit 7-day absolute", 7 * day, 30 * day, 7 * day, 7 * day},
		{"30 days, no absolute", -1, 30 * day, 30 * day, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: tt.absolute})
			f.store.MaxAge(int(tt.maxAge / time.Second))
			b := newBrowser()
			rec := b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["k"] = 1
				if err := s.Save(r, w); err != nil {
					t.Fatal(err)
				}
				times, ok := f.store.Times(s)
				if !ok || !times.ExpiresAt.Equal(clock.Now().Add(tt.wantExpiry)) || !times.CreatedAt.Equal(clock.Now()) {
					t.Fatalf("ExpiresAt %v, want creation + %v", times.ExpiresAt.Sub(clock.Now()), tt.wantExpiry)
				}
				limit, hasLimit := f.store.absoluteLimit(s.Options.MaxAge, times.CreatedAt)
				if tt.wantAbs == 0 && hasLimit || tt.wantAbs != 0 && (!hasLimit || !limit.Equal(clock.Now().Add(tt.wantAbs))) {
					t.Fatalf("absolute limit %v (%v), want creation + %v", limit, hasLimit, tt.wantAbs)
				}
			})
			if c := responseCookie(rec.Header(), testSessionName); c == nil || c.MaxAge != int(tt.wantExpiry/time.Second) {
				t.Fatalf("cookie %v, want Max-Age %d", rec.Header().Values("Set-Cookie"), int(tt.wantExpiry/time.Second))
			}
		})
	}
}

// TestExplicitLifetimePastDefaultAbsoluteTimeout checks, with a fake clock
// and aged cookies, that a 30-day lifetime set explicitly (store.MaxAge, or
// a per-session "remember me") keeps a session eight days after its
// creation, past the 7-day default absolute timeout, whether the client came
// back every day or stayed away (the idle timeout is MaxAge, 30 days); and
// that an explicit Config.AbsoluteTimeout of 7 days ends it all the same.
func TestExplicitLifetimePastDefaultAbsoluteTimeout(t *testing.T) {
	const (
		day   = 24 * time.Hour
		month = 30 * day
	)
	for _, tt := range []struct {
		name     string
		absolute time.Duration // Config.AbsoluteTimeout
		remember bool          // MaxAge on the session, not on the store
		daily    bool          // a visit that saves every day, else idle
		want     bool          // the session loads eight days after creation
	}{
		{"store.MaxAge, idle", 0, false, false, true},
		{"store.MaxAge, daily visits", 0, false, true, true},
		{"remember me, idle", 0, true, false, true},
		{"remember me, daily visits", 0, true, true, true},
		{"store.MaxAge, explicit 7-day absolute, idle", 7 * day, false, false, false},
		{"store.MaxAge, explicit 7-day absolute, daily visits", 7 * day, false, true, false},
		{"remember me, explicit 7-day absolute, idle", 7 * day, true, false, false},
		{"remember me, explicit 7-day absolute, daily visits", 7 * day, true, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, AbsoluteTimeout: tt.absolute})
			if !tt.remember {
				f.store.MaxAge(int(month / time.Second))
			}
			// save sets the lifetime and saves the session: an application
			// that remembers a user sets it at every save, as with gorilla's
			// stores (this store also restores it on load).
			save := func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
				t.Helper()
				if tt.remember {
					s.Options.MaxAge = int(month / time.Second)
				}
				if err := s.Save(r, w); err != nil {
					t.Fatalf("Save: %v", err)
				}
			}
			b := newBrowser()
			var id string
			b.do(func(w http.ResponseWriter, r *http.Request) {
				s, _ := f.store.Get(r, testSessionName)
				s.Values["user"], s.Values["visits"] = "ada", 0
				save(w, r, s)
				id = s.ID
			})
			created := clock.Now()
			// visit is a request from the client, away after its previous
			// one, with a cookie signed that long ago. It runs fn on the
			// session if the store loads it, and returns the session.
			visit := func(away time.Duration, fn func(w http.ResponseWriter, r *http.Request, s *sessions.Session)) *sessions.Session {
				t.Helper()
				clock.Advance(away)
				b.cookies[testSessionName].Value = agedCookie(testSessionName, id, testHashKey, away)
				var s *sessions.Session
				var err error
				b.do(func(w http.ResponseWriter, r *http.Request) {
					if s, err = f.store.Get(r, testSessionName); err == nil && !s.IsNew && fn != nil {
						fn(w, r, s)
					}
				})
				if err != nil {
					t.Fatalf("Get at creation + %v: %v", clock.Now().Sub(created), err)
				}
				return s
			}
			if tt.daily {
				// Visits at 23h, 47h, ... 167h: all before any 7-day limit.
				for i := range 7 {
					away := day
					if i == 0 {
						away = day - time.Hour
					}
					s := visit(away, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
						s.Values["visits"] = s.Values["visits"].(int) + 1
						save(w, r, s)
					})
					if s.IsNew {
						t.Fatalf("visit %d, at creation + %v: a new session, want the stored one", i+1, clock.Now().Sub(created))
					}
				}
			}
			s := visit(created.Add(8*day).Sub(clock.Now()), nil)
			if got := !s.IsNew && s.Values["user"] == "ada"; got != tt.want {
				t.Fatalf("eight days after creation: IsNew=%v values=%v; want the session loaded = %v", s.IsNew, s.Values, tt.want)
			}
			if tt.want && tt.daily && s.Values["visits"] != 7 {
				t.Fatalf("visits = %v, want 7", s.Values["visits"])
			}
		})
	}
}

// TestMiddlewareTimes checks Store.Times around the middleware's save. Times
// no longer predicts that save (removed on purpose): in the handler it
// reports the session as loaded, and once the middleware is done, what the
// save wrote; the expectations of the old TestMiddlewareTimesInHandler are
// checked there.
func TestMiddlewareTimes(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(3600)
	var (
		session      *sessions.Session
		before       SessionTimes // Times in the handler
		beforeStored bool
	)
	change := true
	h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		if change {
			s.Values["n"] = clock.Now().UnixNano()
		}
		session = s
		before, beforeStored = f.store.Times(s)
	}).ServeHTTP
	after := func() (SessionTimes, bool) { return f.store.Times(session) }
	b := newBrowser()
	created := clock.Now()
	b.do(h) // a new session, which the middleware inserts
	if beforeStored {
		t.Fatalf("new session: Times in the handler %+v, want not stored yet", before)
	}
	if got, ok := after(); !ok || !got.ExpiresAt.Equal(created.Add(time.Hour)) || !got.CreatedAt.Equal(created) {
		t.Fatalf("new session: Times %+v %v, want expiry %v", got, ok, created.Add(time.Hour))
	}
	clock.Advance(10 * time.Minute)
	b.do(h) // changed: saved now
	if !beforeStored || !before.ExpiresAt.Equal(created.Add(time.Hour)) || !before.UpdatedAt.Equal(created) {
		t.Fatalf("changed session: Times in the handler %+v, want the session as loaded", before)
	}
	got, _ := after()
	limit, _ := f.store.absoluteLimit(session.Options.MaxAge, got.CreatedAt)
	if !got.ExpiresAt.Equal(clock.Now().Add(time.Hour)) || !got.CreatedAt.Equal(created) || !limit.Equal(created.Add(defaultAbsoluteTimeout)) {
		t.Fatalf("changed session: Times %+v (absolute limit %v), want expiry %v", got, limit, clock.Now().Add(time.Hour))
	}
	saved := got.ExpiresAt
	change = false
	clock.Advance(time.Second)
	b.do(h) // read-only, within the touch interval: nothing is written
	if got, _ := after(); !got.ExpiresAt.Equal(saved) || !before.ExpiresAt.Equal(saved) {
		t.Fatalf("read-only session: ExpiresAt %v (in the handler %v), want the stored %v", got.ExpiresAt, before.ExpiresAt, saved)
	}
	if doc, _ := browserDocument(t, f, b); !documentDate(t, doc, fieldExpiresAt).Equal(saved) {
		t.Fatalf("document expiresAt %v, want %v", documentDate(t, doc, fieldExpiresAt), saved)
	}
	// A new session the handler leaves empty is not stored.
	newBrowser().do(h)
	if got, ok := after(); ok || beforeStored {
		t.Fatalf("Times reports a new, empty session as stored: %+v", got)
	}
}

// TestMiddlewareTimesAreWhatTheSaveWrote checks, with the real clock moving
// while the handler runs, that Times gives exactly what the save wrote (it
// was TestMiddlewareTimesPredictTheSave, which read Times before the save:
// Times no longer predicts it), and in the handler what the last save wrote.
func TestMiddlewareTimesAreWhatTheSaveWrote(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	var session *sessions.Session
	var before SessionTimes
	h := sessionHandler(t, f.store, nil, func(w http.ResponseWriter, r *http.Request, s *sessions.Session) {
		s.Values["n"] = time.Now().UnixNano()
		time.Sleep(5 * time.Millisecond) // the clock moves before Times
		session = s
		before, _ = f.store.Times(s)
		time.Sleep(5 * time.Millisecond) // and before the save
	}).ServeHTTP
	b := newBrowser()
	var last SessionTimes
	for i := range 2 { // an insert, then an update
		b.do(h)
		doc, _ := browserDocument(t, f, b)
		got, ok := f.store.Times(session)
		if exp, upd := documentDate(t, doc, fieldExpiresAt), documentDate(t, doc, fieldUpdatedAt); !ok || !exp.Equal(got.ExpiresAt) || !upd.Equal(got.UpdatedAt) {
			t.Fatalf("Times after the save: expires %v, updated %v; saved: %v, %v", got.ExpiresAt, got.UpdatedAt, exp, upd)
		}
		if i == 1 && (!before.CreatedAt.Equal(last.CreatedAt) || !before.UpdatedAt.Equal(last.UpdatedAt) || !before.ExpiresAt.Equal(last.ExpiresAt)) {
			t.Fatalf("Times in the handler %+v, want the last save's %+v", before, last)
		}
		last = got
	}
}

// TestIndexedFieldsAreSetups checks that the fields the store indexes are
// named as internal/setup, which decides about their indexes, names them.
func TestIndexedFieldsAreSetups(t *testing.T) {
	if fieldExpiresAt != setup.FieldExpiresAt || fieldOwner != setup.FieldOwner {
		t.Fatalf("fields %s and %s; internal/setup has %s and %s", fieldExpiresAt, fieldOwner, setup.FieldExpiresAt, setup.FieldOwner)
	}
}

// TestUpgradeDropsFormat1OwnerIndex starts a store on a collection that
// format 1 stores prepared, with the sparse owner_1 and, from format 1's
// first commits, owner_1_expiresAt_1 (partial, or sparse where the server
// refuses that): NewStore replaces them by the partial owner index
// (FerretDB v1 and MongoDB 4.4 refuse a second index on {owner: 1}, so it
// drops owner_1 first).
func TestUpgradeDropsFormat1OwnerIndex(t *testing.T) {
	coll := testCollection(t, testClient(t, nil))
	ctx := context.Background()
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: fieldOwner, Value: 1}},
		Options: options.Index().SetName(setup.SparseOwnerIndexName).SetSparse(true)})
	if err != nil {
		t.Fatal(err)
	}
	early := mongo.IndexModel{Keys: bson.D{{Key: fieldOwner, Value: 1}, {Key: fieldExpiresAt, Value: 1}},
		Options: options.Index().SetName(setup.EarlyOwnerIndexName).SetPartialFilterExpression(bson.D{{Key: fieldOwner, Value: bson.D{{Key: "$exists", Value: true}}}})}
	if _, err = coll.Indexes().CreateOne(ctx, early); setup.Unsupported(err) { // FerretDB v1, as those commits did
		_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: early.Keys, Options: options.Index().SetName(setup.EarlyOwnerIndexName).SetSparse(true)})
	}
	if err != nil {
		t.Fatal(err)
	}
	// Format 2's lineage index goes too.
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: fieldLineage, Value: 1}},
		Options: options.Index().SetName(lineageIndexName).SetSparse(true)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewStore(ctx, coll, Config{Logger: testLogger(&syncBuffer{})}, testHashKey)
	if err != nil {
		t.Fatalf("NewStore on a format 1 collection: %v", err)
	}
	defer store.Close()
	if names := indexNames(t, coll); slices.Contains(names, setup.SparseOwnerIndexName) || !slices.Contains(names, ownerIndexName) ||
		slices.Contains(names, lineageIndexName) || slices.Contains(names, setup.EarlyOwnerIndexName) {
		t.Fatalf("indexes %q: want %s, not %s, %s nor %s", names, ownerIndexName, setup.SparseOwnerIndexName, setup.EarlyOwnerIndexName, lineageIndexName)
	}
}

// TestPartialTTLIndexIsRefused: a TTL index on expiresAt with a partial
// filter, which would never delete the sessions it leaves out, is not taken
// for the store's: NewStore refuses it, naming the dropIndex to run. A
// server without TTL indexes refuses to create it, and runs in GC mode.
func TestPartialTTLIndexIsRefused(t *testing.T) {
	coll := testCollection(t, testClient(t, nil))
	ctx := context.Background()
	_, created := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: fieldExpiresAt, Value: 1}},
		Options: options.Index().SetExpireAfterSeconds(0).SetPartialFilterExpression(bson.D{{Key: fieldOwner, Value: bson.D{{Key: "$exists", Value: true}}}})})
	store, err := NewStore(ctx, coll, Config{Logger: testLogger(&syncBuffer{})}, testHashKey)
	switch {
	case created == nil && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "partialFilterExpression")):
		t.Fatalf("NewStore over a partial TTL index: %v, want ErrInvalidConfig naming its partialFilterExpression", err)
	case created != nil && (err != nil || store.Expiry() != ExpiryGC):
		t.Fatalf("the server refused the index (%v); NewStore: %v, want GC mode", created, err)
	}
	if err == nil {
		store.Close()
	}
}

// TestIndexRaceAtStart: another instance creating the plain index on
// expiresAt between NewStore's listing and its createIndexes (an index
// conflict) has NewStore read the indexes again, and set up as with that
// index there: a TTL index where the server has them, GC mode elsewhere.
func TestIndexRaceAtStart(t *testing.T) {
	ttl := serverSupportsTTL(t)
	other := testCollection(t, testClient(t, nil))
	var once sync.Once
	monitor := &event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
		if _, err := e.Command.LookupErr("indexes", "0", "expireAfterSeconds"); e.CommandName == "createIndexes" && err == nil {
			once.Do(func() { // in the other instance
				_, _ = other.Indexes().CreateOne(context.Background(), mongo.IndexModel{Keys: bson.D{{Key: fieldExpiresAt, Value: 1}}})
			})
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")).SetMonitor(monitor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	store, err := newExpiryStore(t, client.Database(testDatabase).Collection(other.Name()), ExpiryAuto)
	if want := map[bool]ExpiryMode{true: ExpiryTTL, false: ExpiryGC}[ttl]; err != nil || store.Expiry() != want {
		t.Fatalf("NewStore: %v, %v; want %v", store, err, want)
	}
}

// TestUnacknowledgedWritesRefused: NewStore refuses a collection whose
// write concern is w=0 (unless ExpiryNone, which sends no command), and
// every kind of write through one (an insert, a save's update, a logout's
// delete, a sweep's deleteMany) fails with ErrInvalidConfig naming w=0, as
// the store could tell neither a concurrent save nor what an ending
// deleted. Each uses a client of its own: FerretDB answers w=0 commands,
// which leaves the client's next reply out of step.
func TestUnacknowledgedWritesRefused(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	b, _ := saveNewSession(t, f, map[any]any{"k": "v"})
	if _, err := f.coll.InsertOne(context.Background(), bson.D{{Key: fieldID, Value: "expired"}, // for the sweep
		{Key: fieldExpiresAt, Value: bson.NewDateTimeFromTime(time.Now().Add(-time.Hour))}}); err != nil {
		t.Fatal(err)
	}
	w0Store := func() *Store {
		client := testClient(t, nil)
		w0 := client.Database(testDatabase).Collection(f.coll.Name(), options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
		return storeOn(t, w0, Config{Expiry: ExpiryNone})
	}
	save := func(store *Store, r *http.Request, w http.ResponseWriter, change func(*sessions.Session)) error {
		s, err := store.Get(r, testSessionName)
		if err != nil {
			return err
		}
		change(s)
		return store.Save(r, w, s)
	}
	// NewStore, in a mode that sets indexes up, refuses it at once.
	client := testClient(t, nil)
	w0 := client.Database(testDatabase).Collection(f.coll.Name(), options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	if s, err := NewStore(context.Background(), w0, Config{Logger: testLogger(&syncBuffer{})}, testHashKey); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "w=0") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("NewStore (ExpiryAuto) on a w=0 collection: %v, want ErrInvalidConfig naming w=0", err)
	}
	for name, write := range map[string]func(*Store, *http.Request, http.ResponseWriter) error{
		"insert": func(st *Store, _ *http.Request, w http.ResponseWriter) error {
			return save(st, httptest.NewRequest(http.MethodGet, "/", nil), w, func(s *sessions.Session) { s.Values["k"] = "v" })
		},
		"update": func(st *Store, r *http.Request, w http.ResponseWriter) error {
			return save(st, r, w, func(s *sessions.Session) { s.Values["k"] = "changed" })
		},
		"delete": func(st *Store, r *http.Request, w http.ResponseWriter) error {
			return save(st, r, w, func(s *sessions.Session) { s.Options.MaxAge = -1 })
		},
		"deleteMany": func(st *Store, _ *http.Request, _ http.ResponseWriter) error {
			_, err := st.DeleteExpired(context.Background())
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := write(w0Store(), b.request(), httptest.NewRecorder()); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "w=0") {
				t.Fatalf("%s through a w=0 collection: %v, want ErrInvalidConfig naming w=0", name, err)
			}
		})
	}
}
