package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mongostore/mongostore"
	"github.com/mongostore/mongostore/internal/setup"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// sampleSize is how many documents the commands read to tell what the
// collection holds.
const sampleSize = 10

// anInteger stands for the BSON integer types in sessionFields.
const anInteger bson.Type = 0

// sessionFields are the fields of a session document with their types, as
// the store reads them (collection.go parseDocument): formats 1 and 2 (2
// adds lineage) have them all, and v.
var sessionFields = []struct {
	name string
	typ  bson.Type
}{{"rev", anInteger}, {"data", bson.TypeBinary}, {"mac", bson.TypeBinary}, {"createdAt", bson.TypeDateTime},
	{"updatedAt", bson.TypeDateTime}, {setup.FieldExpiresAt, bson.TypeDateTime}, {"maxAge", anInteger}}

// isSession reports whether doc has the shape of a session document: v 1
// or 2, and sessionFields, of their types; other fields may be there.
func isSession(doc bson.Raw) bool {
	if v, ok := doc.Lookup("v").AsInt64OK(); !ok || v < 1 || v > 2 {
		return false
	}
	for _, f := range sessionFields {
		v := doc.Lookup(f.name)
		if _, isInt := v.AsInt64OK(); (f.typ == anInteger && !isInt) || (f.typ != anInteger && v.Type != f.typ) {
			return false
		}
	}
	return true
}

// sessionSample reads up to sampleSize of c's documents, the live ones
// that expire last (the latest saved, with the application's current
// keys), or any if none is live. It returns the session documents among
// them, and an error if there were documents but none was a session's:
// the collection is not the store's.
func (a *app) sessionSample(ctx context.Context, c *conn) ([]bson.Raw, error) {
	live := bson.D{{Key: setup.FieldExpiresAt, Value: bson.D{{Key: "$gt", Value: time.Now()}}}}
	docs, err := c.find(ctx, live, options.Find().SetSort(bson.D{{Key: setup.FieldExpiresAt, Value: -1}}))
	if err == nil && len(docs) == 0 {
		docs, err = c.find(ctx, bson.D{}, options.Find())
	}
	if err != nil {
		return nil, fmt.Errorf("sample the documents of %s: %w", c.name(), err)
	}
	var sessions []bson.Raw
	for _, doc := range docs {
		if isSession(doc) {
			sessions = append(sessions, doc)
		}
	}
	switch {
	case len(sessions) == 0 && len(docs) > 0:
		return nil, fmt.Errorf("%s does not hold mongostore sessions: none of the %d documents sampled has the fields of a session "+
			"(v, rev, data, mac, createdAt, updatedAt, expiresAt, maxAge); the first has %s: check DB_NAME or -db, and "+
			"SESSION_COLLECTION or -collection", c.name(), len(docs), fieldNames(docs[0]))
	case len(sessions) < len(docs):
		fmt.Fprintf(a.stderr, "mongostore-admin: warning: %d of the %d documents sampled from %s are not sessions\n",
			len(docs)-len(sessions), len(docs), c.name())
	}
	return sessions, nil
}

// find returns up to sampleSize documents of c's collection that match
// filter.
func (c *conn) find(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder) ([]bson.Raw, error) {
	cur, err := c.coll.Find(ctx, filter, opts.SetLimit(sampleSize))
	if err != nil {
		return nil, err
	}
	var docs []bson.Raw
	return docs, cur.All(ctx, &docs)
}

// fieldNames lists the names of doc's fields, the first eight.
func fieldNames(doc bson.Raw) string {
	elems, _ := doc.Elements()
	var names []string
	for _, e := range elems[:min(len(elems), 8)] {
		names = append(names, e.Key())
	}
	return strings.Join(names, ", ")
}

// checkKeys returns an error if store, which has the keys of SESSION_KEY,
// can read none of sessions, sampled from c: the application has other
// keys. done says what the command did then.
func (a *app) checkKeys(store *mongostore.Store, c *conn, sessions []bson.Raw, done string) error {
	var first error
	for _, doc := range sessions {
		err := store.CheckDocument(doc)
		if err == nil {
			return nil
		}
		first = cmp.Or(first, err)
	}
	if first == nil {
		return nil
	}
	names := "SESSION_KEY"
	if a.getenv("SESSION_BLOCK_KEY") != "" {
		names += " and SESSION_BLOCK_KEY"
	}
	return fmt.Errorf("the keys of %s do not match the application's: none of the %d sessions sampled from %s "+
		"can be read with them (%v); %s", names, len(sessions), c.name(), first, done)
}
