package mongostore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongostore/mongostore/internal/faultproxy"
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
		_, ids[i] = saveNewSession(t, f, map[any]any{"secret": value})
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

// gcGoroutines returns how many GC goroutines are running among those of
// the stores that the calling test's goroutine created, from a dump of
// every goroutine's stack: a GC goroutine runs the function of
// (*Store).startGC, and WaitGroup.Go started it in the goroutine that called
// NewStore. (The store no longer has a channel that says its GC goroutine
// ended; Close waits for it, so none is left once Close returns.) A
// goroutine that has not begun yet shows no such frame: count them once the
// first sweep is done, or after Close.
func gcGoroutines(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 1<<10)
	self := strings.Fields(string(buf[:runtime.Stack(buf, false)])) // goroutine N [running]: ...
	if len(self) < 2 || self[0] != "goroutine" {
		t.Fatalf("cannot tell the test's goroutine from its stack %q", self)
	}
	created := "in goroutine " + self[1] + "\n"
	for {
		buf = make([]byte, 2*len(buf))
		if n := runtime.Stack(buf, true); n < len(buf) {
			buf = buf[:n]
			break
		}
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "mongostore.(*Store).startGC.func") && strings.Contains(g, created) {
			n++
		}
	}
	return n
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
	// One command, which the server answers with one index range, marked as
	// the GC's; on FerretDB v1, whose deletes are not atomic, a find, then a
	// delete of what it found under the chain locks.
	want := []string{"delete"}
	if atomic, _ := f.store.coll.atomicWrites(context.Background()); !atomic {
		want = []string{"find", "delete"}
	}
	if got := commandNames(f.cmds); !slices.Equal(got, want) {
		t.Fatalf("commands %q, want %q", got, want)
	}
	for _, cmd := range append(f.cmds.named("find"), f.cmds.named("delete")...) {
		if got, _ := cmd.Lookup("comment").StringValueOK(); got != sweepComment {
			t.Fatalf("%s comment %q, want %q", cmd.Index(0).Key(), got, sweepComment)
		}
	}
	for _, find := range f.cmds.named("find") { // the _ids, not the sessions (each up to MaxSize)
		wantProj, _ := bson.Marshal(bson.D{{Key: fieldID, Value: 1}})
		if !bytes.Equal(find.Lookup("projection").Document(), wantProj) || find.Lookup("limit").AsInt64() != sweepBatch {
			t.Fatalf("the sweep's find %s: want the projection %s and limit %d", find, bson.Raw(wantProj), sweepBatch)
		}
	}
	stmts, _ := f.cmds.named("delete")[0].Lookup("deletes").Array().Values()
	q := bson.D{{Key: fieldExpiresAt, Value: bson.D{{Key: "$lte", Value: bson.NewDateTimeFromTime(clock.Now())}}}}
	if len(stmts) == 1 && len(want) == 2 { // FerretDB v1: also the _ids found
		ids, _ := stmts[0].Document().Lookup("q", fieldID, "$in").Array().Values()
		q = append(q, bson.E{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}})
		if len(ids) != 10 {
			t.Fatalf("the delete names %d _ids, want the 10 found", len(ids))
		}
	}
	wantQ, _ := bson.Marshal(q)
	if len(stmts) != 1 || !bytes.Equal(stmts[0].Document().Lookup("q").Document(), wantQ) || stmts[0].Document().Lookup("limit").AsInt64() != 0 {
		t.Fatalf("delete statements %v, want one %v without limit", stmts, q)
	}
	left := liveIDs(t, f)
	for _, id := range expired {
		if left[docID(id)] {
			t.Fatal("an expired session survived")
		}
	}
	for _, id := range live {
		if !left[docID(id)] {
			t.Fatal("a live session was deleted")
		}
	}
	if n, err := f.store.DeleteExpired(context.Background()); n != 0 || err != nil {
		t.Fatalf("second DeleteExpired = %d, %v; want 0", n, err)
	}
}

