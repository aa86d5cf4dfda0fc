package mongostore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// saveSessions saves n new sessions with the store's current MaxAge and
// returns their IDs.
func saveSessions(t *testing.T, f *storeFixture, n int, value string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		_, ids[i] = saveNew(t, f, map[any]any{"secret": value})
	}
	return ids
}

// liveIDs returns the document IDs left in the collection.
func liveIDs(t *testing.T, f *storeFixture) map[string]bool {
	t.Helper()
	cur, err := f.coll.Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]bool)
	for cur.Next(context.Background()) {
		out[cur.Current.Lookup(fieldID).StringValue()] = true
	}
	return out
}

func TestDeleteExpiredDeletesOnlyExpired(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone})
	f.store.MaxAge(60)
	expired := saveSessions(t, f, 10, "old")
	clock.Advance(30 * time.Second)
	f.store.MaxAge(3600)
	live := saveSessions(t, f, 4, "new")
	clock.Advance(31 * time.Second) // the first ten are one second past expiry

	f.cmds.reset()
	n, err := f.store.DeleteExpired(context.Background())
	if err != nil || n != 10 {
		t.Fatalf("DeleteExpired = %d, %v; want 10", n, err)
	}
	// One command, which the server answers with one index range (or one
	// scan, on FerretDB v1), marked as the GC's.
	if got := mwCommandNames(f.cmds); !slices.Equal(got, []string{"delete"}) {
		t.Fatalf("commands %q, want one delete", got)
	}
	cmd := f.cmds.named("delete")[0]
	stmts, _ := cmd.Lookup("deletes").Array().Values()
	want, _ := bson.Marshal(expiredFilter(clock.Now()))
	if len(stmts) != 1 || !bytes.Equal(stmts[0].Document().Lookup("q").Document(), want) || stmts[0].Document().Lookup("limit").AsInt64() != 0 {
		t.Fatalf("delete statements %v, want one {expiresAt: {$lte: now}} without limit", stmts)
	}
	if got, _ := cmd.Lookup("comment").StringValueOK(); got != GCComment {
		t.Fatalf("delete comment %q, want %q", got, GCComment)
	}
	left := liveIDs(t, f)
	for _, id := range expired {
		if left[f.store.hasher.docID(id)] {
			t.Fatal("an expired session survived")
		}
	}
	for _, id := range live {
		if !left[f.store.hasher.docID(id)] {
			t.Fatal("a live session was deleted")
		}
	}
	if n, err := f.store.DeleteExpired(context.Background()); n != 0 || err != nil {
		t.Fatalf("second DeleteExpired = %d, %v; want 0", n, err)
	}
}

// gcRecord is a log record of a sweep.
type gcRecord struct {
	Msg     string `json:"msg"`
	Deleted int64  `json:"deleted"`
	Error   string `json:"error"`
}

func gcRecords(t *testing.T, logs *syncBuffer) []gcRecord {
	t.Helper()
	var out []gcRecord
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var r gcRecord
		if line == "" || json.Unmarshal([]byte(line), &r) != nil {
			continue
		}
		if strings.HasPrefix(r.Msg, "mongostore: gc sweep") {
			out = append(out, r)
		}
	}
	return out
}

func TestGCGoroutine(t *testing.T) {
	clock := newFakeClock()
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryGC, GCInterval: 100 * time.Millisecond})
	f.store.MaxAge(60)
	expired := saveSessions(t, f, 5, "top-secret-value")
	f.store.MaxAge(3600)
	live := saveSessions(t, f, 2, "top-secret-value")
	clock.Advance(2 * time.Minute)

	deadline := time.Now().Add(10 * time.Second)
	for f.count(t) != int64(len(live)) {
		if time.Now().After(deadline) {
			t.Fatalf("GC goroutine left %d documents, want %d", f.count(t), len(live))
		}
		time.Sleep(20 * time.Millisecond)
	}
	left := liveIDs(t, f)
	for _, id := range live {
		if !left[f.store.hasher.docID(id)] {
			t.Fatal("the GC deleted a live session")
		}
	}

	var deleted int64
	for _, r := range gcRecords(t, f.logs) {
		deleted += r.Deleted
	}
	if deleted != int64(len(expired)) {
		t.Fatalf("sweep logs count %d deleted sessions, want %d:\n%s", deleted, len(expired), f.logs)
	}
	for _, secret := range append(append([]string{"top-secret-value"}, expired...), live...) {
		if strings.Contains(f.logs.String(), secret) {
			t.Fatal("the logs contain a session ID or value")
		}
	}

	start := time.Now()
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.store.gcDone:
	default:
		t.Fatal("Close returned before the GC goroutine stopped")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if _, err := f.store.DeleteExpired(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("DeleteExpired after Close = %v, want ErrClosed", err)
	}
	f.store.Close() // idempotent
}

