package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/gorilla/sessions"
	lazy "github.com/laziness-coders/mongostore"
	mongov1 "go.mongodb.org/mongo-driver/mongo"
	optionsv1 "go.mongodb.org/mongo-driver/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// openLaziness opens github.com/laziness-coders/mongostore on coll's
// namespace, with a mongo-driver v1 client, as gin-contrib/sessions'
// mongodriver.NewStore does: the store's key and MaxAge, and its TTL index
// unless the server refuses it. It returns the store, what it is, and the
// function that disconnects its client.
func openLaziness(ctx context.Context, uri string, coll *mongo.Collection, key []byte, maxAge int, out io.Writer) (
	sessions.Store, string, func(context.Context) error, error) {
	client, err := mongov1.Connect(ctx, optionsv1.Client().ApplyURI(uri))
	if err != nil {
		return nil, "", nil, fmt.Errorf("laziness: connect (mongo-driver v1): %w", err)
	}
	c := client.Database(coll.Database().Name()).Collection(coll.Name())
	open := func(ensureTTL bool) (store sessions.Store, err error) {
		defer func() { // NewMongoStore panics when it cannot create its TTL index
			if r := recover(); r != nil {
				err = fmt.Errorf("NewMongoStore: %v", r)
			}
		}()
		return lazy.NewMongoStore(c, maxAge, ensureTTL, key), nil
	}
	store, err := open(true)
	if err != nil {
		fmt.Fprintf(out, "laziness: opened without its TTL index, which the server refused: %v\n", err)
		store, _ = open(false) // creates no index: cannot panic
	}
	version := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			version[m.Path] = m.Version
		}
	}
	return store, fmt.Sprintf("github.com/laziness-coders/mongostore %s (gin-contrib/sessions' mongodriver store) on go.mongodb.org/mongo-driver %s, Get + Save as the store's variant",
		version["github.com/laziness-coders/mongostore"], version["go.mongodb.org/mongo-driver"]), client.Disconnect, nil
}
