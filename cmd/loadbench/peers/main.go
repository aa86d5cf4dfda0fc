// Command peers is cmd/loadbench with other MongoDB session stores for
// gorilla/sessions measured beside mongostore, as further variants in the
// same interleaved rounds, against the same server, through the same
// handlers as the store's Get + Save variant (load the session from its
// cookie; in read-write mode change a value and save):
//
//   - laziness: github.com/laziness-coders/mongostore, on mongo-driver v1,
//     the store that gin-contrib/sessions' mongo/mongodriver package wraps;
//     opened as gin-contrib's NewStore opens it (with its TTL index, where
//     the server has TTL indexes), with the store's keys and cookie
//     MaxAge, on a collection of its own.
//
// It is a module of its own so that mongostore's go.mod never requires
// mongo-driver v1 or the peers; it runs the measuring code of
// mongostore's internal/loadbench (a replace directive points at this
// repository). Its flags are cmd/loadbench's; -variants also takes the
// peers' names. The table of ratios to the floor gets one row per peer,
// and a second table gives the store's and the middleware's req/s over
// each peer's, with the goal: the store at least 1.10 times laziness.
//
// Usage (make bench-http runs it):
//
//	cd cmd/loadbench/peers && MONGODB_URI=mongodb://127.0.0.1:27017/ go run . [flags]
package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/gorilla/sessions"
	lazy "github.com/laziness-coders/mongostore"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/mongostore/mongostore/internal/loadbench"
)

func main() { loadbench.Main(laziness()) }

const (
	lazinessModule = "github.com/laziness-coders/mongostore"
	driverV1Module = "go.mongodb.org/mongo-driver"
)

// laziness is github.com/laziness-coders/mongostore as a peer.
func laziness() loadbench.Peer {
	return loadbench.Peer{
		Name: "laziness",
		About: fmt.Sprintf("%s %s (gin-contrib/sessions' mongodriver store) on %s %s, Get + Save as the store's variant",
			lazinessModule, moduleVersion(lazinessModule), driverV1Module, moduleVersion(driverV1Module)),
		StoreGoal: 1.10,
		Open:      openLaziness,
	}
}

// openLaziness connects a mongo-driver v1 client and opens the store as
// gin-contrib/sessions' mongodriver.NewStore does, with ensureTTL (a TTL
// index on its modified field), or without it on a server that has no TTL
// indexes (FerretDB v1): the benchmark does not wait for expiry.
func openLaziness(ctx context.Context, cfg loadbench.PeerConfig) (sessions.Store, func(context.Context) error, error) {
	client, err := mongo.Connect(ctx, options.Client().ApplyURI(cfg.URI))
	if err != nil {
		return nil, nil, fmt.Errorf("connect (mongo-driver v1): %w", err)
	}
	coll := client.Database(cfg.DB).Collection(cfg.Collection)
	store, err := newLazinessStore(coll, cfg, true)
	if err != nil {
		fmt.Fprintf(cfg.Out, "peer laziness: opened without its TTL index, which the server refused: %v\n", err)
		store, err = newLazinessStore(coll, cfg, false)
	}
	if err != nil {
		return nil, nil, errors.Join(err, client.Disconnect(context.WithoutCancel(ctx)))
	}
	return store, client.Disconnect, nil
}

// newLazinessStore calls NewMongoStore, which panics when it cannot create
// its TTL index.
func newLazinessStore(coll *mongo.Collection, cfg loadbench.PeerConfig, ensureTTL bool) (store *lazy.MongoStore, err error) {
	defer func() {
		if r := recover(); r != nil {
			store, err = nil, fmt.Errorf("NewMongoStore: %v", r)
		}
	}()
	return lazy.NewMongoStore(coll, cfg.MaxAge, ensureTTL, cfg.Keys...), nil
}

// moduleVersion is the version of module path built into the binary.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == path {
				if m.Replace != nil {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return "(version unknown)"
}
