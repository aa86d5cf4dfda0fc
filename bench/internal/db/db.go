// Package db is what the benchmarks do with the bare driver (connect, name
// the server, copy the shape of the store's documents), and the embedded server.
package db

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongostore/mongostore/embeddb"
	"github.com/mongostore/mongostore/internal/connstr"
)

// Connect connects to uri, with monitor unless nil, and names the server ("MongoDB 8.0.4",
// "FerretDB v2.5.0 (MongoDB 7.0.77)"); disconnect has a time bound of its own.
func Connect(ctx context.Context, uri string, monitor *event.CommandMonitor) (client *mongo.Client, server string, disconnect func(context.Context) error, err error) {
	if client, err = mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(monitor)); err != nil {
		return nil, "", nil, errors.New(connstr.MaskParseError(err.Error(), uri)) // the driver's quotes parts of the URI
	}
	disconnect = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return client.Disconnect(ctx)
	}
	raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil {
		return nil, "", nil, errors.Join(fmt.Errorf("buildInfo: %w", err), disconnect(ctx))
	}
	version, _ := raw.Lookup("version").StringValueOK()
	server = "MongoDB " + version
	if v, ok := raw.Lookup("ferretdbVersion").StringValueOK(); ok { // FerretDB v1
		server = fmt.Sprintf("FerretDB %s (%s)", strings.Replace(v, "unknown", "v1", 1), server)
	} else if v, ok := raw.Lookup("ferretdb", "version").StringValueOK(); ok { // v2
		server = fmt.Sprintf("FerretDB %s (%s)", v, server)
	}
	return client, server, disconnect, nil
}

// Read returns the documents of coll, at most limit (0: all), or an error.
func Read(ctx context.Context, coll *mongo.Collection, limit int64) ([]bson.Raw, error) {
	var docs []bson.Raw
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetLimit(limit))
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil || len(docs) == 0 {
		return nil, fmt.Errorf("read the store's documents: %d read, %v", len(docs), err)
	}
	return docs, nil
}

// Reshape copies doc and its embedded documents: strings and binaries random of
// the same length, ObjectIDs new, each date date(its time), the rest kept.
func Reshape(doc bson.Raw, date func(time.Time) any) (bson.D, error) {
	elems, err := doc.Elements()
	out := make(bson.D, len(elems))
	for i, e := range elems {
		v := e.Value()
		var nv any = v
		if s, ok := v.StringValueOK(); ok {
			nv = RandomHex(len(s))
		} else if sub, data, ok := v.BinaryOK(); ok {
			nv = bson.Binary{Subtype: sub, Data: RandomBytes(len(data))}
		} else if _, ok := v.ObjectIDOK(); ok {
			nv = bson.NewObjectID()
		} else if t, ok := v.TimeOK(); ok {
			nv = date(t)
		} else if d, ok := v.DocumentOK(); ok && err == nil {
			nv, err = Reshape(d, date)
		}
		out[i] = bson.E{Key: e.Key(), Value: nv}
	}
	return out, err
}

// Latest returns the key and time of doc's latest date: a session's expiry.
func Latest(doc bson.Raw) (key string, t time.Time) {
	elems, _ := doc.Elements() // a document the server sent
	for _, e := range elems {
		if et, ok := e.Value().TimeOK(); ok && et.After(t) {
			key, t = e.Key(), et
		}
	}
	return key, t
}

// RandomBytes returns n random bytes.
func RandomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}

// RandomHex returns n random hex digits.
func RandomHex(n int) string { return hex.EncodeToString(RandomBytes((n + 1) / 2))[:n] }

// StartEmbedded starts embeddb's FerretDB v1 server in process, its files in
// a new temporary directory, on a free loopback port; stop removes them.
func StartEmbedded(ctx context.Context) (uri string, stop func() error, err error) {
	dir, err := os.MkdirTemp("", "mongostore-bench-")
	if err != nil {
		return "", nil, err
	}
	srv, err := embeddb.Start(ctx, embeddb.Config{Dir: dir, Addr: "127.0.0.1:0"})
	if err != nil {
		return "", nil, errors.Join(err, os.RemoveAll(dir))
	}
	return srv.URI(), func() error { return errors.Join(srv.Close(), os.RemoveAll(dir)) }, nil
}