// TestSweepWithASubscriberReadsInBatches: a sweep that reports each
// expired session reads their documents whole, sweepBatchWhole at a time
// (each can be Config.MaxSize), until a short batch.
func TestSweepWithASubscriberReadsInBatches(t *testing.T) {
	clock := newFakeClock()
	var events atomic.Int64
	f := newFixture(t, Config{Now: clock.Now, Expiry: ExpiryNone, OnEvent: func(_ context.Context, e Event) {
		if e.Kind == EventExpired {
			events.Add(1)
		}
	}})
	f.store.MaxAge(60)
	saveSessions(t, f, sweepBatchWhole+10, "old")
	clock.Advance(2 * time.Minute)
	f.cmds.reset()
	if n, err := f.store.DeleteExpired(context.Background()); n != sweepBatchWhole+10 || err != nil || events.Load() != n {
		t.Fatalf("DeleteExpired = %d, %v, with %d EventExpired; want %d", n, err, events.Load(), sweepBatchWhole+10)
	}
	finds := f.cmds.named("find")
	if len(finds) != 2 {
		t.Fatalf("%d finds, want 2", len(finds))
	}
	for _, find := range finds {
		if _, err := find.LookupErr("projection"); err == nil || find.Lookup("limit").AsInt64() != sweepBatchWhole {
			t.Fatalf("the sweep's find %s: want whole documents, limit %d", find, sweepBatchWhole)
		}
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

// waitSweeps waits for n sweeps signalled on sweeps.
func waitSweeps(t *testing.T, sweeps <-chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-sweeps:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d GC sweeps in 30s, want %d", i, n)
		}
	}
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
		if !left[docID(id)] {
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

	if n := gcGoroutines(t); n != 1 {
		t.Fatalf("%d GC goroutines before Close, want 1", n)
	}
	start := time.Now()
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	if n := gcGoroutines(t); n != 0 {
		t.Fatal("Close returned before the GC goroutine stopped")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	// There is no ErrClosed any more: DeleteExpired works after Close.
	if n, err := f.store.DeleteExpired(context.Background()); n != 0 || err != nil {
		t.Fatalf("DeleteExpired after Close = %d, %v; want 0, nil", n, err)
	}
	if err := f.store.Close(); err != nil { // idempotent
		t.Fatalf("second Close: %v", err)
	}
}

// TestGCSweepsUntilClose was TestRunGCStopsOnCancel and TestRunGCAfterClose:
// RunGC is gone, and with it its context, its interval argument and
// ErrClosed. The GC goroutine sweeps every GCInterval until Close, which
// logs no failure; Config checks the interval.
func TestGCSweepsUntilClose(t *testing.T) {
	sweeps := make(chan struct{}, 100)
	f := newFixture(t, Config{Expiry: ExpiryGC, GCInterval: 100 * time.Millisecond,
		afterSweep: func() {
			select {
			case sweeps <- struct{}{}:
			default:
			}
		}})
	waitSweeps(t, sweeps, 3) // the first, at start, and two more
	if n := len(gcRecords(t, f.logs)); n < 3 {
		t.Fatalf("%d sweeps logged, want at least 3:\n%s", n, f.logs)
	}
	if n := gcGoroutines(t); n != 1 {
		t.Fatalf("%d GC goroutines, want 1", n)
	}
	f.store.Close()
	if n := gcGoroutines(t); n != 0 {
		t.Fatal("the GC goroutine did not stop at Close")
	}
	if strings.Contains(f.logs.String(), "gc sweep failed") {
		t.Fatalf("spurious sweep failure logged:\n%s", f.logs)
	}
	_, err := NewStore(context.Background(), f.coll, Config{Expiry: ExpiryGC, GCInterval: time.Millisecond}, testHashKey)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewStore with a 1ms GCInterval = %v, want ErrInvalidConfig", err)
	}
}

// proxiedCollection returns a fresh collection of the test server reached
// through a fault proxy, and the proxy. The collection is dropped through a
// direct connection when the test ends.
func proxiedCollection(t *testing.T, clientOpts *options.ClientOptions) (*mongo.Collection, *faultproxy.Proxy) {
	t.Helper()
	uri := os.Getenv("MONGODB_URI")
	upstream, err := faultproxy.Host(uri)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	proxied, err := proxy.MongoURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(clientOpts.ApplyURI(proxied))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	coll := testCollection(t, testClient(t, nil))
	return client.Database(testDatabase).Collection(coll.Name()), proxy
}

// TestGCSurvivesFailingSweeps checks that the GC goroutine goes on after
// failed sweeps, logging each. RunGC is gone, and NewStore in a GC mode
// needs a server, so the server becomes unreachable after the start: the
// store reaches it through a proxy that then refuses every connection.
func TestGCSurvivesFailingSweeps(t *testing.T) {
	coll, proxy := proxiedCollection(t, options.Client().SetServerSelectionTimeout(500*time.Millisecond))
	logs := &syncBuffer{}
	sweeps := make(chan struct{}, 1)
	store, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryGC, GCInterval: 100 * time.Millisecond,
		Logger: testLogger(logs), afterSweep: func() {
			select {
			case sweeps <- struct{}{}:
			default:
			}
		}}, testHashKey)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	waitSweeps(t, sweeps, 1)
	proxy.Refuse(true)
	proxy.Cut()

	deadline := time.Now().Add(30 * time.Second)
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
		if gcGoroutines(t) != 1 {
			t.Fatal("the GC goroutine ended after a failed sweep")
		}
		time.Sleep(20 * time.Millisecond)
	}
	store.Close()
	if n := gcGoroutines(t); n != 0 {
		t.Fatal("the GC goroutine did not stop at Close")
	}
	_, err = store.DeleteExpired(context.Background())
	if !errors.Is(err, ErrDatabase) {
		t.Fatalf("DeleteExpired on a dead server = %v, want ErrDatabase", err)
	}
}

