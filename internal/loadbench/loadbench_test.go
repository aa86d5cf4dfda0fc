package loadbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/sessions"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongostore/mongostore"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("MONGODB_URI", "mongodb://env/")
	s, err := parseFlags(nil, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.uri != "mongodb://env/" || s.users != 8 || s.rounds != 3 || s.round != 3*time.Second ||
		!slices.Equal(s.modes, []string{"rw", "ro"}) || !slices.Equal(s.variants, []string{"floor", "store", "middleware"}) ||
		s.db != "mongostore_loadbench" || s.timeout != 5*time.Minute || s.cpuProfile != "" || s.encrypt {
		t.Errorf("defaults: %+v", s)
	}

	s, err = parseFlags([]string{"-uri", "mongodb://h/", "-users", "2", "-rounds", "5", "-round", "100ms",
		"-modes", " RO ", "-variants", "store,floor,store", "-cpuprofile", "cpu.pprof", "-encrypt"}, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.uri != "mongodb://h/" || s.users != 2 || s.rounds != 5 || s.round != 100*time.Millisecond ||
		!slices.Equal(s.modes, []string{"ro"}) || !slices.Equal(s.variants, []string{"store", "floor"}) ||
		s.cpuProfile != "cpu.pprof" || !s.encrypt {
		t.Errorf("parsed: %+v", s)
	}

	t.Setenv("MONGODB_URI", "")
	if _, err := parseFlags(nil, io.Discard, nil); !errors.Is(err, errNoServer) {
		t.Errorf("no URI: %v, want errNoServer", err)
	}
	for _, args := range [][]string{
		{"-modes", "rw,wr"},
		{"-modes", ""},
		{"-variants", "floor,cache"},
		{"-users", "0"},
		{"-rounds", "0"},
		{"-round", "0s"},
		{"-warmup", "-1s"},
		{"-db", ""},
		{"-timeout", "10s"}, // the default rounds take 60s
		{"extra"},
	} {
		if _, err := parseFlags(append([]string{"-uri", "mongodb://h/"}, args...), io.Discard, nil); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, tc := range []struct {
		d    []time.Duration
		p    float64
		want time.Duration
	}{
		{d, 0.5, 50},
		{d, 0.99, 99},
		{d, 1, 100},
		{d[:1], 0.99, 1},
		{d[:3], 0.5, 2},
		{nil, 0.5, 0},
	} {
		if got := percentile(tc.d, tc.p); got != tc.want {
			t.Errorf("percentile(%d samples, %v) = %d, want %d", len(tc.d), tc.p, got, tc.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		x    []float64
		want float64
	}{
		{[]float64{0.9}, 0.9},
		{[]float64{0.5, 0.9, 1}, 0.9},
		{[]float64{0.5, 0.7, 0.9, 1}, 0.8},
	} {
		if got := median(tc.x); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
}

func TestRotate(t *testing.T) {
	list := []string{"a", "b", "c"}
	for k, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := rotate(list, k); !slices.Equal(got, want) {
			t.Errorf("rotate(%v, %d) = %v, want %v", list, k, got, want)
		}
	}
}

func mustMarshal(t *testing.T, v any) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// storeLike returns commands like the store's: a find and a findAndModify
// whose update is update.
func storeLike(t *testing.T, at time.Time, update bson.D) storeCommands {
	return storeCommands{
		load: []command{{name: "find", at: at, body: mustMarshal(t, bson.D{
			{Key: "find", Value: "c"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: "ab"}}},
		})}},
		save: []command{{name: "findAndModify", at: at, body: mustMarshal(t, bson.D{
			{Key: "findAndModify", Value: "c"}, {Key: "query", Value: bson.D{{Key: "_id", Value: "ab"}}},
			{Key: "update", Value: update},
		})}},
	}
}

func TestUpdateTemplate(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sc := storeLike(t, at, bson.D{{Key: "$set", Value: bson.D{
		{Key: "v", Value: int32(2)},
		{Key: "data", Value: bson.Binary{Data: make([]byte, 100)}},
		{Key: "mac", Value: bson.Binary{Data: make([]byte, 32)}},
		{Key: "updatedAt", Value: bson.NewDateTimeFromTime(at)},
		{Key: "expiresAt", Value: bson.NewDateTimeFromTime(at.Add(24 * time.Hour))},
	}}})
	if w, err := sc.check(); err != nil || len(w) != 0 {
		t.Fatalf("check = %q, %v; want nothing", w, err)
	}
	tmpl, err := sc.learnUpdate()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tmpl.describe(), "$set {v 2, data 100B binary, mac 32B binary, updatedAt now, expiresAt now+24h0m0s}"; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
	// The document has data of 120 bytes: the floor writes that size.
	p := tmpl.payloads(bson.D{{Key: "_id", Value: "x"}, {Key: "data", Value: bson.Binary{Data: make([]byte, 120)}}})
	now := at.Add(time.Hour)
	update := bson.Raw(mustMarshal(t, tmpl.build(p[1], now)))
	set := update.Lookup("$set").Document()
	if v := set.Lookup("v").Int32(); v != 2 {
		t.Errorf("v = %d", v)
	}
	if _, data := set.Lookup("data").Binary(); len(data) != 120 {
		t.Errorf("data has %d bytes, want 120", len(data))
	}
	if _, mac := set.Lookup("mac").Binary(); len(mac) != 32 {
		t.Errorf("mac has %d bytes, want 32", len(mac))
	}
	if got := set.Lookup("updatedAt").Time(); !got.Equal(now) {
		t.Errorf("updatedAt = %v, want %v", got, now)
	}
	if got := set.Lookup("expiresAt").Time(); !got.Equal(now.Add(24 * time.Hour)) {
		t.Errorf("expiresAt = %v, want a day after %v", got, now)
	}
	if bytes.Equal(p[0][0][1].(bson.Binary).Data, p[1][0][1].(bson.Binary).Data) {
		t.Error("the two payloads are the same: saves would not change the data")
	}
}

func TestCheckCommands(t *testing.T) {
	at := time.Now()
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "data", Value: bson.Binary{Data: []byte{1}}}}}}

	sc := storeLike(t, at, set)
	sc.load = append(sc.load, sc.load[0])
	sc.save[0].body = mustMarshal(t, bson.D{
		{Key: "findAndModify", Value: "c"}, {Key: "query", Value: bson.D{{Key: "_id", Value: "ab"}, {Key: "x", Value: 1}}},
		{Key: "update", Value: set}, {Key: "new", Value: true}, {Key: "fields", Value: bson.D{{Key: "data", Value: 0}}},
	})
	w, err := sc.check()
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(w, "\n")
	for _, want := range []string{"load sends find {_id} + find {_id}", "filters on {_id, x}", "returns the new document", "projection"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}

	sc = storeLike(t, at, set)
	sc.save[0] = command{name: "update", body: mustMarshal(t, bson.D{{Key: "update", Value: "c"}})}
	if _, err := sc.check(); err == nil {
		t.Error("check accepted a save without findAndModify")
	}
	sc = storeLike(t, at, bson.D{{Key: "data", Value: 1}})
	if _, err := sc.learnUpdate(); err == nil {
		t.Error("learnUpdate accepted a replacement document")
	}
}

