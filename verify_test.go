package mongostore

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestCheckDocument(t *testing.T) {
	f := newFixture(t, Config{Expiry: ExpiryNone})
	_, id := saveNewSession(t, f, map[any]any{"user": "ada"})
	doc := storedDocument(t, f, id)
	tampered, err := bson.Marshal(bson.D{{Key: "$set", Value: bson.D{{Key: fieldRev, Value: int64(9)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.coll.UpdateOne(context.Background(), idFilter(docID(id)), bson.Raw(tampered)); err != nil {
		t.Fatal(err)
	}
	foreign, err := bson.Marshal(bson.D{{Key: "name", Value: "ada"}, {Key: "email", Value: "ada@example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	other := &storeFixture{store: storeOn(t, f.coll, Config{Expiry: ExpiryNone, Codec: JSONCodec{}}), coll: f.coll}
	_, otherID := saveNewSession(t, other, map[any]any{"user": "bob"})
	for _, tc := range []struct {
		name  string
		store *Store
		doc   bson.Raw
		ok    bool
	}{
		{"the store's keys", f.store, doc, true},
		{"rotated, the old key second", storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey, nil, testHashKey), doc, true},
		{"another hash key", storeOn(t, f.coll, Config{Expiry: ExpiryNone}, otherHashKey), doc, false},
		{"a block key the application does not use", storeOn(t, f.coll, Config{Expiry: ExpiryNone}, testHashKey, testBlockKey), doc, false},
		{"values another codec wrote", f.store, storedDocument(t, f, otherID), true},
		{"changed without the keys", f.store, storedDocument(t, f, id), false},
		{"not a session document", f.store, foreign, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.store.CheckDocument(tc.doc)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrDecode)) {
				t.Fatalf("CheckDocument = %v, want ok %v or ErrDecode", err, tc.ok)
			}
		})
	}
}