func TestRunGCStopsOnCancel(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.store.RunGC(ctx, 100*time.Millisecond) }()
	time.Sleep(250 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunGC = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunGC did not stop after its context was cancelled")
	}
	if n := len(gcRecords(t, f.logs)); n < 2 {
		t.Fatalf("%d sweeps logged in 250ms at a 100ms interval, want at least 2", n)
	}
	if err := f.store.RunGC(context.Background(), time.Millisecond); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("RunGC with a 1ms interval = %v, want ErrInvalidConfig", err)
	}

	// Close stops a RunGC started by the application, too.
	go func() { done <- f.store.RunGC(context.Background(), 100*time.Millisecond) }()
	time.Sleep(50 * time.Millisecond)
	f.store.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("RunGC after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunGC did not stop at Close")
	}
}

func TestGCSurvivesFailingSweeps(t *testing.T) {
	// A client whose server is unreachable: every sweep fails.
	client, err := mongo.Connect(options.Client().
		ApplyURI("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=50&connectTimeoutMS=50"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Disconnect(context.Background()) })
	logs := &syncBuffer{}
	store, err := NewStore(context.Background(), client.Database("x").Collection("sessions"),
		Config{Expiry: ExpiryNone, Logger: testLogger(logs)}, testHashKey)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- store.RunGC(ctx, 100*time.Millisecond) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var failures int
		for _, r := range gcRecords(t, logs) {
			if r.Error != "" {
				failures++
			}
		}
		if failures >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d failed sweeps logged, want 3 (the loop must go on after a failure):\n%s", failures, logs)
		}
		select {
		case err := <-done:
			t.Fatalf("RunGC returned after a failed sweep: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunGC = %v, want context.Canceled", err)
	}
	_, err = store.DeleteExpired(context.Background())
	if !errors.Is(err, ErrDatabase) {
		t.Fatalf("DeleteExpired on a dead server = %v, want ErrDatabase", err)
	}
}

func TestRunGCAfterClose(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	f.store.Close()
	if err := f.store.RunGC(context.Background(), time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("RunGC after Close = %v, want ErrClosed", err)
	}
	if strings.Contains(f.logs.String(), "gc sweep failed") {
		t.Fatalf("spurious sweep failure logged:\n%s", f.logs)
	}
}

func TestGCDeletesDocumentsWithoutADate(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	live := saveSessions(t, f, 3, "v")
	// Documents written by something else: no TTL index and no
	// {expiresAt: {$lte: now}} ever matches them.
	junk := []any{
		bson.D{{Key: fieldID, Value: "string"}, {Key: fieldExpiresAt, Value: "2020-01-01T00:00:00Z"}},
		bson.D{{Key: fieldID, Value: "number"}, {Key: fieldExpiresAt, Value: int64(1577836800000)}},
		bson.D{{Key: fieldID, Value: "missing"}, {Key: fieldData, Value: "x"}},
	}
	if _, err := f.coll.InsertMany(context.Background(), junk); err != nil {
		t.Fatal(err)
	}
	if n, err := f.store.DeleteExpired(context.Background()); n != 0 || err != nil {
		t.Fatalf("DeleteExpired = %d, %v; want 0: it matches dates only", n, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.store.RunGC(ctx, 100*time.Millisecond) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.count(t) != int64(len(live)) {
		if time.Now().After(deadline) {
			t.Fatalf("the GC left %d documents, want the %d live sessions", f.count(t), len(live))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	left := liveIDs(t, f)
	for _, id := range live {
		if !left[f.store.hasher.docID(id)] {
			t.Fatal("the GC deleted a live session")
		}
	}
	var warned int64
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var r struct {
			Level   string `json:"level"`
			Msg     string `json:"msg"`
			Deleted int64  `json:"deleted"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.Level == "WARN" && strings.Contains(r.Msg, "not a date") {
			warned += r.Deleted
		}
	}
	if warned != int64(len(junk)) {
		t.Fatalf("warnings count %d documents without a date, want %d:\n%s", warned, len(junk), f.logs)
	}
}