func TestCopyDocument(t *testing.T) {
	readAt := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tmpl := mustMarshal(t, bson.D{
		{Key: "_id", Value: "0123456789abcdef"},
		{Key: "v", Value: int32(2)},
		{Key: "data", Value: bson.Binary{Data: []byte("hello")}},
		{Key: "expiresAt", Value: bson.NewDateTimeFromTime(readAt.Add(time.Hour))},
	})
	now := readAt.Add(time.Minute)
	doc, err := copyDocument(tmpl, readAt, now)
	if err != nil {
		t.Fatal(err)
	}
	got := bson.Raw(mustMarshal(t, doc))
	if id := got.Lookup("_id").StringValue(); len(id) != 16 || id == "0123456789abcdef" {
		t.Errorf("_id = %q, want 16 other hex digits", id)
	}
	if v := got.Lookup("v").Int32(); v != 2 {
		t.Errorf("v = %d, want 2", v)
	}
	if _, data := got.Lookup("data").Binary(); len(data) != 5 {
		t.Errorf("data has %d bytes, want 5", len(data))
	}
	if e := got.Lookup("expiresAt").Time(); !e.Equal(now.Add(time.Hour)) {
		t.Errorf("expiresAt = %v, want %v", e, now.Add(time.Hour))
	}
	if _, err := copyDocument(mustMarshal(t, bson.D{{Key: "_id", Value: 1.5}}), readAt, now); err == nil {
		t.Error("copyDocument accepted a float _id")
	}
}