// TestCloseStopsABlockedSweep checks that Close stops the GC goroutine
// while a sweep waits on a server that does not answer: the sweep's own
// bound (Config.Timeout, an hour here) is not waited for.
func TestCloseStopsABlockedSweep(t *testing.T) {
	cmds := &commandLog{}
	coll, proxy := proxiedCollection(t, options.Client().SetMonitor(cmds.monitor()))
	t.Cleanup(func() { proxy.BlackHole(false) })
	logs := &syncBuffer{}
	var holed atomic.Bool
	store, err := NewStore(context.Background(), coll, Config{Expiry: ExpiryGC, GCInterval: 100 * time.Millisecond,
		Timeout: time.Hour, Logger: testLogger(logs), afterSweep: func() {
			// After the first sweep, in the GC goroutine: the next sweep's
			// delete goes into the black hole.
			if !holed.Swap(true) {
				cmds.reset()
				proxy.BlackHole(true)
			}
		}}, testHashKey)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	deadline := time.Now().Add(30 * time.Second)
	for len(cmds.named("delete"))+len(cmds.named("find")) == 0 { // FerretDB v1's sweep starts with a find
		if time.Now().After(deadline) {
			t.Fatal("no sweep started within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	closed := make(chan struct{})
	go func() {
		store.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not stop the GC goroutine while its sweep was blocked")
	}
	if n := gcGoroutines(t); n != 0 {
		t.Fatal("Close returned before the GC goroutine stopped")
	}
	if strings.Contains(logs.String(), "gc sweep failed") {
		t.Fatalf("the sweep stopped by Close was logged as a failure:\n%s", logs)
	}
}

// encodeHook is the store's codec, running hook once after an Encode if
// one is set.
type encodeHook struct {
	Codec
	hook atomic.Pointer[func()]
}

func (c *encodeHook) Encode(v map[any]any) ([]byte, error) {
	b, err := c.Codec.Encode(v)
	if h := c.hook.Swap(nil); h != nil {
		(*h)()
	}
	return b, err
}

// TestSweepSparesASessionSavedAtItsExpiry checks that a sweep starting
// just after a session's expiry never deletes it under a save of the same
// process that began just before and extends it (on FerretDB v1, a delete
// reads, then deletes by _id): the save either fails or lasts.
func TestSweepSparesASessionSavedAtItsExpiry(t *testing.T) {
	clock, codec := newFakeClock(), &encodeHook{Codec: compactCodec{&keyCache{}}}
	f := newFixture(t, Config{Expiry: ExpiryNone, Now: clock.Now, Codec: codec, IdleTimeout: time.Second})
	f.store.Options.MaxAge = 0 // the idle timeout: a second
	for i := range 40 {
		b, _ := saveNewSession(t, f, map[any]any{"n": i})
		clock.Advance(time.Second - time.Millisecond)
		r, s := loaded(t, f, b)
		s.Values["k"] = "v"
		swept := make(chan struct{})
		expire := func() { // once the save has taken its time, before it writes
			clock.Advance(2 * time.Millisecond)
			go func() { _, _ = f.store.DeleteExpired(context.Background()); close(swept) }()
		}
		codec.hook.Store(&expire)
		err := s.Save(r, httptest.NewRecorder())
		<-swept
		if got, _ := loadSession(t, f, b); err == nil && got.IsNew {
			t.Fatalf("iteration %d: the save returned nil, extending the session, yet the sweep deleted it", i)
		}
		clock.Advance(time.Hour)
	}
}

// TestSweepSurvivesAPanickingCodec: the GC goroutine's sweep, with a
// subscriber (it decodes each expired session to report it), meets a codec
// that panics: the panic is logged by its type, and the goroutine goes on
// (before, it ended the process).
func TestSweepSurvivesAPanickingCodec(t *testing.T) {
	codec := &decodePanics{Codec: compactCodec{&keyCache{}}}
	clock := newFakeClock()
	f := newFixture(t, Config{Codec: codec, Now: clock.Now, Expiry: ExpiryNone, OnEvent: func(context.Context, Event) {}})
	saveNewSession(t, f, map[any]any{"k": "v"})
	codec.armed.Store(true)
	clock.Advance(48 * time.Hour)
	f.store.sweep(context.Background()) // panics through without the recovery
	if logs := f.logs.String(); !strings.Contains(logs, "mongostore: gc sweep panicked") || strings.Contains(logs, "codec bug") {
		t.Fatalf("logs:\n%s", logs)
	}
}
