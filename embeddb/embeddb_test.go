package embeddb

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestStartServeClose(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	srv, err := Start(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()).SetTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	coll := client.Database("embeddb_test").Collection("docs")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	client.Disconnect(ctx)
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	again := make(chan error, 1)
	go func() { again <- srv.Close() }()
	select {
	case err := <-again:
		if err != nil {
			t.Fatalf("second Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second Close waits for a server gone")
	}

	// The data survives a restart on the same directory.
	srv, err = Start(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client, err = mongo.Connect(options.Client().ApplyURI(srv.URI()).SetTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	var got struct{ N int }
	if err := client.Database("embeddb_test").Collection("docs").FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got); err != nil || got.N != 1 {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
}

// TestStartRefusesAnUnusablePath checks that a data directory FerretDB's
// SQLite URL cannot carry (as a subtest's TempDir can be) is refused, not
// used wrongly.
func TestStartRefusesAnUnusablePath(t *testing.T) {
	for _, name := range []string{"case #01", "100% full", "why?"} {
		if _, err := Start(context.Background(), Config{Dir: filepath.Join(t.TempDir(), name)}); err == nil || !strings.Contains(err.Error(), "cannot use a path") {
			t.Errorf("Start in %q: %v, want it refused", name, err)
		}
	}
}

func TestStartNeedsDir(t *testing.T) {
	if _, err := Start(context.Background(), Config{}); err == nil {
		t.Fatal("Start without Dir succeeded")
	}
}

func TestStartStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := Start(ctx, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Close() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop after its context was cancelled")
	}
}