func TestWriteTable(t *testing.T) {
	mk := func(variant string, n int, rates ...float64) *result {
		r := &result{mode: modeRW, variant: variant, rates: rates}
		r.lat = make([]time.Duration, n)
		for i := range r.lat {
			r.lat[i] = time.Duration(i+1) * time.Millisecond
		}
		r.elapsed = 10 * time.Second
		return r
	}
	var out bytes.Buffer
	writeTable(&out, "header", []*result{
		mk(variantFloor, 1000, 100, 100),
		mk(variantStore, 960, 98, 94),
		mk(variantMiddleware, 900, 90, 90),
	})
	for _, want := range []string{
		"| rw | floor | 1000 | 100 | 500.00 | 990.00 | 1.000 | - |  | 0 |",
		"| rw | store | 960 | 96 | 480.00 | 951.00 | 0.960 | 0.960 (0.940–0.980) | ≥ 0.95 met | 0 |",
		"| rw | middleware | 900 | 90 | 450.00 | 891.00 | 0.900 | 0.900 (0.900–0.900) | ≥ 0.93 missed | 0 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks\n%s\nin\n%s", want, out.String())
		}
	}
}

// TestRun runs the whole benchmark, briefly, against the server in
// MONGODB_URI, if any.
func TestRun(t *testing.T) {
	uri := os.Getenv("MONGODB_URI")
	if uri == "" || testing.Short() {
		t.Skip("needs MONGODB_URI (and not -short)")
	}
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	s, err := parseFlags([]string{"-uri", uri, "-users", "2", "-rounds", "2", "-round", "150ms", "-warmup", "50ms",
		"-timeout", "2m", "-cpuprofile", profile}, io.Discard, []Peer{otherStore()})
	if err != nil {
		t.Fatal(err)
	}
	s.collPrefix = fmt.Sprintf("test%d_", time.Now().UnixNano())
	var out bytes.Buffer
	err = run(context.Background(), s, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"rw", "ro"} {
		for _, v := range []string{"floor", "store", "middleware", "other"} {
			row := "| " + mode + " | " + v + " | "
			i := strings.Index(out.String(), row)
			if i < 0 {
				t.Errorf("no row %q", row)
				continue
			}
			line, _, _ := strings.Cut(out.String()[i:], "\n")
			if !strings.HasSuffix(line, "| 0 |") || strings.HasPrefix(line, row+"0 |") {
				t.Errorf("row %q: no requests or some failed", line)
			}
		}
	}
	for _, row := range []string{"| rw | store ÷ other | ", "| ro | middleware ÷ other | "} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q", row)
		}
	}
	if strings.Contains(out.String(), "WARNING") {
		t.Error("the floor's commands differ from the store's")
	}
	if !otherClosed.Load() {
		t.Error("the peer's store was not closed")
	}
	if fi, err := os.Stat(profile); err != nil || fi.Size() == 0 {
		t.Errorf("CPU profile: %v", err)
	}

	// The collections, the store's and the peer's, are gone.
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	names, err := client.Database(s.db).ListCollectionNames(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, s.collPrefix+"loadbench_") {
			t.Errorf("collection %s left behind", n)
		}
	}
}

// otherClosed says otherStore's close ran.
var otherClosed atomic.Bool

// otherStore is a peer for the tests: another mongostore store, on a
// client of its own.
func otherStore() Peer {
	return Peer{
		Name:      "other",
		About:     "mongostore again, on a client of its own",
		StoreGoal: 0.5,
		Open: func(ctx context.Context, cfg PeerConfig) (sessions.Store, func(context.Context) error, error) {
			client, err := mongo.Connect(options.Client().ApplyURI(cfg.URI))
			if err != nil {
				return nil, nil, err
			}
			store, err := mongostore.NewStore(ctx, client.Database(cfg.DB).Collection(cfg.Collection), mongostore.Config{Logger: slog.New(slog.DiscardHandler)}, cfg.Keys...)
			if err != nil {
				return nil, nil, errors.Join(err, client.Disconnect(ctx))
			}
			return store, func(ctx context.Context) error {
				otherClosed.Store(true)
				return errors.Join(store.Close(), client.Disconnect(ctx))
			}, nil
		},
	}
}

func TestParseFlagsPeers(t *testing.T) {
	s, err := parseFlags([]string{"-uri", "mongodb://h/"}, io.Discard, []Peer{otherStore()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.variants, []string{"floor", "store", "middleware", "other"}) || len(s.peers) != 1 {
		t.Errorf("default variants %v, peers %d; want the built-in ones and the peer", s.variants, len(s.peers))
	}
	s, err = parseFlags([]string{"-uri", "mongodb://h/", "-variants", "floor,store"}, io.Discard, []Peer{otherStore()})
	if err != nil || len(s.peers) != 0 {
		t.Errorf("-variants floor,store: peers %d, %v; want none", len(s.peers), err)
	}
	for _, p := range []Peer{{Name: "store", Open: otherStore().Open}, {Name: "x"}, {Open: otherStore().Open}} {
		if _, err := parseFlags([]string{"-uri", "mongodb://h/"}, io.Discard, []Peer{p}); err == nil {
			t.Errorf("peer %q accepted", p.Name)
		}
	}
	if err := Run(context.Background(), []string{"-uri", "mongodb://h/", "-users", "0"}, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("Run with -users 0 = %v, want errUsage", err)
	}
}

func TestWritePeerTable(t *testing.T) {
	mk := func(mode, variant string, n int, rates ...float64) *result {
		r := &result{mode: mode, variant: variant, rates: rates}
		r.lat = make([]time.Duration, n)
		r.elapsed = 10 * time.Second
		return r
	}
	var out bytes.Buffer
	writePeerTable(&out, []*result{
		mk(modeRW, variantFloor, 1000, 100, 100),
		mk(modeRW, variantStore, 960, 98, 94),
		mk(modeRW, variantMiddleware, 900, 90, 90),
		mk(modeRW, "other", 800, 80, 80),
		mk(modeRO, variantStore, 2000, 200, 200),
		mk(modeRO, "other", 2000, 200, 200),
	}, []Peer{{Name: "other", About: "about other", StoreGoal: 1.1}})
	for _, want := range []string{
		"other: about other",
		"| rw | store ÷ other | 1.200 | 1.200 (1.175–1.225) | ≥ 1.10 met |",
		"| rw | middleware ÷ other | 1.125 | 1.125 (1.125–1.125) |  |",
		"| ro | store ÷ other | 1.000 | 1.000 (1.000–1.000) | ≥ 1.10 missed |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks\n%s\nin\n%s", want, out.String())
		}
	}
	out.Reset()
	writePeerTable(&out, nil, []Peer{{Name: "other"}})
	if out.Len() != 0 {
		t.Errorf("no results: printed %q", out.String())
	}
}
